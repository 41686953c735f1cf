package recordbatch

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
)

// section reads a batch's records section front to back. An uncompressed
// section is read in place; a compressed one streams out of its
// decompressor through a fixed window (a pooled buffer of at least 64 KiB),
// so checking a record of 8 MiB costs the window, not 8 MiB: the record's
// payloads (keys, values, header values) are skipped, never kept. The
// decompressed bytes are counted as they come out and limited to limit:
// one more is ErrTooLarge, whatever the codec's headers claim.
//
// Errors stick: the first one (a framing error, the decompressor's, or
// ErrTooLarge) is what every later call returns.
type section struct {
	win  []byte // win[r:w] is unread; win[0] is at stream position off
	r, w int
	off  int64
	// end is the position the current record ends at: no read crosses it
	// (math.MaxInt64 between records).
	end int64

	src   io.Reader // nil: win holds the whole section
	out   int64     // bytes taken from src
	limit int64
	eof   bool
	err   error
}

// maxZeroReads bounds the empty reads in a row a decompressor may return
// before the section gives up on it (io.Reader allows them, rarely).
const maxZeroReads = 100

// pos is the position of the next unread byte.
func (s *section) pos() int64 { return s.off + int64(s.r) }

// fail records a framing error, unless an error is already recorded.
func (s *section) fail(format string, args ...any) {
	if s.err == nil {
		s.err = corruptf(format, args...)
	}
}

// corruptf is a framing error (wrapped in ErrCorrupt by ScanRecords).
func corruptf(format string, args ...any) error { return decodeError(fmt.Sprintf(format, args...)) }

// fill makes at least n (at most len(win)) unread bytes available in the
// window and reports whether it could: false at the end of the section or
// on an error (recorded).
func (s *section) fill(n int) bool {
	if s.w-s.r >= n {
		return true
	}
	if s.src == nil || s.eof || s.err != nil {
		return false
	}
	s.off += int64(s.r)
	s.w = copy(s.win[:cap(s.win)], s.win[s.r:s.w])
	s.r = 0
	s.win = s.win[:cap(s.win)]
	for zero := 0; s.w < n; {
		// Never ask for more than one byte past the limit.
		room := min(int64(len(s.win)-s.w), s.limit+1-s.out)
		m, err := s.src.Read(s.win[s.w : s.w+int(room)])
		s.w += m
		s.out += int64(m)
		if s.out > s.limit {
			s.err = tooLarge(int(s.limit))
			return false
		}
		switch {
		case err == io.EOF:
			s.eof = true
			return s.w >= n
		case err != nil:
			s.err = err
			return false
		case m == 0:
			if zero++; zero == maxZeroReads {
				s.err = io.ErrNoProgress
				return false
			}
		}
	}
	return true
}

// more reports whether unread bytes are left (false on an error too).
func (s *section) more() bool { return s.fill(1) }

// avail is the unread bytes of the window that belong to the current
// record.
func (s *section) avail() []byte {
	b := s.win[s.r:s.w]
	if left := s.end - s.pos(); int64(len(b)) > left {
		b = b[:left]
	}
	return b
}

// skip consumes n bytes of the current record.
func (s *section) skip(n int) {
	if s.err != nil {
		return
	}
	if left := s.end - s.pos(); int64(n) > left {
		s.fail("%d bytes needed, %d left", n, left)
		return
	}
	for n > 0 {
		if s.r == s.w && !s.fill(1) {
			s.fail("%d bytes needed, the records section ended", n)
			return
		}
		k := min(n, s.w-s.r)
		s.r += k
		n -= k
	}
}

func (s *section) varlong(what string) int64 {
	if s.err != nil {
		return 0
	}
	if s.w-s.r < binary.MaxVarintLen64 {
		s.fill(binary.MaxVarintLen64) // fewer at the end of the section
	}
	b := s.avail()
	if len(b) > 0 && b[0] < 0x80 { // one-byte fast path
		s.r++
		return int64(b[0]>>1) ^ -int64(b[0]&1)
	}
	v, n := binary.Varint(b)
	if n <= 0 {
		s.fail("bad varint for %s", what)
		return 0
	}
	s.r += n
	return v
}

func (s *section) varint(what string) int32 {
	v := s.varlong(what)
	if v < math.MinInt32 || v > math.MaxInt32 {
		s.fail("%s %d out of int32 range", what, v)
		return 0
	}
	return int32(v)
}

// length reads a non-negative varint.
func (s *section) length(what string) int {
	v := s.varint(what)
	if v < 0 {
		s.fail("negative %s %d", what, v)
		return 0
	}
	return int(v)
}

// skipNullable reads a varint length (-1 = null) and skips that many
// bytes. what names the length.
func (s *section) skipNullable(what string) {
	n := s.varint(what)
	if s.err != nil || n == -1 {
		return
	}
	if n < -1 {
		s.fail("%s %d", what, n)
		return
	}
	s.skip(int(n))
}

// record checks the framing of one record body of size bytes (after its
// length prefix) as decodeRecord does, keeping nothing.
func (s *section) record(size int) RecordInfo {
	s.end = s.pos() + int64(size)
	defer func() { s.end = math.MaxInt64 }()
	s.skip(1) // attributes
	var r RecordInfo
	r.TimestampDelta = s.varlong("timestamp delta")
	r.OffsetDelta = s.varint("offset delta")
	s.skipNullable("key length")
	s.skipNullable("value length")
	n := s.length("header count")
	if left := s.end - s.pos(); s.err == nil && int64(n) > left/2 { // a header is at least 2 bytes
		s.fail("header count %d in %d bytes", n, left)
	}
	for j := 0; s.err == nil && j < n; j++ {
		s.skip(s.length("header key length"))
		s.skipNullable("header value length")
	}
	if left := s.end - s.pos(); s.err == nil && left != 0 {
		s.fail("%d bytes left over in the record", left)
	}
	r.Size = size
	return r
}

// scanError is the error of a section that stopped at record i: ErrTooLarge
// and framing errors as ScanRecords documents them.
func (s *section) scanError(c Compression, i int) error {
	var framing decodeError
	switch {
	case errors.Is(s.err, ErrTooLarge):
		return fmt.Errorf("%s records: %w", c, s.err)
	case errors.As(s.err, &framing):
		return fmt.Errorf("%w: record %d: %s", ErrCorrupt, i, framing)
	}
	return fmt.Errorf("%w: %s records: %v", ErrCorrupt, c, s.err)
}
