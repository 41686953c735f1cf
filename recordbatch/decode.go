package recordbatch

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"unsafe"
)

// minRecordSize is the smallest encoded record: length, attributes,
// timestampDelta, offsetDelta, keyLength, valueLength, headerCount, one
// byte each.
const minRecordSize = 7

// Decode verifies buf as exactly one batch (see Verify), decompresses it and
// decodes its records, with absolute offsets (BaseOffset + OffsetDelta).
// With LogAppendTime set, every record's timestamp is MaxTimestamp. Keys
// and values alias buf (uncompressed batch) or one new buffer (compressed).
func Decode(buf []byte) (BatchHeader, []Record, error) {
	return DecodeLimit(buf, MaxDecompressedBytes)
}

// DecodeLimit is Decode with its own bound on the decompressed records
// section: more fails with ErrTooLarge, having cost at most about twice
// maxDecompressed bytes of memory.
func DecodeLimit(buf []byte, maxDecompressed int) (BatchHeader, []Record, error) {
	h, err := Verify(buf)
	if err != nil {
		return BatchHeader{}, nil, err
	}
	return decodeBody(buf, h, maxDecompressed)
}

// DecodeChecked is DecodeLimit for a batch whose CRC the caller has
// already checked on these very bytes (a segment object's reader checks
// every batch it returns): every other check of Verify and Decode still
// runs. It saves computing the CRC a second time.
func DecodeChecked(buf []byte, maxDecompressed int) (BatchHeader, []Record, error) {
	h, err := checkFraming(buf)
	if err != nil {
		return BatchHeader{}, nil, err
	}
	return decodeBody(buf, h, maxDecompressed)
}

// decodeBody decompresses and decodes the records of buf, a batch with
// header h whose framing was checked.
func decodeBody(buf []byte, h BatchHeader, maxDecompressed int) (BatchHeader, []Record, error) {
	var err error
	data := buf[HeaderSize:]
	if c := h.Compression(); c != CompressionNone {
		if data, err = decompress(nil, c, data, maxDecompressed); err != nil {
			return BatchHeader{}, nil, err
		}
	}
	recs, _, err := decodeRecords(data, &h, math.MaxInt)
	if err != nil {
		return BatchHeader{}, nil, err
	}
	return h, recs, nil
}

// RecordBytes and HeaderBytes are what a decoded Record and Header take in
// memory besides the bytes they alias (DecodeWithin counts them).
const (
	RecordBytes = int(unsafe.Sizeof(Record{}))
	HeaderBytes = int(unsafe.Sizeof(Header{}))
)

// DecodeWithin is DecodeLimit bounded by everything the decoded batch
// holds, not by its decompressed records alone: the records section (the
// buffer it was decompressed into, whose capacity the records keep alive;
// for an uncompressed batch the records of buf, which the result aliases)
// plus RecordBytes per record and HeaderBytes per header.
// Tiny records and empty headers take several times their encoded size
// once decoded (a 2-byte header is a 40-byte Header), so a bound on the
// section alone does not bound a decoder's memory. More than maxBytes is
// ErrTooLarge, refused before the records are allocated (their count is
// the header's) or as soon as the section or the headers pass what is
// left. decoded is the bytes counted (with the decompressed buffer's
// capacity, which the allocator may round past maxBytes by a little).
func DecodeWithin(buf []byte, maxBytes int) (h BatchHeader, recs []Record, decoded int, err error) {
	if h, err = Verify(buf); err != nil {
		return BatchHeader{}, nil, 0, err
	}
	records := int64(h.RecordCount) * int64(RecordBytes)
	if records > int64(maxBytes) {
		return BatchHeader{}, nil, 0, fmt.Errorf("%w: %d records take %d bytes decoded, more than %d", ErrTooLarge, h.RecordCount, records, maxBytes)
	}
	room := maxBytes - int(records)
	data := buf[HeaderSize:]
	section := len(data)
	if c := h.Compression(); c != CompressionNone {
		if data, err = decompress(nil, c, data, room); err != nil {
			return BatchHeader{}, nil, 0, err
		}
		// The records keep the whole buffer alive. It grew by doubling,
		// never past room but for the allocator's rounding.
		section = max(len(data), cap(data))
	} else if section > room {
		return BatchHeader{}, nil, 0, fmt.Errorf("%w: %d bytes of records and %d records, more than %d", ErrTooLarge, section, h.RecordCount, maxBytes)
	}
	recs, headers, err := decodeRecords(data, &h, (room-len(data))/HeaderBytes)
	if err != nil {
		return BatchHeader{}, nil, 0, err
	}
	return h, recs, int(records) + section + headers*HeaderBytes, nil
}

// errTooManyHeaders: a record's headers pass decodeRecords' maxHeaders.
var errTooManyHeaders = errors.New("too many headers")

// decodeRecords decodes data, the records section of a batch with header
// h, holding at most maxHeaders headers (else ErrTooLarge); headers is how
// many it holds.
func decodeRecords(data []byte, h *BatchHeader, maxHeaders int) (recs []Record, headers int, err error) {
	if int64(h.RecordCount)*minRecordSize > int64(len(data)) {
		return nil, 0, fmt.Errorf("%w: %d records cannot fit in %d bytes", ErrCorrupt, h.RecordCount, len(data))
	}
	recs = make([]Record, h.RecordCount)
	var slab []Header // one backing array for all records' headers, when it fits
	d := decoder{b: data}
	for i := range recs {
		body := d.bytes(d.length("record length"))
		if d.err != nil {
			return nil, 0, fmt.Errorf("%w: record %d: %s", ErrCorrupt, i, d.err)
		}
		var prev []Header
		if i > 0 {
			prev = recs[i-1].Headers
		}
		var err error
		slab, err = decodeRecord(body, h, &recs[i], prev, slab, len(recs)-i, len(d.b), maxHeaders-headers)
		if errors.Is(err, errTooManyHeaders) {
			return nil, 0, fmt.Errorf("%w: record %d: more than %d headers decoded", ErrTooLarge, i, maxHeaders)
		}
		if err != nil {
			return nil, 0, fmt.Errorf("%w: record %d: %s", ErrCorrupt, i, err)
		}
		headers += len(recs[i].Headers)
	}
	if len(d.b) != 0 {
		return nil, 0, fmt.Errorf("%w: %d trailing bytes after %d records", ErrCorrupt, len(d.b), len(recs))
	}
	return recs, headers, nil
}

// decodeRecord decodes body, a record without its length prefix, into r,
// appending its headers to slab, and returns the slab. prev is the previous
// record's headers: equal keys at the same position share one string, as
// producers usually send the same header keys on every record. recordsLeft
// (this one included) and bytesLeft (after this one) size the slab, which
// never grows past headersLeft more headers (errTooManyHeaders).
func decodeRecord(body []byte, h *BatchHeader, r *Record, prev, slab []Header, recordsLeft, bytesLeft, headersLeft int) ([]Header, error) {
	d := decoder{b: body}
	d.skip(1) // attributes
	timestampDelta := d.varlong("timestamp delta")
	offsetDelta := d.varint("offset delta")
	r.Key = d.nullableBytes("key length")
	r.Value = d.nullableBytes("value length")
	n := d.length("header count")
	if d.err == nil && n > len(d.b)/2 { // a header is at least 2 bytes
		d.fail(fmt.Sprintf("header count %d in %d bytes", n, len(d.b)))
	}
	if d.err == nil && n > headersLeft {
		return slab, errTooManyHeaders
	}
	if d.err == nil && n > 0 {
		if cap(slab)-len(slab) < n {
			// Guess that the records left carry as many headers as this
			// one, bounded by what their bytes can hold (2 bytes a header)
			// and by the headers left to decode.
			want := min(n*recordsLeft, n+bytesLeft/2, headersLeft)
			slab = slices.Grow(slab[:len(slab):len(slab)], want)
		}
		first := len(slab)
		for j := range n {
			key := d.bytes(d.length("header key length"))
			value := d.nullableBytes("header value length")
			if d.err != nil {
				break
			}
			hd := Header{Value: value}
			if j < len(prev) && prev[j].Key == string(key) {
				hd.Key = prev[j].Key
			} else {
				hd.Key = string(key)
			}
			slab = append(slab, hd)
		}
		r.Headers = slab[first:len(slab):len(slab)]
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail(fmt.Sprintf("%d bytes left over in the record", len(d.b)))
	}
	if d.err != nil {
		return slab, d.err
	}
	r.OffsetDelta = offsetDelta
	r.Offset = h.BaseOffset + int64(offsetDelta)
	if h.LogAppendTime() {
		r.TimestampMs = h.MaxTimestamp
	} else {
		r.TimestampMs = h.BaseTimestamp + timestampDelta
	}
	return slab, nil
}

// decoder reads varints and byte strings from b; the first error sticks
// and later reads return zero values.
type decoder struct {
	b   []byte
	err error
}

type decodeError string

func (e decodeError) Error() string { return string(e) }

func (d *decoder) fail(msg string) {
	if d.err == nil {
		d.err = decodeError(msg)
	}
	d.b = nil
}

func (d *decoder) skip(n int) {
	if len(d.b) < n {
		d.fail("truncated")
		return
	}
	d.b = d.b[n:]
}

func (d *decoder) varlong(what string) int64 {
	if len(d.b) > 0 && d.b[0] < 0x80 { // one-byte fast path
		v := int64(d.b[0]>>1) ^ -int64(d.b[0]&1)
		d.b = d.b[1:]
		return v
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("bad varint for " + what)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint(what string) int32 {
	v := d.varlong(what)
	if v < math.MinInt32 || v > math.MaxInt32 {
		d.fail(fmt.Sprintf("%s %d out of int32 range", what, v))
		return 0
	}
	return int32(v)
}

// length reads a non-negative varint.
func (d *decoder) length(what string) int {
	v := d.varint(what)
	if v < 0 {
		d.fail(fmt.Sprintf("negative %s %d", what, v))
		return 0
	}
	return int(v)
}

// bytes returns the next n bytes, capacity-limited.
func (d *decoder) bytes(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n > len(d.b) {
		d.fail(fmt.Sprintf("%d bytes needed, %d left", n, len(d.b)))
		return nil
	}
	b := d.b[:n:n]
	d.b = d.b[n:]
	return b
}

// nullableBytes reads a varint length (-1 = null) and that many bytes.
// what names the length.
func (d *decoder) nullableBytes(what string) []byte {
	n := d.varint(what)
	if d.err != nil {
		return nil
	}
	if n == -1 {
		return nil
	}
	if n < -1 {
		d.fail(fmt.Sprintf("%s %d", what, n))
		return nil
	}
	return d.bytes(int(n))
}
