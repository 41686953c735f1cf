package nodeconfig

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/strata-log/strata/internal/config"
)

// roleConfig embeds the shared structs as the roles do.
type roleConfig struct {
	ID               string `mapstructure:"id"`
	config.Endpoints `mapstructure:",squash"`
	config.Security  `mapstructure:",squash"`
	config.Logging   `mapstructure:",squash"`
}

// TestEndpointsKeys: the embedded structs keep the flat keys listen,
// advertise, admin-listen, log-level and log-format (deploy/ and the
// e2e tests use them) from flags, the environment and the file.
func TestEndpointsKeys(t *testing.T) {
	d := roleConfig{Endpoints: config.Endpoints{Listen: "127.0.0.1:1", AdminListen: "127.0.0.1:2"}, Logging: config.DefaultLogging()}
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	fs.String(FileFlag, "", "")
	fs.String("id", "", "")
	config.EndpointsFlags(fs, d.Endpoints, config.EndpointsHelp{})
	config.SecurityFlags(fs, d.Security)
	config.LoggingFlags(fs, d.Logging)
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
	want := config.Endpoints{Listen: "0.0.0.0:4", Advertise: "node:9", AdminListen: "127.0.0.1:3"}
	if got.Endpoints != want || got.LogFormat != "json" || got.LogLevel != "info" {
		t.Fatalf("%+v, want %+v and json/info logging", got, want)
	}
	if got.AdvertiseAddress() != "node:9" {
		t.Fatalf("AdvertiseAddress %s", got.AdvertiseAddress())
	}
}

type securedConfig struct {
	Listen          string `mapstructure:"listen"`
	config.Security `mapstructure:",squash"`
}

// The TLS flags are YAML keys and STRATA_* variables like every flag.
func TestSecurityFromFlagsEnvAndFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(file, []byte("tls-cert-file: /file/node.crt\ntls-key-file: /file/node.key\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("STRATA_TLS_CA_FILE", "/env/ca.crt")
	t.Setenv("STRATA_TLS_KEY_FILE", "/env/node.key")
	t.Setenv("STRATA_TLS_CRL_FILE", "/env/ca.crl")
	t.Setenv("STRATA_ADMIN_TOKEN_FILE", "/env/token")
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	fs.String(FileFlag, "", "")
	fs.String("listen", "127.0.0.1:1", "")
	config.SecurityFlags(fs, config.Security{})
	if err := fs.Parse([]string{"--config", file, "--insecure", "--admin-tls"}); err != nil {
		t.Fatal(err)
	}
	var c securedConfig
	if err := Load(fs, &c); err != nil {
		t.Fatal(err)
	}
	want := config.Security{TLSCertFile: "/file/node.crt", TLSKeyFile: "/env/node.key", TLSCAFile: "/env/ca.crt", Insecure: true,
		TLSCRLFile: "/env/ca.crl", AdminTLS: true, AdminTokenFile: "/env/token"}
	if c.Security != want {
		t.Fatalf("got %+v, want %+v", c.Security, want)
	}
	if err := c.Security.Validate(); err != nil || !c.TLS() {
		t.Fatalf("Validate %v, TLS %t", err, c.TLS())
	}
	if f := c.Files(); f.Cert != want.TLSCertFile || f.Key != want.TLSKeyFile || f.CA != want.TLSCAFile {
		t.Fatalf("Files %+v", f)
	}
}

type limitedConfig struct {
	Listen        string `mapstructure:"listen"`
	config.Limits `mapstructure:",squash"`
}

// The listeners' limits are flags, STRATA_* variables and YAML keys, the
// defaults filling what none of them sets.
func TestLimitsFromFlagsEnvAndFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(file, []byte("handshake-timeout: 3s\ngrpc-max-concurrent-streams: 64\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("STRATA_GRPC_MAX_CONNECTIONS_PER_IP", "7")
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	fs.String(FileFlag, "", "")
	fs.String("listen", "127.0.0.1:1", "")
	config.LimitsFlags(fs, config.DefaultLimits())
	if err := fs.Parse([]string{"--config", file, "--admin-max-connections", "9"}); err != nil {
		t.Fatal(err)
	}
	var c limitedConfig
	if err := Load(fs, &c); err != nil {
		t.Fatal(err)
	}
	want := config.DefaultLimits()
	want.HandshakeTimeout, want.GRPCMaxConcurrentStreams, want.GRPCMaxConnectionsPerIP, want.AdminMaxConnections = 3*time.Second, 64, 7, 9
	if c.Limits != want {
		t.Fatalf("got %+v, want %+v", c.Limits, want)
	}
	if err := c.Limits.Validate(); err != nil {
		t.Fatal(err)
	}
}
