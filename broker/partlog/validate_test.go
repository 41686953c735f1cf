package partlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"runtime"
	"testing"

	"github.com/strata-log/strata/recordbatch"
	"github.com/strata-log/strata/recordbatch/hostilebatch"
)

// rawRecord encodes one record with the given offset delta and value,
// bypassing the encoder (which always writes dense deltas).
func rawRecord(offsetDelta int32, value string) []byte { return rawRecordAt(offsetDelta, 0, value) }

// rawRecordAt is rawRecord with a timestamp delta.
func rawRecordAt(offsetDelta int32, timestampDelta int64, value string) []byte {
	body := []byte{0}                                    // attributes
	body = binary.AppendVarint(body, timestampDelta)     // timestamp delta
	body = binary.AppendVarint(body, int64(offsetDelta)) // offset delta
	body = binary.AppendVarint(body, -1)                 // null key
	body = binary.AppendVarint(body, int64(len(value)))  // value length
	body = append(body, value...)                        // value
	body = binary.AppendVarint(body, 0)                  // header count
	return append(binary.AppendVarint(nil, int64(len(body))), body...)
}

// rawBatch is an uncompressed batch of records whose header claims count
// records and last offset delta lod.
func rawBatch(count, lod int32, records ...[]byte) []byte {
	var section []byte
	for _, r := range records {
		section = append(section, r...)
	}
	b := hostilebatch.WithSection(recordbatch.CompressionNone, section)
	binary.BigEndian.PutUint32(b[57:], uint32(count))
	binary.BigEndian.PutUint32(b[23:], uint32(lod))
	return hostilebatch.Fix(b)
}

// withAttributes is b with its attributes set to attr (CRC fixed).
func withAttributes(b []byte, attr uint16) []byte {
	binary.BigEndian.PutUint16(b[21:], attr)
	return hostilebatch.Fix(b)
}

func TestValidateRecords(t *testing.T) {
	r0, r1, r2 := rawRecord(0, "a"), rawRecord(1, "b"), rawRecord(2, "c")
	lz4, err := recordbatch.Encode(&recordbatch.Batch{ProducerID: -1, Compression: recordbatch.CompressionLZ4,
		Records: []recordbatch.Record{{Value: []byte("a")}, {Value: []byte("b")}}})
	if err != nil {
		t.Fatal(err)
	}
	truncated := append(rawRecord(1, "b")[:0:0], rawRecord(1, "b")...)
	truncated[0] += 2 // the length claims 1 more byte than the record has
	for _, tc := range []struct {
		name  string
		batch []byte
		want  error // nil: valid
	}{
		{"three dense records", rawBatch(3, 2, r0, r1, r2), nil},
		{"lz4", lz4, nil},
		{"claims 2^31-1 records (H2 probe claim-records)", hostilebatch.Claim([]recordbatch.Record{{Value: []byte("x")}}, math.MaxInt32, math.MaxInt32), ErrCorruptBatch},
		{"claims more records than it holds", rawBatch(3, 2, r0, r1), ErrCorruptBatch},
		{"claims fewer records than it holds", rawBatch(2, 1, r0, r1, r2), ErrCorruptBatch},
		{"zero records", rawBatch(0, -1), ErrCorruptBatch},
		{"last offset delta past the count (compacted shape)", rawBatch(2, 5, r0, r1), ErrCorruptBatch},
		{"last offset delta below the count", rawBatch(3, 1, r0, r1, r2), ErrCorruptBatch},
		{"offset deltas with a gap", rawBatch(2, 1, r0, r2), ErrCorruptBatch},
		{"offset deltas out of order", rawBatch(3, 2, r1, r0, r2), ErrCorruptBatch},
		{"record length past the bytes", rawBatch(2, 1, r0, truncated), ErrCorruptBatch},
		{"trailing garbage after the records", rawBatch(1, 0, r0, []byte{0x7f}), ErrCorruptBatch},
		// The header's max timestamp is 0: a record at +1 h would pass
		// message.timestamp.after.max.ms and the time index unseen.
		{"a record newer than the max timestamp", rawBatch(2, 1, r0, rawRecordAt(1, 3_600_000, "b")), ErrCorruptBatch},
		{"a record older than the base timestamp", rawBatch(2, 1, r0, rawRecordAt(1, -5, "b")), nil},
		{"a timestamp delta that overflows", rawBatch(2, 1, r0, rawRecordAt(1, math.MaxInt64, "b")), ErrCorruptBatch},
		// Transaction markers are the broker's to write (Kafka's
		// LogValidator: "Clients are not allowed to write control
		// records"); consumers skip control batches, so a produced one
		// was acknowledged and never delivered.
		{"a control batch", withAttributes(rawBatch(1, 0, r0), 0x20), ErrCorruptBatch},
		{"an unknown codec", withAttributes(rawBatch(1, 0, r0), 5), ErrCorruptBatch},
		// Bit 6 says the base timestamp is a delete horizon (KIP-534),
		// which only compaction stamps: a produced one (here 0) had
		// compaction drop the batch's tombstones at its first pass, not
		// after delete.retention.ms.
		{"a delete horizon", withAttributes(rawBatch(1, 0, r0), 0x40), ErrCorruptBatch},
		{"a transactional batch", withAttributes(rawBatch(1, 0, r0), 0x10), nil},
		{"gzip bomb", hostilebatch.GzipBomb(64 << 20), ErrTooLarge},
		{"zstd bomb", hostilebatch.ZstdBomb(64 << 20), ErrTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := recordbatch.Verify(tc.batch)
			if err != nil {
				t.Fatalf("Verify: %v (the batch must get past the CRC check)", err)
			}
			err = validateRecords(tc.batch, h, DefaultMaxBatchBytes)
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("validateRecords: %v, want %v", err, tc.want)
			}
			if err != nil {
				t.Log(err)
			}
		})
	}
}

// H2 and H3 through Append: a refused batch writes nothing, so the next
// valid batch gets the next dense offset; a bomb is refused without
// allocating what it inflates to.
func TestAppendRefusesLyingBatchesAndBombs(t *testing.T) {
	f := NewFixture(t)
	l := f.Open(f.Config(1))
	ts := f.Clock.Now().UnixMilli()
	MustAppend(t, l, Batch(t, ts, "a"), AcksQuorum)
	claim := hostilebatch.Claim([]recordbatch.Record{{TimestampMs: ts, Value: []byte("x")}}, math.MaxInt32, math.MaxInt32)
	if _, err := l.Append(Ctx(t), claim, AcksQuorum); !errors.Is(err, ErrCorruptBatch) {
		t.Fatalf("claim batch: %v, want ErrCorruptBatch", err)
	}
	for name, bomb := range map[string][]byte{"gzip": hostilebatch.GzipBomb(256 << 20), "zstd": hostilebatch.ZstdBomb(256 << 20)} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := l.Append(Ctx(t), bomb, AcksQuorum)
		runtime.ReadMemStats(&after)
		if !errors.Is(err, ErrTooLarge) {
			t.Fatalf("%s bomb: %v, want ErrTooLarge", name, err)
		}
		// The output grows by doubling up to the bound (8 MiB for a 1 MiB
		// max.message.bytes), plus zstd's window: well below the 256 MiB
		// the bomb inflates to.
		allocated := after.TotalAlloc - before.TotalAlloc
		t.Logf("%s bomb (%d bytes): %v; allocated %.1f MiB", name, len(bomb), err, float64(allocated)/(1<<20))
		if bound := uint64(DecompressedBound(DefaultMaxBatchBytes)); allocated > 3*bound+16<<20 {
			t.Errorf("%s bomb: Append allocated %d bytes", name, allocated)
		}
	}
	if r := MustAppend(t, l, Batch(t, ts, "b", "c"), AcksQuorum); r.BaseOffset != 1 || r.LastOffset != 2 {
		t.Fatalf("next batch at %d..%d, want 1..2", r.BaseOffset, r.LastOffset)
	}
	if got := FetchAll(t, l, 0); len(got) != 3 || got[2].Offset != 2 {
		t.Fatalf("read back %d records, want 3 at offsets 0..2", len(got))
	}
}

// BenchmarkValidateRecords is the cost Append adds per batch: a 16 KiB
// batch of 100-byte records, uncompressed and lz4.
func BenchmarkValidateRecords(b *testing.B) {
	recs := make([]recordbatch.Record, 150)
	for i := range recs {
		recs[i] = recordbatch.Record{TimestampMs: 1_700_000_000_000, Key: []byte(fmt.Sprintf("key-%d", i)), Value: make([]byte, 100)}
		for j := range recs[i].Value {
			recs[i].Value[j] = byte(i * j)
		}
	}
	for _, c := range []recordbatch.Compression{recordbatch.CompressionNone, recordbatch.CompressionLZ4} {
		buf, err := recordbatch.Encode(&recordbatch.Batch{ProducerID: -1, Compression: c, Records: recs})
		if err != nil {
			b.Fatal(err)
		}
		h, err := recordbatch.Verify(buf)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("%s/%dB", c, len(buf)), func(b *testing.B) {
			b.SetBytes(16 << 10)
			b.ReportAllocs()
			for b.Loop() {
				if err := validateRecords(buf, h, DefaultMaxBatchBytes); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
