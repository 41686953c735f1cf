package logging

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestLimiter: one line per Every; the next line says how many were held
// back.
func TestLimiter(t *testing.T) {
	var out bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&out, nil))
	l := Limiter{Every: time.Second}
	t0 := time.Unix(1700000000, 0)
	for i := range 3 {
		l.Warn(logger, t0.Add(time.Duration(i)*100*time.Millisecond), "bad")
	}
	l.Warn(logger, t0.Add(time.Second), "bad")
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "similar_not_logged=0") || !strings.Contains(lines[1], "similar_not_logged=2") {
		t.Fatalf("lines:\n%s", out.String())
	}
}
