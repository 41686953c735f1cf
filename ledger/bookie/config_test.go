package bookie

import (
	"strings"
	"testing"
	"time"
)

func TestConfigValidateLedgerGC(t *testing.T) {
	base := DefaultConfig()
	base.ID, base.DataDir = "b1", "/data"
	if err := base.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if base.LedgerGCInterval != 5*time.Minute || base.LedgerGCGrace != time.Hour {
		t.Fatalf("defaults: interval %s grace %s", base.LedgerGCInterval, base.LedgerGCGrace)
	}
	for _, tc := range []struct {
		name            string
		interval, grace time.Duration
		wantErr         string
	}{
		{"off", 0, time.Hour, ""},
		{"short, as in tests", 200 * time.Millisecond, time.Second, ""},
		{"interval too short", 10 * time.Millisecond, time.Hour, "--ledger-gc-interval"},
		{"negative interval", -time.Second, time.Hour, "--ledger-gc-interval"},
		{"grace too short", time.Minute, 500 * time.Millisecond, "--ledger-gc-grace"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base
			c.LedgerGCInterval, c.LedgerGCGrace = tc.interval, tc.grace
			err := c.Validate()
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want one naming %s", err, tc.wantErr)
			}
		})
	}
	if s := base.String(); !strings.Contains(s, "ledger-gc-interval=5m0s ledger-gc-grace=1h0m0s") {
		t.Fatalf("String() = %s", s)
	}
}
