package recordbatch_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"slices"
	"testing"

	"github.com/strata-log/strata/recordbatch"
	"github.com/strata-log/strata/recordbatch/hostilebatch"
)

// fuzzSeeds: valid batches of every codec, and broken ones. `go test` runs
// them as regular test cases; `go test -fuzz` mutates them.
func fuzzSeeds(f *testing.F) {
	recs := []recordbatch.Record{
		{TimestampMs: 10, Key: []byte("k"), Value: []byte("v")},
		{TimestampMs: 5, Value: nil, Headers: []recordbatch.Header{{Key: "h", Value: []byte{}}, {Key: "n"}}},
		{TimestampMs: 20, Key: []byte{}, Value: bytes.Repeat([]byte("ab"), 100)},
	}
	f.Add([]byte{})
	f.Add(golden(1))
	for _, c := range codecs {
		buf, err := recordbatch.Encode(&recordbatch.Batch{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1, Compression: c, Records: recs})
		if err != nil {
			f.Fatal(err)
		}
		f.Add(buf)
		f.Add(buf[:len(buf)-1])
		f.Add(buf[:recordbatch.HeaderSize])
		f.Add(append(bytes.Clone(buf), buf...))
	}
}

func FuzzDecode(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		checkDecode(t, data)
		// Split never panics either, and what it returns parses.
		parts, _ := recordbatch.Split(data)
		for _, p := range parts {
			if _, err := recordbatch.ParseHeader(p); err != nil {
				t.Fatalf("Split returned an unparsable batch: %v", err)
			}
		}
	})
}

// FuzzDecodeRecords fixes up the magic, length and CRC of its input, so the
// fuzzer reaches the decompressors and the record parser instead of
// stopping at the CRC check.
func FuzzDecodeRecords(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < recordbatch.HeaderSize {
			return
		}
		data = bytes.Clone(data)
		data[16] = 2
		binary.BigEndian.PutUint32(data[57:], binary.BigEndian.Uint32(data[57:])&0xffff) // keep counts modest
		checkDecode(t, withCRC(data))
	})
}

// checkDecode: Decode never panics; a batch it accepts re-encodes to the
// same records.
func checkDecode(t *testing.T, data []byte) {
	h, recs, err := recordbatch.Decode(data)
	if err != nil {
		return
	}
	if _, err := recordbatch.Verify(data); err != nil {
		t.Fatalf("Decode accepted what Verify rejects: %v", err)
	}
	if len(recs) != int(h.RecordCount) {
		t.Fatalf("%d records, header says %d", len(recs), h.RecordCount)
	}
	// DecodeWithin decodes the same within what it counts, and refuses
	// one byte less than the records, their section and their headers.
	_, within, decoded, err := recordbatch.DecodeWithin(data, recordbatch.MaxDecompressedBytes)
	if err != nil || len(within) != len(recs) {
		t.Fatalf("DecodeWithin: %d records, %v; Decode: %d", len(within), err, len(recs))
	}
	if _, _, _, err := recordbatch.DecodeWithin(data, decoded); err != nil {
		t.Fatalf("DecodeWithin its own count %d: %v", decoded, err)
	}
	section := len(data) - recordbatch.HeaderSize
	if c := h.Compression(); c != recordbatch.CompressionNone {
		whole, err := recordbatch.Decompress(nil, c, data[recordbatch.HeaderSize:], recordbatch.MaxDecompressedBytes)
		if err != nil {
			t.Fatal(err)
		}
		section = len(whole)
	}
	least := section + len(recs)*recordbatch.RecordBytes
	for _, r := range recs {
		least += len(r.Headers) * recordbatch.HeaderBytes
	}
	if decoded < least {
		t.Fatalf("DecodeWithin counted %d, less than the %d its records take", decoded, least)
	}
	if _, _, _, err := recordbatch.DecodeWithin(data, least-1); !errors.Is(err, recordbatch.ErrTooLarge) {
		t.Fatalf("DecodeWithin one byte below what its records take (%d): %v, want ErrTooLarge", least, err)
	}
	if len(recs) == 0 {
		return
	}
	buf, err := recordbatch.Encode(&recordbatch.Batch{BaseOffset: h.BaseOffset, ProducerID: h.ProducerID, Compression: h.Compression(), Records: bytesClone(recs)})
	if err != nil {
		t.Fatalf("re-encode: %v", err)
	}
	h2, again, err := recordbatch.Decode(buf)
	if err != nil {
		t.Fatalf("decode re-encoded: %v", err)
	}
	for i := range recs {
		recs[i].OffsetDelta, recs[i].Offset = int32(i), h.BaseOffset+int64(i)
	}
	checkRecords(t, h2, recs, again)
}

func bytesClone(recs []recordbatch.Record) []recordbatch.Record {
	out := make([]recordbatch.Record, len(recs))
	copy(out, recs)
	return out
}

// FuzzScanRecordsBounded checks the streaming scan against the whole
// decompression: for any records section of any codec and any bound, a
// section that decompresses within the bound scans exactly as its
// decompressed bytes do when stored uncompressed (same records, same
// outcome); one that does not never scans clean. Nothing panics, and no
// scan accepts more decompressed bytes than its bound.
func FuzzScanRecordsBounded(f *testing.F) {
	recs := []recordbatch.Record{
		{TimestampMs: 10, Key: []byte("k"), Value: []byte("v")},
		{TimestampMs: 5, Value: nil, Headers: []recordbatch.Header{{Key: "h", Value: []byte{}}, {Key: "n"}}},
		{TimestampMs: 20, Key: []byte{}, Value: bytes.Repeat([]byte("ab"), 40_000)},
	}
	// Bounds stay below 256 KiB: every input costs a decompression up to
	// its bound, and the fuzzer runs (and minimizes) many.
	const maxBound = 256 << 10
	for _, c := range codecs[1:] {
		buf, err := recordbatch.Encode(&recordbatch.Batch{ProducerID: -1, Compression: c, Records: recs})
		if err != nil {
			f.Fatal(err)
		}
		section := buf[recordbatch.HeaderSize:]
		f.Add(uint8(c-1), uint32(maxBound-1), section)
		f.Add(uint8(c-1), uint32(1000), section)
		f.Add(uint8(c-1), uint32(maxBound-1), section[:len(section)/2])
		bomb := hostilebatch.Bomb(c, 128<<10)
		f.Add(uint8(c-1), uint32(128<<10+16), bomb[recordbatch.HeaderSize:])
		f.Add(uint8(c-1), uint32(64<<10), bomb[recordbatch.HeaderSize:])
	}
	f.Fuzz(func(t *testing.T, codec uint8, limit uint32, section []byte) {
		c := recordbatch.Compression(codec%4 + 1)
		bound := int(limit % maxBound)
		batch := hostilebatch.WithSection(c, section)
		h, err := recordbatch.Verify(batch)
		if err != nil {
			t.Fatal(err)
		}
		var streamed []recordbatch.RecordInfo
		n, err := recordbatch.ScanRecords(batch, h, bound, func(_ int, r recordbatch.RecordInfo) error {
			streamed = append(streamed, r)
			return nil
		})
		whole, wholeErr := recordbatch.Decompress(nil, c, section, bound)
		if wholeErr != nil {
			if err == nil {
				t.Fatalf("%s: the scan accepted a section whose decompression fails: %v", c, wholeErr)
			}
			return
		}
		if len(whole) > bound {
			t.Fatalf("%s: decompressed %d bytes, bound %d", c, len(whole), bound)
		}
		plain := hostilebatch.WithSection(recordbatch.CompressionNone, whole)
		ph, err2 := recordbatch.Verify(plain)
		if err2 != nil {
			t.Fatal(err2)
		}
		var want []recordbatch.RecordInfo
		wantN, wantErr := recordbatch.ScanRecords(plain, ph, 0, func(_ int, r recordbatch.RecordInfo) error {
			want = append(want, r)
			return nil
		})
		if (err == nil) != (wantErr == nil) || n != wantN || !slices.Equal(streamed, want) {
			t.Fatalf("%s: streamed %d records %v (%v), the decompressed section %d %v (%v)", c, n, streamed, err, wantN, want, wantErr)
		}
		if err != nil && !errors.Is(err, recordbatch.ErrCorrupt) {
			t.Fatalf("%s: a section within its bound failed with %v, want ErrCorrupt", c, err)
		}
	})
}
