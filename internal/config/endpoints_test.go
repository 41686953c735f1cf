package config

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// TestEndpointsFlags: the flags keep the plain names deploy/ and the e2e
// tests use, with each role's own help.
func TestEndpointsFlags(t *testing.T) {
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	EndpointsFlags(fs, Endpoints{}, EndpointsHelp{Listen: "gRPC address", Advertise: "dial this"})
	LoggingFlags(fs, DefaultLogging())
	for flag, usage := range map[string]string{"listen": "gRPC address", "advertise": "dial this",
		"admin-listen": "HTTP address for /metrics, /livez, /readyz (and /debug/pprof/ with --enable-pprof)",
		"log-level":    "debug, info, warn or error", "log-format": "text or json"} {
		if f := fs.Lookup(flag); f == nil || f.Usage != usage {
			t.Fatalf("--%s: %+v", flag, f)
		}
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
