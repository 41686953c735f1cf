package raftstore

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/hashicorp/raft"
)

// Key prefixes, one byte per kind of record. See doc.go for the layout.
const (
	logPrefix    byte = 'l'
	stablePrefix byte = 's'

	// logKeyLen is the prefix byte plus a big-endian uint64 index.
	logKeyLen = 1 + 8
)

// logKeysStart and logKeysEnd bound every log key: [logKeysStart, logKeysEnd).
// logKeysEnd is the prefix byte plus one, so it sorts after 'l' followed by
// any index, including math.MaxUint64.
var (
	logKeysStart = []byte{logPrefix}
	logKeysEnd   = []byte{logPrefix + 1}
)

// logFormatV1 is the first byte of every encoded raft.Log value. A new layout
// gets a new version byte; the decoder refuses versions it does not know
// rather than guessing.
const logFormatV1 byte = 1

// logKey returns the key of the log entry at index.
func logKey(index uint64) []byte {
	return appendLogKey(make([]byte, 0, logKeyLen), index)
}

// appendLogKey appends the key of the log entry at index to dst.
func appendLogKey(dst []byte, index uint64) []byte {
	dst = append(dst, logPrefix)
	return binary.BigEndian.AppendUint64(dst, index)
}

// logKeyAfter returns the exclusive upper bound of a key range that ends with
// index inclusive. index+1 would overflow for math.MaxUint64, so that case
// uses the end of the whole log key space.
func logKeyAfter(index uint64) []byte {
	if index == math.MaxUint64 {
		return logKeysEnd
	}
	return logKey(index + 1)
}

// parseLogKey returns the index held in a log key.
func parseLogKey(key []byte) (uint64, error) {
	if len(key) != logKeyLen || key[0] != logPrefix {
		return 0, fmt.Errorf("%w: log key %x is not %q + 8 bytes", ErrCorrupt, key, logPrefix)
	}
	return binary.BigEndian.Uint64(key[1:]), nil
}

// stableKey returns the pebble key of a StableStore key.
func stableKey(key []byte) []byte {
	out := make([]byte, 1+len(key))
	out[0] = stablePrefix
	copy(out[1:], key)
	return out
}

// appendLog appends the encoding of l to dst and returns the extended slice.
//
// AppendedAt is stored as UnixNano, with 0 standing for the zero time.Time
// (entries written before raft set AppendedAt, or by callers that leave it
// unset). Times outside UnixNano's range (before 1678 or after 2262) are not
// representable and come back wrong; raft only stores wall-clock "now".
func appendLog(dst []byte, l *raft.Log) []byte {
	var appendedAtNanos int64
	if !l.AppendedAt.IsZero() {
		appendedAtNanos = l.AppendedAt.UnixNano()
	}
	dst = append(dst, logFormatV1)
	dst = binary.AppendUvarint(dst, l.Index)
	dst = binary.AppendUvarint(dst, l.Term)
	dst = append(dst, byte(l.Type))
	dst = binary.AppendUvarint(dst, uint64(len(l.Data)))
	dst = append(dst, l.Data...)
	dst = binary.AppendUvarint(dst, uint64(len(l.Extensions)))
	dst = append(dst, l.Extensions...)
	dst = binary.AppendVarint(dst, appendedAtNanos)
	return dst
}

// decodeLog decodes a value written by appendLog into l. Data and Extensions
// are copied, so buf may be reused once decodeLog returns. On error l is left
// untouched and the error wraps ErrCorrupt; decodeLog never panics, whatever
// buf holds.
func decodeLog(buf []byte, l *raft.Log) error {
	d := decoder{buf: buf}
	version := d.byte("version")
	if d.err == nil && version != logFormatV1 {
		return fmt.Errorf("%w: unknown log format version %d", ErrCorrupt, version)
	}
	index := d.uvarint("index")
	term := d.uvarint("term")
	logType := d.byte("type")
	data := d.bytes("data")
	extensions := d.bytes("extensions")
	appendedAtNanos := d.varint("appended-at")
	if d.err != nil {
		return d.err
	}
	if len(d.buf) != 0 {
		return fmt.Errorf("%w: %d trailing bytes after log entry", ErrCorrupt, len(d.buf))
	}
	var appendedAt time.Time
	if appendedAtNanos != 0 {
		appendedAt = time.Unix(0, appendedAtNanos).UTC()
	}
	*l = raft.Log{
		Index:      index,
		Term:       term,
		Type:       raft.LogType(logType),
		Data:       data,
		Extensions: extensions,
		AppendedAt: appendedAt,
	}
	return nil
}

// decoder reads fields off the front of buf. The first failure is kept in err
// and turns every later read into a no-op, so callers check err once.
type decoder struct {
	buf []byte
	err error
}

func (d *decoder) fail(field, problem string) {
	d.err = fmt.Errorf("%w: log entry %s: %s", ErrCorrupt, field, problem)
}

func (d *decoder) byte(field string) byte {
	if d.err != nil {
		return 0
	}
	if len(d.buf) < 1 {
		d.fail(field, "truncated")
		return 0
	}
	b := d.buf[0]
	d.buf = d.buf[1:]
	return b
}

func (d *decoder) uvarint(field string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.buf)
	if n <= 0 {
		d.fail(field, varintProblem(n))
		return 0
	}
	d.buf = d.buf[n:]
	return v
}

func (d *decoder) varint(field string) int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.buf)
	if n <= 0 {
		d.fail(field, varintProblem(n))
		return 0
	}
	d.buf = d.buf[n:]
	return v
}

// bytes reads a uvarint length and that many bytes, returned as a copy (nil
// when empty).
func (d *decoder) bytes(field string) []byte {
	n := d.uvarint(field + " length")
	if d.err != nil {
		return nil
	}
	// Compare as uint64: a garbage length may not fit in an int.
	if n > uint64(len(d.buf)) {
		d.fail(field, fmt.Sprintf("length %d exceeds the %d bytes left", n, len(d.buf)))
		return nil
	}
	if n == 0 {
		return nil
	}
	out := make([]byte, n)
	copy(out, d.buf[:n])
	d.buf = d.buf[n:]
	return out
}

// varintProblem explains the n <= 0 results of binary.Uvarint and Varint.
func varintProblem(n int) string {
	if n == 0 {
		return "truncated"
	}
	return "varint overflows 64 bits"
}
