package recordbatch_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/strata-log/strata/internal/corruption"
	"github.com/strata-log/strata/recordbatch"
)

var codecs = []recordbatch.Compression{
	recordbatch.CompressionNone,
	recordbatch.CompressionGzip,
	recordbatch.CompressionSnappy,
	recordbatch.CompressionLZ4,
	recordbatch.CompressionZstd,
}

// sampleRecords covers keys, null keys, empty keys, tombstones, empty
// values, headers with empty and null values, and timestamps going back
// and forth around the first record's.
func sampleRecords() []recordbatch.Record {
	return []recordbatch.Record{
		{TimestampMs: 1_700_000_000_000, Key: []byte("k"), Value: []byte("v")},
		{TimestampMs: 1_700_000_000_005, Key: nil, Value: []byte("no key")},
		{TimestampMs: 1_699_999_999_000, Key: []byte("gone"), Value: nil}, // tombstone, earlier ts
		{TimestampMs: 1_700_000_100_000, Key: []byte{}, Value: []byte{}},
		{TimestampMs: 1_700_000_000_001, Key: []byte("h"), Value: []byte("with headers"), Headers: []recordbatch.Header{
			{Key: "trace", Value: []byte("abc")},
			{Key: "empty", Value: []byte{}},
			{Key: "null", Value: nil},
			{Key: "", Value: []byte("empty key")},
		}},
		{TimestampMs: 0, Key: bytes.Repeat([]byte("K"), 300), Value: bytes.Repeat([]byte("big value "), 10_000)},
		{TimestampMs: math.MaxInt64 / 2, Key: []byte("far future"), Value: []byte("x")},
	}
}

func manyRecords(n int, rng *rand.Rand) []recordbatch.Record {
	recs := make([]recordbatch.Record, n)
	for i := range recs {
		r := &recs[i]
		r.TimestampMs = 1_700_000_000_000 + int64(rng.IntN(100_000)) - 50_000
		if rng.IntN(4) != 0 {
			r.Key = fmt.Appendf(nil, "key-%d", rng.IntN(1000))
		}
		if rng.IntN(10) != 0 {
			r.Value = make([]byte, rng.IntN(300))
			for j := range r.Value {
				r.Value[j] = byte('a' + rng.IntN(4))
			}
		}
		for range rng.IntN(3) {
			r.Headers = append(r.Headers, recordbatch.Header{Key: fmt.Sprintf("h%d", rng.IntN(10)), Value: []byte("hv")})
		}
	}
	return recs
}

// checkRecords compares decoded records with the encoded ones.
func checkRecords(t *testing.T, h recordbatch.BatchHeader, want, got []recordbatch.Record) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("decoded %d records, want %d", len(got), len(want))
	}
	for i := range want {
		w, g := want[i], got[i]
		if g.OffsetDelta != int32(i) || g.Offset != h.BaseOffset+int64(i) {
			t.Errorf("record %d: offsetDelta %d offset %d, want %d %d", i, g.OffsetDelta, g.Offset, i, h.BaseOffset+int64(i))
		}
		if g.TimestampMs != w.TimestampMs {
			t.Errorf("record %d: timestamp %d, want %d", i, g.TimestampMs, w.TimestampMs)
		}
		if (g.Key == nil) != (w.Key == nil) || !bytes.Equal(g.Key, w.Key) {
			t.Errorf("record %d: key %q (nil %v), want %q (nil %v)", i, trunc(g.Key), g.Key == nil, trunc(w.Key), w.Key == nil)
		}
		if (g.Value == nil) != (w.Value == nil) || !bytes.Equal(g.Value, w.Value) {
			t.Errorf("record %d: value %q (nil %v), want %q (nil %v)", i, trunc(g.Value), g.Value == nil, trunc(w.Value), w.Value == nil)
		}
		if len(g.Headers) != len(w.Headers) {
			t.Fatalf("record %d: %d headers, want %d", i, len(g.Headers), len(w.Headers))
		}
		for j := range w.Headers {
			gh, wh := g.Headers[j], w.Headers[j]
			if gh.Key != wh.Key || (gh.Value == nil) != (wh.Value == nil) || !bytes.Equal(gh.Value, wh.Value) {
				t.Errorf("record %d header %d: %q=%q (nil %v), want %q=%q (nil %v)", i, j, gh.Key, gh.Value, gh.Value == nil, wh.Key, wh.Value, wh.Value == nil)
			}
		}
	}
}

func trunc(b []byte) []byte {
	if len(b) > 20 {
		return b[:20]
	}
	return b
}

func TestRoundTripEveryCodec(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	cases := map[string][]recordbatch.Record{
		"sample": sampleRecords(),
		"one":    {{TimestampMs: 42, Value: []byte("only")}},
		"many":   manyRecords(5000, rng),
	}
	for _, c := range codecs {
		for name, recs := range cases {
			t.Run(c.String()+"/"+name, func(t *testing.T) {
				b := &recordbatch.Batch{BaseOffset: 1000, ProducerID: 7, ProducerEpoch: 3, BaseSequence: 99, Compression: c, Records: recs}
				buf, err := recordbatch.Encode(b)
				if err != nil {
					t.Fatal(err)
				}
				h, got, err := recordbatch.Decode(buf)
				if err != nil {
					t.Fatal(err)
				}
				if h.Compression() != c || h.ProducerID != 7 || h.ProducerEpoch != 3 || h.BaseSequence != 99 ||
					h.BaseOffset != 1000 || h.RecordCount != int32(len(recs)) || h.LastOffsetDelta != int32(len(recs)-1) ||
					h.LastOffset() != 1000+int64(len(recs)-1) || h.Size() != len(buf) || h.PartitionLeaderEpoch != -1 || h.Magic != 2 {
					t.Errorf("header %+v", h)
				}
				maxTs := recs[0].TimestampMs
				for _, r := range recs {
					maxTs = max(maxTs, r.TimestampMs)
				}
				if h.BaseTimestamp != recs[0].TimestampMs || h.MaxTimestamp != maxTs {
					t.Errorf("timestamps base %d max %d, want %d %d", h.BaseTimestamp, h.MaxTimestamp, recs[0].TimestampMs, maxTs)
				}
				checkRecords(t, h, recs, got)

				// The Builder produces the same records.
				bld := recordbatch.NewBuilder(c)
				for _, r := range recs {
					bld.Append(r)
				}
				if bld.Len() != len(recs) {
					t.Fatalf("builder Len %d", bld.Len())
				}
				built, err := bld.Build(7, 3, 99)
				if err != nil {
					t.Fatal(err)
				}
				if c == recordbatch.CompressionNone {
					// Uncompressed: byte-identical apart from the base offset.
					recordbatch.SetBaseOffset(built, 1000)
					if !bytes.Equal(built, buf) {
						t.Fatal("Builder and Encode differ")
					}
					if bld.EstimatedSize() != len(built) {
						t.Errorf("EstimatedSize %d, built %d bytes", bld.EstimatedSize(), len(built))
					}
				}
				h2, got2, err := recordbatch.Decode(built)
				if err != nil {
					t.Fatal(err)
				}
				checkRecords(t, h2, recs, got2)
			})
		}
	}
}

func TestAppendEncodeReusesBuffer(t *testing.T) {
	recs := sampleRecords()
	prefix := []byte("prefix")
	out, err := recordbatch.AppendEncode(prefix, &recordbatch.Batch{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1, Compression: recordbatch.CompressionZstd, Records: recs})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(out, prefix) {
		t.Fatal("prefix lost")
	}
	if _, err := recordbatch.Verify(out[len(prefix):]); err != nil {
		t.Fatal(err)
	}
	if _, err := recordbatch.AppendEncode(nil, &recordbatch.Batch{}); !errors.Is(err, recordbatch.ErrInvalid) {
		t.Errorf("empty batch: %v, want ErrInvalid", err)
	}
	if _, err := recordbatch.Encode(&recordbatch.Batch{Compression: 5, Records: recs}); !errors.Is(err, recordbatch.ErrInvalid) {
		t.Errorf("codec 5: %v, want ErrInvalid", err)
	}
	if _, err := recordbatch.NewBuilder(recordbatch.CompressionNone).Build(-1, -1, -1); !errors.Is(err, recordbatch.ErrInvalid) {
		t.Errorf("empty builder: %v, want ErrInvalid", err)
	}
}

func TestBuilderSizeAndReset(t *testing.T) {
	b := recordbatch.NewBuilder(recordbatch.CompressionNone)
	if b.EstimatedSize() != recordbatch.HeaderSize || b.Len() != 0 {
		t.Fatalf("empty builder: size %d len %d", b.EstimatedSize(), b.Len())
	}
	recs := sampleRecords()
	for i := range recs {
		want := b.EstimatedSizeWith(&recs[i])
		b.Append(recs[i])
		if got := b.EstimatedSize(); got != want {
			t.Fatalf("record %d: EstimatedSizeWith %d, then EstimatedSize %d", i, want, got)
		}
	}
	// Append copies: mutating the caller's record afterwards changes nothing.
	key := []byte("mutable")
	b.Append(recordbatch.Record{TimestampMs: 1, Key: key})
	key[0] = 'X'
	buf, err := b.Build(-1, -1, -1)
	if err != nil {
		t.Fatal(err)
	}
	_, got, err := recordbatch.Decode(buf)
	if err != nil {
		t.Fatal(err)
	}
	if string(got[len(got)-1].Key) != "mutable" {
		t.Errorf("key %q: Append did not copy", got[len(got)-1].Key)
	}
	b.Reset()
	if b.Len() != 0 || b.EstimatedSize() != recordbatch.HeaderSize {
		t.Fatalf("after Reset: len %d size %d", b.Len(), b.EstimatedSize())
	}
	b.Append(recordbatch.Record{TimestampMs: 5, Value: []byte("again")})
	buf, err = b.Build(-1, -1, -1)
	if err != nil {
		t.Fatal(err)
	}
	h, got, err := recordbatch.Decode(buf)
	if err != nil || len(got) != 1 || h.BaseTimestamp != 5 || string(got[0].Value) != "again" {
		t.Fatalf("after Reset: %v %+v %v", err, h, got)
	}
}

// golden builds, from Kafka's spec and independently of the package, the
// batch holding one record key "k" value "v" at timestamp ts, producer -1.
func golden(ts int64) []byte {
	records := []byte{
		0x10,      // length 8 (zigzag 16)
		0x00,      // attributes
		0x00,      // timestampDelta 0
		0x00,      // offsetDelta 0
		0x02, 'k', // keyLength 1
		0x02, 'v', // valueLength 1
		0x00, // headerCount 0
	}
	be := binary.BigEndian
	var b []byte
	b = be.AppendUint64(b, 0)                                        // baseOffset
	b = be.AppendUint32(b, uint32(49+len(records)))                  // batchLength
	b = be.AppendUint32(b, 0xffffffff)                               // partitionLeaderEpoch -1
	b = append(b, 2)                                                 // magic
	b = be.AppendUint32(b, 0)                                        // crc, below
	b = be.AppendUint16(b, 0)                                        // attributes
	b = be.AppendUint32(b, 0)                                        // lastOffsetDelta
	b = be.AppendUint64(b, uint64(ts))                               // baseTimestamp
	b = be.AppendUint64(b, uint64(ts))                               // maxTimestamp
	b = be.AppendUint64(b, 0xffffffffffffffff)                       // producerId -1
	b = be.AppendUint16(b, 0xffff)                                   // producerEpoch -1
	b = be.AppendUint32(b, 0xffffffff)                               // baseSequence -1
	b = be.AppendUint32(b, 1)                                        // recordCount
	b = append(b, records...)                                        //
	crc := crc32.Checksum(b[21:], crc32.MakeTable(crc32.Castagnoli)) // attributes..end
	be.PutUint32(b[17:], crc)
	return b
}

func TestGoldenBatch(t *testing.T) {
	const ts = 1_700_000_000_000
	want := golden(ts)
	if len(want) != 70 {
		t.Fatalf("golden is %d bytes, want 70", len(want))
	}
	got, err := recordbatch.Encode(&recordbatch.Batch{
		ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1,
		Records: []recordbatch.Record{{TimestampMs: ts, Key: []byte("k"), Value: []byte("v")}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("encoded\n% x\nwant\n% x", got, want)
	}
	b := recordbatch.NewBuilder(recordbatch.CompressionNone)
	b.Append(recordbatch.Record{TimestampMs: ts, Key: []byte("k"), Value: []byte("v")})
	built, err := b.Build(-1, -1, -1)
	if err != nil || !bytes.Equal(built, want) {
		t.Fatalf("built (%v)\n% x\nwant\n% x", err, built, want)
	}
	h, recs, err := recordbatch.Decode(want)
	if err != nil {
		t.Fatal(err)
	}
	wantHeader := recordbatch.BatchHeader{
		BatchLength: 58, PartitionLeaderEpoch: -1, Magic: 2, CRC: binary.BigEndian.Uint32(want[17:]),
		BaseTimestamp: ts, MaxTimestamp: ts, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1, RecordCount: 1,
	}
	if h != wantHeader {
		t.Errorf("header\n%+v\nwant\n%+v", h, wantHeader)
	}
	wantRecs := []recordbatch.Record{{TimestampMs: ts, Key: []byte("k"), Value: []byte("v")}}
	if !reflect.DeepEqual(recs, wantRecs) {
		t.Errorf("records %+v", recs)
	}
}

// A second vector: a tombstone with a null key, a header with a null value,
// and a timestamp delta, at base offset 5, gzip-free.
func TestGoldenRecordEncoding(t *testing.T) {
	buf, err := recordbatch.Encode(&recordbatch.Batch{
		BaseOffset: 5, ProducerID: 1, ProducerEpoch: 0, BaseSequence: 0,
		Records: []recordbatch.Record{
			{TimestampMs: 100, Key: []byte("k"), Value: []byte("v")},
			{TimestampMs: 37, Headers: []recordbatch.Header{{Key: "h", Value: nil}, {Key: "e", Value: []byte{}}}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	wantRecords := []byte{
		0x10, 0x00, 0x00, 0x00, 0x02, 'k', 0x02, 'v', 0x00,
		0x18,      // length 12
		0x00,      // attributes
		0x7d,      // timestampDelta -63 (zigzag 125)
		0x02,      // offsetDelta 1
		0x01,      // key null
		0x01,      // value null
		0x04,      // 2 headers
		0x02, 'h', // key "h"
		0x01,      // value null
		0x02, 'e', // key "e"
		0x00, // value empty
	}
	if got := buf[recordbatch.HeaderSize:]; !bytes.Equal(got, wantRecords) {
		t.Fatalf("records\n% x\nwant\n% x", got, wantRecords)
	}
	h, err := recordbatch.ParseHeader(buf)
	if err != nil {
		t.Fatal(err)
	}
	if h.BaseOffset != 5 || h.LastOffsetDelta != 1 || h.BaseTimestamp != 100 || h.MaxTimestamp != 100 || h.ProducerID != 1 {
		t.Errorf("header %+v", h)
	}
}

func TestVerifyDetectsCorruption(t *testing.T) {
	for _, c := range codecs {
		buf, err := recordbatch.Encode(&recordbatch.Batch{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1, Compression: c, Records: sampleRecords()})
		if err != nil {
			t.Fatal(err)
		}
		// Every byte from attributes to the end is covered by the CRC.
		for _, i := range []int{21, 22, 30, 60, 61, len(buf) / 2, len(buf) - 1} {
			bad := bytes.Clone(buf)
			bad[i] ^= 0x40
			if _, err := recordbatch.Verify(bad); !errors.Is(err, recordbatch.ErrCorrupt) || !corruption.Is(err) {
				t.Errorf("%s: flipped byte %d: Verify %v, want ErrCorrupt, marked as corruption", c, i, err)
			}
			if _, _, err := recordbatch.Decode(bad); !errors.Is(err, recordbatch.ErrCorrupt) || !corruption.Is(err) {
				t.Errorf("%s: flipped byte %d: Decode %v, want ErrCorrupt, marked as corruption", c, i, err)
			}
		}
		// The CRC itself.
		bad := bytes.Clone(buf)
		bad[18] ^= 1
		if _, err := recordbatch.Verify(bad); !errors.Is(err, recordbatch.ErrCorrupt) {
			t.Errorf("%s: flipped crc: %v", c, err)
		}
	}
}

func TestCRCMismatchMessage(t *testing.T) {
	buf := golden(1)
	buf[len(buf)-1] = 1
	_, err := recordbatch.Verify(buf)
	crc := binary.BigEndian.Uint32(buf[17:])
	computed := crc32.Checksum(buf[21:], crc32.MakeTable(crc32.Castagnoli))
	want := fmt.Sprintf("recordbatch: corrupt batch: crc mismatch: stored 0x%08x computed 0x%08x", crc, computed)
	if err == nil || err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
}

func TestTruncatedAndMalformed(t *testing.T) {
	buf := golden(1)
	for n := range len(buf) {
		_, err := recordbatch.Verify(buf[:n])
		if !errors.Is(err, recordbatch.ErrShort) || corruption.Is(err) {
			// A short buffer is a batch not read whole yet, not damage.
			t.Errorf("truncated to %d bytes: Verify %v, want ErrShort, not marked as corruption", n, err)
		}
		if _, _, err := recordbatch.Decode(buf[:n]); !errors.Is(err, recordbatch.ErrShort) {
			t.Errorf("truncated to %d bytes: Decode %v, want ErrShort", n, err)
		}
	}
	if _, err := recordbatch.Verify(append(bytes.Clone(buf), 0)); !errors.Is(err, recordbatch.ErrCorrupt) {
		t.Errorf("trailing byte: %v, want ErrCorrupt", err)
	}
	for _, magic := range []byte{0, 1, 3} {
		bad := bytes.Clone(buf)
		bad[16] = magic
		if _, err := recordbatch.ParseHeader(bad); !errors.Is(err, recordbatch.ErrMagic) {
			t.Errorf("magic %d: %v, want ErrMagic", magic, err)
		}
		if _, err := recordbatch.Verify(bad[:20]); !errors.Is(err, recordbatch.ErrMagic) {
			t.Errorf("magic %d, 20 bytes: %v, want ErrMagic", magic, err)
		}
	}
	bad := bytes.Clone(buf)
	binary.BigEndian.PutUint32(bad[8:], 10)
	if _, err := recordbatch.ParseHeader(bad); !errors.Is(err, recordbatch.ErrCorrupt) {
		t.Errorf("batchLength 10: %v, want ErrCorrupt", err)
	}
	// ParseHeader needs only the header.
	if h, err := recordbatch.ParseHeader(buf[:recordbatch.HeaderSize]); err != nil || h.Size() != len(buf) {
		t.Errorf("header only: %+v %v", h, err)
	}
}

// withCRC fixes a hand-modified batch's length and CRC so that Decode gets
// past Verify and reaches the records.
func withCRC(b []byte) []byte {
	binary.BigEndian.PutUint32(b[8:], uint32(len(b)-12))
	binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[21:], crc32.MakeTable(crc32.Castagnoli)))
	return b
}

func TestDecodeMalformedRecords(t *testing.T) {
	base := golden(1)
	cases := map[string]func(b []byte) []byte{
		"record count too high":  func(b []byte) []byte { binary.BigEndian.PutUint32(b[57:], 2); return b },
		"record count negative":  func(b []byte) []byte { binary.BigEndian.PutUint32(b[57:], 0xffffffff); return b },
		"record count absurd":    func(b []byte) []byte { binary.BigEndian.PutUint32(b[57:], 1<<30); return b },
		"trailing bytes":         func(b []byte) []byte { return append(b, 0) },
		"record length too long": func(b []byte) []byte { b[61] = 0x12; return b },
		"record length short":    func(b []byte) []byte { b[61] = 0x0e; return b },
		"record length negative": func(b []byte) []byte { b[61] = 0x01; return b },
		"key length -2":          func(b []byte) []byte { b[65] = 0x03; return b },
		"key length too long":    func(b []byte) []byte { b[65] = 0x08; return b },
		"header count negative":  func(b []byte) []byte { b[69] = 0x01; return b },
		"header count too high":  func(b []byte) []byte { b[69] = 0x02; return b },
		"unknown codec":          func(b []byte) []byte { b[22] = 5; return b },
		"gzip garbage":           func(b []byte) []byte { b[22] = 1; return b },
		"snappy garbage":         func(b []byte) []byte { b[22] = 2; return b },
		"lz4 garbage":            func(b []byte) []byte { b[22] = 3; return b },
		"zstd garbage":           func(b []byte) []byte { b[22] = 4; return b },
		"varint overflow": func(b []byte) []byte {
			return append(b[:61], 0x1c, 0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 0x00, 0x00, 0x00)
		},
		"offset delta beyond int32": func(b []byte) []byte {
			b = append(b[:61], 0x14, 0x00, 0x00, 0x80, 0x80, 0x80, 0x80, 0x10, 0x01, 0x01, 0x00)
			return b
		},
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			b := withCRC(mutate(bytes.Clone(base)))
			_, _, err := recordbatch.Decode(b)
			if !errors.Is(err, recordbatch.ErrCorrupt) {
				t.Fatalf("Decode: %v, want ErrCorrupt", err)
			}
			t.Log(err)
		})
	}
}

func TestLogAppendTime(t *testing.T) {
	b := golden(1)
	b[22] |= 0x08 // timestamp type LogAppendTime
	binary.BigEndian.PutUint64(b[35:], 777)
	h, recs, err := recordbatch.Decode(withCRC(b))
	if err != nil {
		t.Fatal(err)
	}
	if !h.LogAppendTime() || recs[0].TimestampMs != 777 {
		t.Errorf("LogAppendTime %v, record timestamp %d, want 777", h.LogAppendTime(), recs[0].TimestampMs)
	}
}

func TestSetBaseOffsetAndEpochKeepCRC(t *testing.T) {
	for _, c := range codecs {
		buf, err := recordbatch.Encode(&recordbatch.Batch{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1, Compression: c, Records: sampleRecords()})
		if err != nil {
			t.Fatal(err)
		}
		crc := binary.BigEndian.Uint32(buf[17:])
		recordbatch.SetBaseOffset(buf, 1<<40+3)
		recordbatch.SetPartitionLeaderEpoch(buf, 12)
		h, recs, err := recordbatch.Decode(buf)
		if err != nil {
			t.Fatalf("%s: %v", c, err)
		}
		if h.BaseOffset != 1<<40+3 || h.PartitionLeaderEpoch != 12 || h.CRC != crc {
			t.Errorf("%s: header %+v", c, h)
		}
		for i, r := range recs {
			if r.Offset != 1<<40+3+int64(i) {
				t.Errorf("%s: record %d offset %d", c, i, r.Offset)
			}
		}
	}
}

func TestSplit(t *testing.T) {
	var all []byte
	var sizes []int
	for i, c := range codecs {
		buf, err := recordbatch.Encode(&recordbatch.Batch{BaseOffset: int64(i * 100), ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1, Compression: c, Records: sampleRecords()[:i+1]})
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, buf...)
		sizes = append(sizes, len(buf))
	}
	parts, err := recordbatch.Split(all)
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) != len(codecs) {
		t.Fatalf("%d batches, want %d", len(parts), len(codecs))
	}
	for i, p := range parts {
		if len(p) != sizes[i] || cap(p) != len(p) {
			t.Errorf("batch %d: len %d cap %d, want %d", i, len(p), cap(p), sizes[i])
		}
		h, recs, err := recordbatch.Decode(p)
		if err != nil || h.BaseOffset != int64(i*100) || len(recs) != i+1 {
			t.Errorf("batch %d: %+v %d records %v", i, h, len(recs), err)
		}
	}
	if parts, err := recordbatch.Split(nil); err != nil || len(parts) != 0 {
		t.Errorf("empty: %v %v", parts, err)
	}
	// A partial trailing batch: the complete ones come back with ErrShort.
	for _, cut := range []int{1, 10, recordbatch.HeaderSize, sizes[len(sizes)-1] - 1} {
		parts, err := recordbatch.Split(all[:len(all)-cut])
		if !errors.Is(err, recordbatch.ErrShort) {
			t.Errorf("cut %d: %v, want ErrShort", cut, err)
		}
		if len(parts) != len(codecs)-1 {
			t.Errorf("cut %d: %d complete batches, want %d", cut, len(parts), len(codecs)-1)
		}
	}
	bad := bytes.Clone(all)
	bad[sizes[0]+16] = 1
	if _, err := recordbatch.Split(bad); !errors.Is(err, recordbatch.ErrMagic) {
		t.Errorf("bad magic in batch 2: %v", err)
	}
}

func TestDecodeAliasing(t *testing.T) {
	buf := golden(1)
	_, recs, err := recordbatch.Decode(buf)
	if err != nil {
		t.Fatal(err)
	}
	// Uncompressed: the key aliases buf but appending to it cannot
	// overwrite the value that follows.
	if cap(recs[0].Key) != 1 {
		t.Errorf("key cap %d, want 1", cap(recs[0].Key))
	}
	_ = append(recs[0].Key, 'X')
	if string(recs[0].Value) != "v" {
		t.Errorf("value %q after appending to the key", recs[0].Value)
	}
}

func TestCompressionString(t *testing.T) {
	want := []string{"none", "gzip", "snappy", "lz4", "zstd"}
	for i, c := range codecs {
		if c.String() != want[i] || int(c) != i {
			t.Errorf("codec %d: %q", i, c)
		}
	}
	if s := recordbatch.Compression(6).String(); s != "compression(6)" {
		t.Errorf("unknown codec: %q", s)
	}
}

// OffsetForTime: the first record at or after a time and an offset, in
// create-time, log-append-time and compacted (sparse offset) batches.
func TestOffsetForTime(t *testing.T) {
	recs := []recordbatch.Record{{TimestampMs: 100}, {TimestampMs: 300}, {TimestampMs: 200}, {TimestampMs: 400}}
	b, err := recordbatch.Encode(&recordbatch.Batch{BaseOffset: 10, ProducerID: -1, Compression: recordbatch.CompressionLZ4, Records: recs})
	if err != nil {
		t.Fatal(err)
	}
	h, err := recordbatch.Verify(b)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		ts, minOffset     int64
		offset, timestamp int64
		found             bool
	}{
		{0, 0, 10, 100, true},
		{150, 0, 11, 300, true}, // by offset, not by time: 300 comes before 200
		{250, 12, 13, 400, true},
		{401, 0, 0, 0, false},
		{100, 14, 0, 0, false},
	} {
		o, ts, found, err := recordbatch.OffsetForTime(b, h, tc.ts, tc.minOffset, recordbatch.MaxDecompressedBytes)
		if err != nil || o != tc.offset || ts != tc.timestamp || found != tc.found {
			t.Errorf("OffsetForTime(%d, from %d) = %d@%d %v %v, want %d@%d %v", tc.ts, tc.minOffset, o, ts, found, err, tc.offset, tc.timestamp, tc.found)
		}
	}
	// Log append time: every record has the batch's max timestamp; the
	// first at or after minOffset answers.
	b[22] |= 0x08 // timestamp type LogAppendTime
	b = withCRC(b)
	if h, err = recordbatch.Verify(b); err != nil {
		t.Fatal(err)
	}
	if o, ts, found, _ := recordbatch.OffsetForTime(b, h, 0, 12, recordbatch.MaxDecompressedBytes); !found || o != 12 || ts != h.MaxTimestamp {
		t.Errorf("log append time: %d@%d %v, want 12@%d", o, ts, found, h.MaxTimestamp)
	}
}

// DecodeChecked skips only the CRC: a batch whose stored CRC is wrong
// decodes as Decode would, and every other check still fails it.
func TestDecodeCheckedSkipsOnlyTheCRC(t *testing.T) {
	for _, c := range codecs {
		buf, err := recordbatch.Encode(&recordbatch.Batch{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1, Compression: c, Records: sampleRecords()})
		if err != nil {
			t.Fatal(err)
		}
		wantH, want, err := recordbatch.Decode(buf)
		if err != nil {
			t.Fatal(err)
		}
		badCRC := bytes.Clone(buf)
		badCRC[18] ^= 1
		h, got, err := recordbatch.DecodeChecked(badCRC, recordbatch.MaxDecompressedBytes)
		if err != nil || len(got) != len(want) || h.LastOffset() != wantH.LastOffset() {
			t.Fatalf("%s: a wrong CRC: %d records, %v; want %d records", c, len(got), err, len(want))
		}
		for i := range want {
			if !bytes.Equal(got[i].Key, want[i].Key) || !bytes.Equal(got[i].Value, want[i].Value) || got[i].Offset != want[i].Offset {
				t.Fatalf("%s: record %d: %+v, want %+v", c, i, got[i], want[i])
			}
		}
		if _, _, err := recordbatch.DecodeChecked(buf[:len(buf)-1], recordbatch.MaxDecompressedBytes); !errors.Is(err, recordbatch.ErrShort) {
			t.Errorf("%s: truncated: %v, want ErrShort", c, err)
		}
		if _, _, err := recordbatch.DecodeChecked(append(bytes.Clone(buf), 0), recordbatch.MaxDecompressedBytes); !errors.Is(err, recordbatch.ErrCorrupt) {
			t.Errorf("%s: trailing byte: %v, want ErrCorrupt", c, err)
		}
	}
}

// Sequences wrap from MaxInt32 to 0 and are never negative.
func TestAddSequence(t *testing.T) {
	for _, tc := range []struct {
		seq  int32
		n    int
		want int32
	}{{0, 0, 0}, {5, 3, 8}, {math.MaxInt32, 1, 0}, {math.MaxInt32 - 1, 3, 1}, {math.MaxInt32, math.MaxInt32, math.MaxInt32 - 1}} {
		if got := recordbatch.AddSequence(tc.seq, tc.n); got != tc.want {
			t.Errorf("AddSequence(%d, %d) = %d, want %d", tc.seq, tc.n, got, tc.want)
		}
	}
}
