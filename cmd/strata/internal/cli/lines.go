package cli

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// LineSplitter turns one line of produce input into a key and a value
// (kcat's -K, -k and -Z).
type LineSplitter struct {
	// KeySeparator (-K) splits each line at its first occurrence: key
	// before, value after. A line without it is all value, with no key.
	KeySeparator []byte
	// Key (-k) is the key of every record when KeySeparator is empty; nil
	// for no key.
	Key []byte
	// NullEmpty (-Z) makes an empty value a tombstone (nil value) and an
	// empty key no key (nil).
	NullEmpty bool
}

// Split returns the key and value of line. They alias line.
func (s LineSplitter) Split(line []byte) (key, value []byte) {
	value = line
	if len(s.KeySeparator) > 0 {
		if i := bytes.Index(line, s.KeySeparator); i >= 0 {
			key, value = line[:i:i], line[i+len(s.KeySeparator):]
		}
	} else if s.Key != nil {
		key = s.Key
	}
	if s.NullEmpty {
		if len(key) == 0 {
			key = nil
		}
		if len(value) == 0 {
			value = nil
		}
	} else if value == nil {
		value = []byte{}
	}
	return key, value
}

// ErrLineTooLong is returned by LineReader.Next for a line longer than
// its limit.
var ErrLineTooLong = errors.New("cli: input line too long")

// LineReader reads newline-terminated lines with bounded memory: a line
// longer than Max bytes is an error instead of a growing buffer.
type LineReader struct {
	r    *bufio.Reader
	max  int
	line int
}

// NewLineReader reads lines of at most max bytes from r.
func NewLineReader(r io.Reader, max int) *LineReader {
	return &LineReader{r: bufio.NewReaderSize(r, 64<<10), max: max}
}

// Next returns the next line without its "\n" (a final line without one
// counts), in a new slice the caller owns; io.EOF after the last.
func (l *LineReader) Next() ([]byte, error) {
	var line []byte
	for {
		chunk, err := l.r.ReadSlice('\n')
		if len(line)+len(chunk) > l.max+1 { // +1: the newline
			l.line++
			return nil, fmt.Errorf("%w: line %d is longer than %d bytes", ErrLineTooLong, l.line, l.max)
		}
		line = append(line, chunk...)
		switch {
		case err == nil:
			l.line++
			return line[:len(line)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(line) > 0:
			l.line++
			return line, nil
		default:
			return nil, err
		}
	}
}
