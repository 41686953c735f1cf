package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/strata-log/strata/cmd/strata/internal/cli"
)

// TestFlagWiring runs the new commands' help and usage errors: cobra
// panics when a local shorthand clashes with a global one (consume's -o
// against --output's), and bad flags must exit 2 with a clear message
// before anything connects.
func TestFlagWiring(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		code    int
		wantErr string
	}{
		{[]string{"consume", "--help"}, 0, ""},
		{[]string{"produce", "--help"}, 0, ""},
		{[]string{"bench", "e2e", "--help"}, 0, ""},
		{[]string{"topic", "describe", "--help"}, 0, ""},
		{[]string{"cluster", "status", "--help"}, 0, ""},
		{[]string{"consume", "t", "-o", "yesterday"}, 2, `offset "yesterday"`},
		{[]string{"consume", "t", "-o", "-5", "-f", "%q"}, 2, "unknown code %q"},
		{[]string{"consume", "t", "--output", "yaml"}, 2, `--output "yaml"`},
		{[]string{"consume", "t", "-g", "grp", "-p", "1"}, 2, "-p cannot be used with -g"},
		{[]string{"produce", "t", "-K:", "-k", "x"}, 2, "exclude each other"},
		{[]string{"produce", "t", "--acks", "most"}, 2, `acks "most"`},
		{[]string{"produce", "t", "--compression", "brotli"}, 2, `compression "brotli"`},
		{[]string{"produce", "t", "-H", "novalue"}, 2, `-H "novalue"`},
		{[]string{"topic", "create", "t", "-c", "retention.ms"}, 2, "want key=value"},
		{[]string{"topic", "alter", "t"}, 2, "nothing to change"},
		{[]string{"bench", "e2e", "--record-size", "4"}, 2, "--record-size 4"},
		{[]string{"bench", "produce", "--producers", "0", "--duration", "0s"}, 2, "--duration 0s"},
	} {
		root := newRootCommand()
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetArgs(append(tc.args, "--broker", "127.0.0.1:1"))
		_, err := root.ExecuteC()
		if code := cli.ExitCode(err); code != tc.code || (tc.wantErr != "" && !strings.Contains(cli.Message(err), tc.wantErr)) {
			t.Errorf("strata %s: exit %d %q, want %d %q", strings.Join(tc.args, " "), code, cli.Message(err), tc.code, tc.wantErr)
		}
	}
}
