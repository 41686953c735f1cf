package cli

import (
	"fmt"
	"io"
	"unicode/utf8"
)

// TerminalWriter writes to a terminal what it is given with every control
// character (Unicode Cc: C0, DEL, C1) but newline and tab escaped, and
// every byte that is not UTF-8 as \xNN, so that a record cannot drive the
// terminal; see consume's help. A UTF-8 sequence split across two writes
// is held back until the next (Flush ends the stream).
type TerminalWriter struct {
	W     io.Writer
	carry []byte // the start of a UTF-8 sequence that the last write cut
	buf   []byte
}

func (t *TerminalWriter) Write(p []byte) (int, error) {
	n := len(p)
	if len(t.carry) > 0 {
		p = append(t.carry, p...)
		t.carry = nil
	}
	out := t.buf[:0]
	for i := 0; i < len(p); {
		c := p[i]
		if printable(c) {
			j := i + 1
			for j < len(p) && printable(p[j]) {
				j++
			}
			out = append(out, p[i:j]...)
			i = j
			continue
		}
		r, size := utf8.DecodeRune(p[i:])
		switch {
		case r == utf8.RuneError && size <= 1 && !utf8.FullRune(p[i:]):
			t.carry = append(t.carry[:0], p[i:]...) // cut: wait for the rest
			i = len(p)
		case r == utf8.RuneError && size <= 1:
			out = fmt.Appendf(out, `\x%02x`, c)
			i++
		default:
			out = appendEscapedRune(out, r, p[i:i+size])
			i += size
		}
	}
	t.buf = out
	if _, err := t.W.Write(out); err != nil {
		return 0, err
	}
	return n, nil
}

// printable is an ASCII byte written as it is.
func printable(c byte) bool { return c >= 0x20 && c < 0x7f || c == '\n' || c == '\t' }

// Flush writes a UTF-8 sequence held back, which no write completed,
// escaped.
func (t *TerminalWriter) Flush() error {
	if len(t.carry) == 0 {
		return nil
	}
	var out []byte
	for _, c := range t.carry {
		out = fmt.Appendf(out, `\x%02x`, c)
	}
	t.carry = nil
	_, err := t.W.Write(out)
	return err
}

// appendEscapedRune appends r (encoded as b): escaped when it is a control
// character, as is otherwise.
func appendEscapedRune(dst []byte, r rune, b []byte) []byte {
	switch {
	case r == '\a':
		return append(dst, `\a`...)
	case r == '\b':
		return append(dst, `\b`...)
	case r == '\f':
		return append(dst, `\f`...)
	case r == '\r':
		return append(dst, `\r`...)
	case r == '\v':
		return append(dst, `\v`...)
	case r < 0x20:
		return fmt.Appendf(dst, `\x%02x`, r)
	case r >= 0x7f && r <= 0x9f:
		// \u: valid in JSON as well, for --output json.
		return fmt.Appendf(dst, `\u%04x`, r)
	}
	return append(dst, b...)
}
