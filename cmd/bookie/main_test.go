package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/strata-log/strata/cmd/internal/nodeconfig"
	"github.com/strata-log/strata/ledger/bookie"
	"github.com/strata-log/strata/ledger/storage"
)

// TestLedgerGCSettings: the orphan sweep's settings come from flags, YAML
// keys and STRATA_* variables like every other setting (flags win).
func TestLedgerGCSettings(t *testing.T) {
	parse := func(t *testing.T, args ...string) bookie.Config {
		t.Helper()
		cfg := bookie.DefaultConfig()
		if err := nodeconfig.Parse(flags(cfg), args, &cfg); err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	if cfg := parse(t); cfg.LedgerGCInterval != bookie.DefaultLedgerGCInterval || cfg.LedgerGCGrace != bookie.DefaultLedgerGCGrace {
		t.Fatalf("defaults: %s %s", cfg.LedgerGCInterval, cfg.LedgerGCGrace)
	}
	if cfg := parse(t, "--ledger-gc-interval", "200ms", "--ledger-gc-grace", "1s"); cfg.LedgerGCInterval != 200*time.Millisecond || cfg.LedgerGCGrace != time.Second {
		t.Fatalf("flags: %s %s", cfg.LedgerGCInterval, cfg.LedgerGCGrace)
	}
	file := filepath.Join(t.TempDir(), "bookie.yaml")
	if err := os.WriteFile(file, []byte("ledger-gc-interval: 1m\nledger-gc-grace: 2h\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if cfg := parse(t, "--config", file); cfg.LedgerGCInterval != time.Minute || cfg.LedgerGCGrace != 2*time.Hour {
		t.Fatalf("YAML: %s %s", cfg.LedgerGCInterval, cfg.LedgerGCGrace)
	}
	t.Setenv("STRATA_LEDGER_GC_GRACE", "3h")
	t.Setenv("STRATA_LEDGER_GC_INTERVAL", "0s")
	if cfg := parse(t, "--config", file); cfg.LedgerGCInterval != 0 || cfg.LedgerGCGrace != 3*time.Hour {
		t.Fatalf("environment over YAML: %s %s", cfg.LedgerGCInterval, cfg.LedgerGCGrace)
	}
	if cfg := parse(t, "--ledger-gc-grace", "4h"); cfg.LedgerGCGrace != 4*time.Hour {
		t.Fatalf("flag over environment: %s", cfg.LedgerGCGrace)
	}
	if cfg := parse(t); cfg.FenceTombstoneTTL != storage.DefaultFenceTombstoneTTL {
		t.Fatalf("fence-tombstone-ttl default: %s", cfg.FenceTombstoneTTL)
	}
	if cfg := parse(t, "--fence-tombstone-ttl", "48h"); cfg.FenceTombstoneTTL != 48*time.Hour {
		t.Fatalf("--fence-tombstone-ttl: %s", cfg.FenceTombstoneTTL)
	}
}

// The embedded config.Exposure reads like any other flag: defaults, flags,
// YAML and the environment.
func TestExposureSettings(t *testing.T) {
	parse := func(t *testing.T, args ...string) bookie.Config {
		t.Helper()
		cfg := bookie.DefaultConfig()
		if err := nodeconfig.Parse(flags(cfg), args, &cfg); err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	if cfg := parse(t); cfg.EnablePprof || cfg.GRPCReflection {
		t.Fatalf("defaults: %+v", cfg.Exposure)
	}
	if cfg := parse(t, "--enable-pprof", "--grpc-reflection"); !cfg.EnablePprof || !cfg.GRPCReflection {
		t.Fatalf("flags: %+v", cfg.Exposure)
	}
	file := filepath.Join(t.TempDir(), "bookie.yaml")
	if err := os.WriteFile(file, []byte("enable-pprof: true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if cfg := parse(t, "--config", file); !cfg.EnablePprof {
		t.Fatalf("YAML: %+v", cfg.Exposure)
	}
	t.Setenv("STRATA_GRPC_REFLECTION", "true")
	if cfg := parse(t); !cfg.GRPCReflection {
		t.Fatalf("environment: %+v", cfg.Exposure)
	}
}

// The embedded config.Security reads like any other flag, and Validate
// refuses a plaintext non-loopback listener unless --insecure, and TLS
// files given only in part.
func TestSecuritySettings(t *testing.T) {
	parse := func(t *testing.T, args ...string) bookie.Config {
		t.Helper()
		cfg := bookie.DefaultConfig()
		if err := nodeconfig.Parse(flags(cfg), append([]string{"--id", "b1", "--data-dir", t.TempDir()}, args...), &cfg); err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	if cfg := parse(t); cfg.TLS() || cfg.Insecure || cfg.Validate() != nil {
		t.Fatalf("defaults: %+v, %v", cfg.Security, cfg.Validate())
	}
	file := filepath.Join(t.TempDir(), "bookie.yaml")
	if err := os.WriteFile(file, []byte("tls-cert-file: /c\ntls-key-file: /k\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("STRATA_TLS_CA_FILE", "/ca")
	cfg := parse(t, "--config", file, "--listen", "0.0.0.0:7301", "--advertise", "10.0.0.1:7301")
	if cfg.TLSCertFile != "/c" || cfg.TLSKeyFile != "/k" || cfg.TLSCAFile != "/ca" {
		t.Fatalf("YAML and environment: %+v", cfg.Security)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("gRPC on 0.0.0.0 with TLS: %v", err)
	}
	if err := parse(t, "--config", file, "--admin-listen", "0.0.0.0:7401").Validate(); err == nil {
		t.Fatal("a plaintext admin address on 0.0.0.0 was accepted without --insecure")
	}
	if err := parse(t, "--config", file, "--admin-listen", "0.0.0.0:7401", "--insecure").Validate(); err != nil {
		t.Fatalf("with --insecure: %v", err)
	}
	t.Setenv("STRATA_TLS_CA_FILE", "")
	if err := parse(t, "--config", file).Validate(); err == nil {
		t.Fatal("a certificate and a key without a CA file were accepted")
	}
}
