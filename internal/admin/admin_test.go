package admin

import (
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/strata-log/strata/internal/proctest"
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
