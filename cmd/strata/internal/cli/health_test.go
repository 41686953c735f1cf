package cli

import (
	"context"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/strata-log/strata/internal/pki"
	"github.com/strata-log/strata/internal/proctest"
)

func TestDefaultAdmin(t *testing.T) {
	for _, tc := range []struct{ env, want string }{
		{"", "127.0.0.1:9192"},
		{"garbage", "127.0.0.1:9192"},
		{"0.0.0.0:7201", "127.0.0.1:7201"},
		{":7401", "127.0.0.1:7401"},
		{"[::]:7401", "127.0.0.1:7401"},
		{"10.1.2.3:9192", "10.1.2.3:9192"},
		{"broker-1:9192", "broker-1:9192"},
	} {
		if got := DefaultAdmin(tc.env, "127.0.0.1:9192"); got != tc.want {
			t.Errorf("DefaultAdmin(%q) = %q, want %q", tc.env, got, tc.want)
		}
	}
}

func TestProbeHTTP(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" {
			http.Error(w, "not ready\nsecond line", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	}))
	srv.Listener.Close() // httptest's listener is on an ephemeral port
	srv.Listener = proctest.Listen(t)
	srv.Start()
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	if code, body, err := ProbeHTTP(context.Background(), addr, "/readyz", nil); err != nil || code != 200 || body != "ok" {
		t.Fatalf("/readyz: %d %q %v", code, body, err)
	}
	if code, body, err := ProbeHTTP(context.Background(), addr, "/other", nil); err != nil || code != 503 || body != "not ready" {
		t.Fatalf("/other: %d %q %v", code, body, err)
	}
}

func TestWriteFileAtomic(t *testing.T) {
	path := t.TempDir() + "/snap"
	for _, data := range []string{"first", "second, longer"} {
		if err := WriteFileAtomic(path, []byte(data)); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != data {
			t.Fatalf("%q %v, want %q", got, err, data)
		}
	}
	if _, err := os.Stat(path + ".tmp"); !os.IsNotExist(err) {
		t.Fatalf("the temporary file stayed: %v", err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", fi.Mode())
	}
	if err := WriteFileAtomic(t.TempDir()+"/no/such/dir/f", nil); err == nil {
		t.Fatal("a missing directory: no error")
	}
}

// TestProbeHTTPS: with a CA, a node serving its admin address over TLS is
// probed over https with its certificate checked (another CA's is
// refused, never retried in plaintext), and a node serving plain http is
// still probed.
func TestProbeHTTPS(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	tlsSrv := httptest.NewUnstartedServer(ok)
	tlsSrv.Listener.Close()
	tlsSrv.Listener = proctest.Listen(t)
	tlsSrv.StartTLS()
	defer tlsSrv.Close()
	plain := httptest.NewUnstartedServer(ok)
	plain.Listener.Close()
	plain.Listener = proctest.Listen(t)
	plain.Start()
	defer plain.Close()

	dir := t.TempDir()
	caFile := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: tlsSrv.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	conf, err := AdminTLS(caFile)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if code, body, err := ProbeHTTP(ctx, strings.TrimPrefix(tlsSrv.URL, "https://"), "/readyz", conf); err != nil || code != 200 || body != "ok" {
		t.Fatalf("TLS node: %d %q %v", code, body, err)
	}
	if code, _, err := ProbeHTTP(ctx, strings.TrimPrefix(plain.URL, "http://"), "/readyz", conf); err != nil || code != 200 {
		t.Fatalf("plaintext node with a CA given: %d %v", code, err)
	}
	if code, _, err := ProbeHTTP(ctx, strings.TrimPrefix(tlsSrv.URL, "https://"), "/readyz", nil); err != nil || code != http.StatusBadRequest {
		t.Fatalf("TLS node without a CA: %d %v; want Go's 400 to plain http", code, err)
	}
	other, err := pki.NewCA("other", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	otherFile := filepath.Join(dir, "other.crt")
	if err := os.WriteFile(otherFile, other.CertPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	wrong, _ := AdminTLS(otherFile)
	if _, _, err := ProbeHTTP(ctx, strings.TrimPrefix(tlsSrv.URL, "https://"), "/readyz", wrong); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("TLS node with another CA: %v, want a certificate error", err)
	}
}
