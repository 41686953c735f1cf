package admin

import (
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/strata-log/strata/internal/proctest"
	"github.com/strata-log/strata/internal/testwait"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func TestEndpoints(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "strata_test_things_total", Help: "things"})
	reg.MustRegister(c)
	c.Add(3)
	var ready atomic.Bool
	s, err := Start(Config{Addr: proctest.FreeAddr(t), Registry: reg, Ready: func() error {
		if !ready.Load() {
			return errors.New("replaying")
		}
		return nil
	}, Pprof: true}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	base := "http://" + s.Addr()
	if code, _ := get(t, base+"/livez"); code != 200 {
		t.Fatalf("livez %d", code)
	}
	if code, body := get(t, base+"/readyz"); code != 503 || !strings.Contains(body, "replaying") {
		t.Fatalf("readyz before ready: %d %q", code, body)
	}
	ready.Store(true)
	if code, _ := get(t, base+"/readyz"); code != 200 {
		t.Fatalf("readyz after ready: %d", code)
	}
	if code, body := get(t, base+"/metrics"); code != 200 || !strings.Contains(body, "strata_test_things_total 3") {
		t.Fatalf("metrics: %d %q", code, body)
	}
	if code, _ := get(t, base+"/debug/pprof/"); code != 200 {
		t.Fatalf("pprof %d", code)
	}
	// The flight trace holds what happened before it was asked for.
	flightMarker()
	code, body := get(t, base+"/debug/pprof/flight")
	if code != 200 || !strings.HasPrefix(body, "go 1.") || !strings.Contains(body, "admin.flightMarker") {
		t.Fatalf("flight: %d, %d bytes, want an execution trace naming flightMarker", code, len(body))
	}
}

// flightMarker blocks a few times, which the execution trace records with
// its stack.
//
//go:noinline
func flightMarker() {
	for range 3 {
		time.Sleep(time.Millisecond) // a blocking event for the trace, not a wait for a condition
	}
}

// pprof hands out command lines and heap dumps: only when asked for.
func TestPprofOffByDefault(t *testing.T) {
	s, err := Start(Config{Addr: proctest.FreeAddr(t), Registry: prometheus.NewRegistry(), Ready: func() error { return nil }}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/cmdline", "/debug/pprof/heap", "/debug/pprof/flight"} {
		if code, _ := get(t, "http://"+s.Addr()+path); code != 404 {
			t.Fatalf("%s without --enable-pprof: %d, want 404", path, code)
		}
	}
}

// dialFrom opens n connections to addr from the loopback address ip and
// sends nothing on them; they are closed when the test ends.
func dialFrom(t *testing.T, ip, addr string, n int) []net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	var conns []net.Conn
	for range n {
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		conns = append(conns, c)
	}
	return conns
}

// closedByServer waits until the server closed c.
func closedByServer(t *testing.T, c net.Conn) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.Copy(io.Discard, c); err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("waiting for the server to close an idle connection: %v", err)
	}
}

// The listener caps connections per IP (refusals counted), and a
// connection that sends no request (plain) or no TLS handshake (TLS)
// within HandshakeTimeout is closed; another client is served meanwhile.
func TestListenerLimits(t *testing.T) {
	f := newTLSFixture(t)
	for _, tc := range []struct {
		name   string
		tls    *tls.Config
		reason string // why the admitted idle connections are closed
	}{
		{"plain", nil, ""},
		{"tls or plain", f.server, "handshake"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := testRegistry()
			s, err := Start(Config{Addr: proctest.FreeAddr(t), Registry: reg, Ready: func() error { return nil }, TLS: tc.tls,
				MaxConnections: 10, MaxConnectionsPerIP: 2, HandshakeTimeout: 200 * time.Millisecond, Role: "test"}, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			idle := dialFrom(t, "127.0.0.2", s.Addr(), 5)
			refused := s.ln.Refused
			testwait.Until(t, 10*time.Second, "3 refused at the per-IP cap", func() bool { return refused("max_connections_per_ip") == 3 })
			if code, _ := get(t, "http://"+s.Addr()+"/livez"); code != 200 {
				t.Fatalf("another client: %d", code)
			}
			for _, c := range idle {
				closedByServer(t, c)
			}
			if tc.reason != "" {
				// The listener closes, then counts.
				testwait.Until(t, 10*time.Second, "2 refused at the handshake", func() bool { return refused(tc.reason) == 2 })
			}
			if _, body := get(t, "http://"+s.Addr()+"/metrics"); !strings.Contains(body, `strata_test_admin_connections_refused_total{reason="max_connections_per_ip"} 3`) {
				t.Fatalf("metrics:\n%s", body)
			}
		})
	}
}
