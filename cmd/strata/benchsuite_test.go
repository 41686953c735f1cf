package main

import (
	"strings"
	"testing"

	"github.com/strata-log/strata/cmd/strata/internal/cli"
)

func TestBenchSuiteFlagsValidated(t *testing.T) {
	for _, args := range [][]string{
		{"bench", "suite", "--brokers", "0"},
		{"bench", "suite", "--out", ""},
		{"bench", "suite", "--record-size", "4"}, // e2e stamps 8 bytes
	} {
		_, errOut, code := run(t, args...)
		if code != cli.ExitUsage || !strings.Contains(errOut, "--") {
			t.Errorf("strata %s: exit %d, %q; want a usage error", strings.Join(args, " "), code, errOut)
		}
	}
}
