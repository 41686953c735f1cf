package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// roleConfig embeds the shared structs as the roles do.
type roleConfig struct {
	ID        string `mapstructure:"id"`
	Endpoints `mapstructure:",squash"`
	Security  `mapstructure:",squash"`
	Logging   `mapstructure:",squash"`
}

// TestEndpointsKeys: the embedded structs keep the flat keys listen,
// advertise, admin-listen, log-level and log-format (deploy/ and the
// e2e tests use them) from flags, the environment and the file.
func TestEndpointsKeys(t *testing.T) {
	d := roleConfig{Endpoints: Endpoints{Listen: "127.0.0.1:1", AdminListen: "127.0.0.1:2"}, Logging: DefaultLogging()}
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	fs.String(FileFlag, "", "")
	fs.String("id", "", "")
	EndpointsFlags(fs, d.Endpoints, EndpointsHelp{Listen: "gRPC address", Advertise: "dial this"})
	SecurityFlags(fs, d.Security)
	LoggingFlags(fs, d.Logging)
	for flag, usage := range map[string]string{"listen": "gRPC address", "advertise": "dial this",
		"admin-listen": "HTTP address for /metrics, /livez, /readyz (and /debug/pprof/ with --enable-pprof)",
		"log-level":    "debug, info, warn or error", "log-format": "text or json"} {
		if f := fs.Lookup(flag); f == nil || f.Usage != usage {
			t.Fatalf("--%s: %+v", flag, f)
		}
	}
	file := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(file, []byte("advertise: node:9\nlog-format: json\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("STRATA_ADMIN_LISTEN", "127.0.0.1:3")
	if err := fs.Parse([]string{"--config", file, "--listen", "0.0.0.0:4"}); err != nil {
		t.Fatal(err)
	}
	got := d
	if err := Load(fs, &got); err != nil {
		t.Fatal(err)
	}
	want := Endpoints{Listen: "0.0.0.0:4", Advertise: "node:9", AdminListen: "127.0.0.1:3"}
	if got.Endpoints != want || got.LogFormat != "json" || got.LogLevel != "info" {
		t.Fatalf("%+v, want %+v and json/info logging", got, want)
	}
	if got.AdvertiseAddress() != "node:9" {
		t.Fatalf("AdvertiseAddress %s", got.AdvertiseAddress())
	}
}

func TestEndpointsValidate(t *testing.T) {
	ok := Endpoints{Listen: "127.0.0.1:1", AdminListen: "127.0.0.1:2"}
	if err := ok.Validate("clients"); err != nil || ok.AdvertiseAddress() != "127.0.0.1:1" {
		t.Fatalf("%v, advertise %s", err, ok.AdvertiseAddress())
	}
	bad := Endpoints{Listen: "nohostport", AdminListen: ""}
	err := bad.Validate("")
	if err == nil || !strings.Contains(err.Error(), `--listen "nohostport"`) || !strings.Contains(err.Error(), `--admin-listen ""`) {
		t.Fatalf("%v", err)
	}
	wild := Endpoints{Listen: "0.0.0.0:1", AdminListen: "127.0.0.1:2"}
	if err := wild.Validate(""); err != nil {
		t.Fatalf("no advertise check asked: %v", err)
	}
	if err := wild.Validate("others"); err == nil || err.Error() != `--advertise: "0.0.0.0:1" is not reachable by others; set --advertise` {
		t.Fatalf("%v", err)
	}
	wild.Advertise = "node:1"
	if err := wild.Validate("others"); err != nil {
		t.Fatalf("advertised: %v", err)
	}
}
