package recordbatch

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
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
	recs, err := decodeRecords(data, &h)
	if err != nil {
		return BatchHeader{}, nil, err
	}
	return h, recs, nil
}

func decodeRecords(data []byte, h *BatchHeader) ([]Record, error) {
	if int64(h.RecordCount)*minRecordSize > int64(len(data)) {
		return nil, fmt.Errorf("%w: %d records cannot fit in %d bytes", ErrCorrupt, h.RecordCount, len(data))
	}
	recs := make([]Record, h.RecordCount)
	var headers []Header // one backing array for all records' headers, when it fits
	d := decoder{b: data}
	for i := range recs {
		body := d.bytes(d.length("record length"))
		if d.err != nil {
			return nil, fmt.Errorf("%w: record %d: %s", ErrCorrupt, i, d.err)
		}
		var prev []Header
		if i > 0 {
			prev = recs[i-1].Headers
		}
		var err error
		headers, err = decodeRecord(body, h, &recs[i], prev, headers, len(recs)-i, len(d.b))
		if err != nil {
			return nil, fmt.Errorf("%w: record %d: %s", ErrCorrupt, i, err)
		}
	}
	if len(d.b) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes after %d records", ErrCorrupt, len(d.b), len(recs))
	}
	return recs, nil
}

// decodeRecord decodes body, a record without its length prefix, into r,
// appending its headers to slab, and returns the slab. prev is the previous
// record's headers: equal keys at the same position share one string, as
// producers usually send the same header keys on every record. recordsLeft
// (this one included) and bytesLeft (after this one) size the slab.
func decodeRecord(body []byte, h *BatchHeader, r *Record, prev, slab []Header, recordsLeft, bytesLeft int) ([]Header, error) {
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
	if d.err == nil && n > 0 {
		if cap(slab)-len(slab) < n {
			// Guess that the records left carry as many headers as this
			// one, bounded by what their bytes can hold (2 bytes a header).
			want := min(n*recordsLeft, n+bytesLeft/2)
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
