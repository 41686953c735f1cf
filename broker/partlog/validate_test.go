package partlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/strata-log/strata/internal/alloctest"
	"github.com/strata-log/strata/internal/racedetect"
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
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := recordbatch.Verify(tc.batch)
			if err != nil {
				t.Fatalf("Verify: %v (the batch must get past the CRC check)", err)
			}
			err = validateRecords(tc.batch, h, DefaultMaxCompressionRatio)
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("validateRecords: %v, want %v", err, tc.want)
			}
			if err != nil {
				t.Log(err)
			}
		})
	}
}

// Decompression bombs are valid one-record batches: only the bounds refuse
// them, the ratio first, and 64 MiB (what every reader decodes within)
// whatever the ratio.
func TestValidateRecordsBombs(t *testing.T) {
	for _, tc := range []struct {
		name     string
		batch    []byte
		maxRatio int
		want     error // nil: valid
	}{
		{"gzip bomb", hostilebatch.GzipBomb(8 << 20), DefaultMaxCompressionRatio, ErrInflated},
		// S2's codes: a bomb past the ratio, and as corrupt within it
		// (Kafka's clients could not read it).
		{"snappy bomb", hostilebatch.SnappyBomb(8 << 20), DefaultMaxCompressionRatio, ErrInflated},
		{"snappy with S2's codes", hostilebatch.SnappyBomb(4 << 10), DefaultMaxCompressionRatio, ErrCorruptBatch},
		{"snappy bomb under a ratio that allows it", hostilebatch.SnappyBomb(8 << 20), 1_000_000, ErrCorruptBatch},
		{"standard snappy at its largest ratio", hostilebatch.SnappyZeros(8 << 20), DefaultMaxCompressionRatio, nil},
		{"standard snappy under a lower ratio", hostilebatch.SnappyZeros(8 << 20), 10, ErrInflated},
		{"lz4 bomb", hostilebatch.Lz4Bomb(8 << 20), DefaultMaxCompressionRatio, ErrInflated},
		{"zstd bomb", hostilebatch.ZstdBomb(8 << 20), DefaultMaxCompressionRatio, ErrInflated},
		{"zstd bomb under a ratio that allows it", hostilebatch.ZstdBomb(8 << 20), 100_000, nil},
		{"zstd bomb past 64 MiB", hostilebatch.ZstdBomb(64 << 20), 100_000, ErrTooLarge},
	} {
		h, err := recordbatch.Verify(tc.batch)
		if err != nil {
			t.Fatal(err)
		}
		err = validateRecords(tc.batch, h, tc.maxRatio)
		if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
			t.Fatalf("%s: %v, want %v", tc.name, err, tc.want)
		}
		t.Logf("%s (%d bytes): %v", tc.name, len(tc.batch), err)
	}
}

// H2 and H3 through Append: a refused batch writes nothing, so the next
// valid batch gets the next dense offset; a bomb of any codec is refused
// without allocating what it inflates to (the check streams).
func TestAppendRefusesLyingBatchesAndBombs(t *testing.T) {
	f := NewFixture(t)
	l := f.Open(f.Config(1))
	ts := f.Clock.Now().UnixMilli()
	MustAppend(t, l, Batch(t, ts, "a"), AcksQuorum)
	claim := hostilebatch.Claim([]recordbatch.Record{{TimestampMs: ts, Value: []byte("x")}}, math.MaxInt32, math.MaxInt32)
	if _, err := l.Append(Ctx(t), claim, AcksQuorum); !errors.Is(err, ErrCorruptBatch) {
		t.Fatalf("claim batch: %v, want ErrCorruptBatch", err)
	}
	if _, err := l.Append(Ctx(t), hostilebatch.SnappyBomb(4<<10), AcksQuorum); !errors.Is(err, ErrCorruptBatch) {
		t.Fatalf("snappy with S2's codes: %v, want ErrCorruptBatch", err)
	}
	for _, c := range hostilebatch.BombCodecs {
		bomb := hostilebatch.Bomb(c, 128<<20) // lz4's is about 520 KB: within max.message.bytes
		var err error
		allocated := alloctest.Bytes(func() { _, err = l.Append(Ctx(t), bomb, AcksQuorum) })
		if !errors.Is(err, ErrInflated) || !strings.Contains(err.Error(), "max.compression.ratio is 100") {
			t.Fatalf("%s bomb: %v, want ErrInflated naming the ratio", c, err)
		}
		// A window and the codec's state (zstd's ring of up to 8 MiB,
		// snappy's 4 MiB blocks): far below the 128 MiB the bomb
		// inflates to.
		t.Logf("%s bomb (%d bytes): %v; allocated %.1f MiB", c, len(bomb), err, float64(allocated)/(1<<20))
		if !racedetect.Enabled && allocated > 12<<20 {
			t.Errorf("%s bomb: Append allocated %d bytes", c, allocated)
		}
	}
	if r := MustAppend(t, l, Batch(t, ts, "b", "c"), AcksQuorum); r.BaseOffset != 1 || r.LastOffset != 2 {
		t.Fatalf("next batch at %d..%d, want 1..2", r.BaseOffset, r.LastOffset)
	}
	if got := FetchAll(t, l, 0); len(got) != 3 || got[2].Offset != 2 {
		t.Fatalf("read back %d records, want 3 at offsets 0..2", len(got))
	}
}

// jsonRecords are n JSON records shaped like an HTTP access log and a
// metrics feed (random ids, addresses and numbers; a small vocabulary of
// paths, agents and metric names), which compress about as real ones do.
func jsonRecords(n int) []recordbatch.Record {
	rng := rand.New(rand.NewPCG(3, 4))
	paths := []string{"/api/v1/users", "/api/v1/orders", "/healthz", "/api/v2/search", "/static/app.js", "/login"}
	agents := []string{"Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Safari/537.36", "curl/8.4.0", "okhttp/4.12.0"}
	recs := make([]recordbatch.Record, n)
	for i := range recs {
		var v []byte
		if i%2 == 0 {
			v = fmt.Appendf(nil, `{"ts":%d,"level":"info","remote":"10.%d.%d.%d","method":"GET","path":"%s","status":%d,"bytes":%d,"latency_ms":%.3f,"request_id":"%016x","user_agent":"%s"}`,
				1_733_500_000_000+int64(i), rng.IntN(256), rng.IntN(256), rng.IntN(256), paths[rng.IntN(len(paths))],
				[]int{200, 201, 404, 500}[rng.IntN(4)], rng.IntN(100_000), rng.Float64()*300, rng.Uint64(), agents[rng.IntN(len(agents))])
		} else {
			v = fmt.Appendf(nil, `{"name":"system.cpu.usage","host":"web-%02d","region":"eu-west-1","value":%.4f,"ts":%d}`,
				rng.IntN(40), rng.Float64(), 1_733_500_000_000+int64(i))
		}
		recs[i] = recordbatch.Record{TimestampMs: 1_733_500_000_000, Key: fmt.Appendf(nil, "user-%d", rng.IntN(1e6)), Value: v}
	}
	return recs
}

// Real data passes the default max.compression.ratio by far, with every
// codec, in batches from 0.6 KiB to 1 MiB of records; the bound is exact:
// a batch decompressing to just its ratio times its size passes, one byte
// of ratio less refuses it.
func TestCompressionRatioRefusesBombsNotData(t *testing.T) {
	recs := jsonRecords(7000)
	for _, c := range hostilebatch.Codecs {
		for _, n := range []int{4, 100, 1700, 7000} { // about 0.6 KiB, 16 KiB, 256 KiB, 1 MiB of records
			buf, err := recordbatch.Encode(&recordbatch.Batch{ProducerID: -1, Compression: c, Records: recs[:n]})
			if err != nil {
				t.Fatal(err)
			}
			plain, err := recordbatch.Encode(&recordbatch.Batch{ProducerID: -1, Records: recs[:n]})
			if err != nil {
				t.Fatal(err)
			}
			h, err := recordbatch.Verify(buf)
			if err != nil {
				t.Fatal(err)
			}
			inflated := len(plain) - recordbatch.HeaderSize
			ratio := float64(inflated) / float64(len(buf))
			if err := validateRecords(buf, h, DefaultMaxCompressionRatio); err != nil {
				t.Errorf("%s, %d records (%d bytes, ratio %.1f): %v", c, n, len(buf), ratio, err)
			}
			if ratio > DefaultMaxCompressionRatio/5 {
				t.Errorf("%s, %d records: ratio %.1f, closer to the default bound than real data comes", c, n, ratio)
			}
			// The exact bound: ratio r allows r times the batch's size.
			atLeast := (inflated + len(buf) - 1) / len(buf)
			if err := validateRecords(buf, h, atLeast); err != nil {
				t.Errorf("%s, %d records: ratio %d (decompressed %d <= %d): %v", c, n, atLeast, inflated, atLeast*len(buf), err)
			}
			if atLeast > 1 {
				if err := validateRecords(buf, h, atLeast-1); !errors.Is(err, ErrInflated) {
					t.Errorf("%s, %d records: ratio %d (decompressed %d > %d): %v, want ErrInflated", c, n, atLeast-1, inflated, (atLeast-1)*len(buf), err)
				}
			}
			t.Logf("%s, %d records: %d bytes, ratio %.1f", c, n, len(buf), ratio)
		}
	}
}

// DecompressedBound is what a produce budget holds while a batch is
// validated: the batch's size unless its records are decompressed, else
// its InflationBound.
func TestDecompressedBound(t *testing.T) {
	lim := Limits{MaxBatchBytes: DefaultMaxBatchBytes, MaxCompressionRatio: 100}
	plain := Batch(t, 0, "a", "b")
	bomb := hostilebatch.ZstdBomb(8 << 20)
	big := hostilebatch.Lz4Bomb(300 << 20) // about 1.2 MB: more than InflationBound allows
	for _, tc := range []struct {
		name  string
		batch []byte
		lim   Limits
		want  int
	}{
		{"uncompressed", plain, lim, len(plain)},
		{"compressed", bomb, lim, 100 * len(bomb)},
		{"compressed, higher ratio", bomb, Limits{MaxBatchBytes: DefaultMaxBatchBytes, MaxCompressionRatio: 1000}, 1000 * len(bomb)},
		{"compressed, at most 64 MiB", big, Limits{MaxBatchBytes: 8 << 20, MaxCompressionRatio: 100}, recordbatch.MaxDecompressedBytes},
		{"refused unread: above max.message.bytes", big, lim, len(big)},
		{"no header", bomb[:20], lim, 20},
	} {
		if got := DecompressedBound(tc.batch, tc.lim); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
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
				if err := validateRecords(buf, h, DefaultMaxCompressionRatio); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// ListOffsets by time over stored bombs (written before the ratio bound,
// or under a raised max.compression.ratio) streams every batch it looks
// into: batches whose header's max timestamp is past the time but whose
// records are older make it scan all of them, and the scans cost a
// window and the codec's state, not the 8 MiB each bomb inflates to
// (unbounded, one lookup over a stored 300 MiB gzip bomb took a broker
// from 25 MB to 288 MB; bounded by allocating, twice the bound per batch).
func TestListOffsetsOverStoredBombsIsBounded(t *testing.T) {
	f := NewFixture(t)
	cfg := f.Config(1)
	cfg.MaxCompressionRatio = 1_000_000
	l := f.Open(cfg)
	now := f.Clock.Now().UnixMilli()
	const bombs = 10
	for range bombs {
		bomb := hostilebatch.ZstdBomb(8 << 20)
		binary.BigEndian.PutUint64(bomb[35:], uint64(now)) // max timestamp now; the record's is 0
		MustAppend(t, l, hostilebatch.Fix(bomb), AcksQuorum)
	}
	lookup := func() {
		off, ts, err := l.ListOffset(Ctx(t), now)
		if err != nil || off != bombs || ts != -1 {
			t.Fatalf("ListOffset(%d) = %d, %d, %v; want the high watermark %d: no record is that new", now, off, ts, err, bombs)
		}
	}
	lookup() // warm the pools
	allocated := alloctest.Bytes(lookup)
	t.Logf("a time lookup through %d bombs of 8 MiB allocated %.1f KiB", bombs, float64(allocated)/(1<<10))
	if !racedetect.Enabled && allocated > 2<<20 {
		t.Errorf("the lookup allocated %d bytes", allocated)
	}
}
