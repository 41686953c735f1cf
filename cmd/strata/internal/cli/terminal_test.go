package cli

import (
	"bytes"
	"testing"
)

func TestTerminalWriter(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"plain text\tand tab\n", "plain text\tand tab\n"},
		{"a\x1b[2Jb", `a\x1b[2Jb`},
		{"title\x1b]0;pwned\x07", `title\x1b]0;pwned\a`},
		{"over\rwrite\b\f\v\x00", `over\rwrite\b\f\v\x00`},
		{"del\x7f", `del\u007f`},
		{"c1 csi \u009b31m", `c1 csi \u009b31m`},
		{"raw 8-bit csi \x9b31m", `raw 8-bit csi \x9b31m`},
		{"not utf-8 \xff\xfe", `not utf-8 \xff\xfe`},
		{"utf-8 stays: héllo € 😀 \u200b", "utf-8 stays: héllo € 😀 \u200b"},
		{"\ufffd is a character", "\ufffd is a character"},
		{"cut at the end \xe2\x82", `cut at the end \xe2\x82`}, // Flush escapes it
	} {
		// Whole, and a byte at a time: a sequence cut between writes comes
		// out the same.
		for _, chunk := range []int{len(tc.in), 1, 2} {
			var out bytes.Buffer
			tw := &TerminalWriter{W: &out}
			for rest := tc.in; rest != ""; {
				n := min(chunk, len(rest))
				if w, err := tw.Write([]byte(rest[:n])); err != nil || w != n {
					t.Fatalf("Write: %d, %v; want %d", w, err, n)
				}
				rest = rest[n:]
			}
			if err := tw.Flush(); err != nil {
				t.Fatal(err)
			}
			if out.String() != tc.want {
				t.Errorf("%q in writes of %d: %q, want %q", tc.in, chunk, out.String(), tc.want)
			}
		}
	}
}
