package recordbatch

import "fmt"

// RecordInfo is what ScanRecords reports about one record.
type RecordInfo struct {
	// OffsetDelta and TimestampDelta as encoded.
	OffsetDelta    int32
	TimestampDelta int64
	// Size is the record's length prefix: the bytes of its body.
	Size int
}

// ScanRecords walks the records section of buf, a batch that passed Verify
// with header h, checking every record's framing as Decode does (lengths
// against the bytes, varint ranges, header counts, no bytes left over)
// without keeping anything: it is the cheap check a broker runs before it
// stores a batch. A compressed section is decompressed into a pooled buffer
// with at most maxDecompressed bytes of output (ErrTooLarge beyond).
//
// Unlike Decode it does not trust RecordCount: it decodes records until the
// bytes end and returns how many it found, calling fn for each (index from
// 0); fn's error stops the walk and is returned unwrapped. Framing errors
// are ErrCorrupt.
func ScanRecords(buf []byte, h BatchHeader, maxDecompressed int, fn func(i int, r RecordInfo) error) (int, error) {
	if len(buf) < HeaderSize {
		return 0, fmt.Errorf("%w: %d bytes, header is %d", ErrShort, len(buf), HeaderSize)
	}
	data := buf[HeaderSize:]
	if c := h.Compression(); c != CompressionNone {
		s := getScratch()
		defer putScratch(s)
		var err error
		if s.b, err = decompress(s.b[:0], c, data, maxDecompressed); err != nil {
			return 0, err
		}
		data = s.b
	}
	d := decoder{b: data}
	n := 0
	for ; len(d.b) > 0; n++ {
		size := d.length("record length")
		body := d.bytes(size)
		if d.err != nil {
			return n, fmt.Errorf("%w: record %d: %s", ErrCorrupt, n, d.err)
		}
		info, err := scanRecord(body)
		if err != nil {
			return n, fmt.Errorf("%w: record %d: %s", ErrCorrupt, n, err)
		}
		info.Size = size
		if err := fn(n, info); err != nil {
			return n, err
		}
	}
	return n, nil
}

// scanRecord checks one record body (after its length prefix) as
// decodeRecord does, allocating nothing.
func scanRecord(body []byte) (RecordInfo, error) {
	d := decoder{b: body}
	d.skip(1) // attributes
	var r RecordInfo
	r.TimestampDelta = d.varlong("timestamp delta")
	r.OffsetDelta = d.varint("offset delta")
	d.nullableBytes("key length")
	d.nullableBytes("value length")
	n := d.length("header count")
	if d.err == nil && n > len(d.b)/2 { // a header is at least 2 bytes
		d.fail(fmt.Sprintf("header count %d in %d bytes", n, len(d.b)))
	}
	for j := 0; d.err == nil && j < n; j++ {
		d.bytes(d.length("header key length"))
		d.nullableBytes("header value length")
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail(fmt.Sprintf("%d bytes left over in the record", len(d.b)))
	}
	return r, d.err
}
