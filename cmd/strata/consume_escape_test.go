package main

import (
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/strata-log/strata/cmd/strata/internal/cli"
)

// consumeRun runs `strata ARGS` against broker with stdout taken for a
// terminal or not.
func consumeRun(t *testing.T, broker string, terminal bool, args ...string) string {
	t.Helper()
	saved := stdoutIsTerminal
	stdoutIsTerminal = func(io.Writer) bool { return terminal }
	defer func() { stdoutIsTerminal = saved }()
	out, errOut, code := strataRun(t, broker, "", args...)
	if code != 0 {
		t.Fatalf("strata %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

// TestConsumeEscapesOnTerminal: a record's key, value and
// headers cannot drive a terminal: on one, control characters print
// escaped; into a pipe, or with --raw, the bytes come out exactly.
func TestConsumeEscapesOnTerminal(t *testing.T) {
	fb := startTestBroker(t)
	for _, topic := range []string{"esc", "esc2"} {
		if _, errOut, code := strataRun(t, fb.addr, "", "topic", "create", topic, "-p", "1"); code != 0 {
			t.Fatalf("create %s: exit %d: %s", topic, code, errOut)
		}
	}
	key, value, header := "k\x1b[31m", "v\x1b]0;pwned\x07\rfake line\u009b\xff", "h=\x1b[2J"
	if _, errOut, code := strataRun(t, fb.addr, key+":"+value+"\n", "produce", "esc", "-K:", "-H", header); code != 0 {
		t.Fatalf("produce: exit %d: %s", code, errOut)
	}
	format := []string{"consume", "esc", "-e", "-f", `%k|%v|%h\n`}

	raw := key + "|" + value + "|" + header + "\n"
	if out := consumeRun(t, fb.addr, false, format...); out != raw {
		t.Fatalf("into a pipe: %q, want the bytes as stored %q", out, raw)
	}
	if out := consumeRun(t, fb.addr, true, append(format, "--raw")...); out != raw {
		t.Fatalf("--raw on a terminal: %q, want %q", out, raw)
	}
	escaped := `k\x1b[31m|v\x1b]0;pwned\a\rfake line\u009b\xff|h=\x1b[2J` + "\n"
	if out := consumeRun(t, fb.addr, true, format...); out != escaped {
		t.Fatalf("on a terminal: %q, want %q", out, escaped)
	}

	// JSON on a terminal stays JSON of the same record (the value is not
	// UTF-8, so base64; the key has ESC, which JSON escapes itself).
	out := consumeRun(t, fb.addr, true, "consume", "esc", "-e", "--output", "json")
	if strings.ContainsAny(out, "\x1b\x07\r") {
		t.Fatalf("JSON on a terminal holds control characters: %q", out)
	}
	var rec cli.JSONRecord
	if err := json.Unmarshal([]byte(out), &rec); err != nil || rec.Key == nil || *rec.Key != key {
		t.Fatalf("JSON on a terminal: %v: %q", err, out)
	}
	// A C1 character in a UTF-8 value, which JSON leaves raw, is escaped
	// as \u009b: still valid JSON of the same string.
	if _, errOut, code := strataRun(t, fb.addr, "k:c1\u009bvalue\x7f\n", "produce", "esc2", "-K:"); code != 0 {
		t.Fatalf("produce: exit %d: %s", code, errOut)
	}
	out = consumeRun(t, fb.addr, true, "consume", "esc2", "-e", "--output", "json")
	if strings.Contains(out, "\u009b") || !strings.Contains(out, `\u009b`) {
		t.Fatalf("JSON on a terminal: %q", out)
	}
	if err := json.Unmarshal([]byte(out), &rec); err != nil || rec.Value == nil || *rec.Value != "c1\u009bvalue\x7f" {
		t.Fatalf("JSON on a terminal does not decode to the value: %v: %q", err, out)
	}
}
