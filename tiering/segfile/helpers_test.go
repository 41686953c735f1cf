package segfile_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math/rand"
	"testing"

	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/proto/tieringpb"
	"github.com/strata-log/strata/recordbatch"
	"github.com/strata-log/strata/tiering/segfile"
)

var ctx = context.Background()

var codecs = []recordbatch.Compression{
	recordbatch.CompressionNone, recordbatch.CompressionGzip, recordbatch.CompressionSnappy,
	recordbatch.CompressionLZ4, recordbatch.CompressionZstd,
}

// genConfig describes the batches genBatches makes.
type genConfig struct {
	batches    int
	maxRecords int // records per batch: 1..maxRecords
	maxValue   int // value bytes: 0..maxValue
	codec      recordbatch.Compression
	// compacted: gaps between batches, batches whose last offset delta
	// exceeds their record count, and some empty batches.
	compacted bool
	// logAppendTime: some batches get attribute bit 3 (timestamps are the
	// batch's max timestamp).
	logAppendTime bool
	// horizon: some batches get a KIP-534 delete horizon.
	horizon bool
}

// genBatches builds batches starting at offset base, as the broker stores
// them (base offset and leader epoch stamped). Timestamps wander, so
// neither batches nor records are in time order.
func genBatches(t testing.TB, rng *rand.Rand, base int64, c genConfig) [][]byte {
	t.Helper()
	var out [][]byte
	next, ts := base, int64(1_700_000_000_000)
	for range c.batches {
		n := 1 + rng.Intn(max(c.maxRecords, 1))
		recs := make([]recordbatch.Record, n)
		for i := range recs {
			ts += int64(rng.Intn(2000) - 500)
			recs[i] = recordbatch.Record{
				TimestampMs: ts,
				Key:         []byte(fmt.Sprintf("k%d", rng.Intn(50))),
				Value:       randomValue(rng, rng.Intn(c.maxValue+1)),
			}
		}
		b, err := recordbatch.Encode(&recordbatch.Batch{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1, Compression: c.codec, Records: recs})
		if err != nil {
			t.Fatal(err)
		}
		if c.compacted && rng.Intn(3) == 0 {
			next += int64(1 + rng.Intn(5)) // a hole before this batch
		}
		if c.compacted && rng.Intn(3) == 0 {
			// Records dropped at the end: the batch keeps its last offset.
			setLastOffsetDelta(b, int32(n-1+1+rng.Intn(4)))
		}
		if c.logAppendTime && rng.Intn(3) == 0 {
			setAttributes(b, attributes(b)|0x08)
		}
		if c.horizon && rng.Intn(4) == 0 {
			setAttributes(b, attributes(b)|0x40)
		}
		recordbatch.SetBaseOffset(b, next)
		recordbatch.SetPartitionLeaderEpoch(b, 7)
		h, err := recordbatch.Verify(b)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
		next = h.LastOffset() + 1
	}
	return out
}

func randomValue(rng *rand.Rand, n int) []byte {
	// Half random, half repeated: compressible but not trivially.
	b := make([]byte, n)
	rng.Read(b[:n/2])
	for i := n / 2; i < n; i++ {
		b[i] = byte('a' + i%7)
	}
	return b
}

func attributes(b []byte) uint16 { return binary.BigEndian.Uint16(b[21:]) }

func setAttributes(b []byte, a uint16) {
	binary.BigEndian.PutUint16(b[21:], a)
	reCRC(b)
}

func setLastOffsetDelta(b []byte, d int32) {
	binary.BigEndian.PutUint32(b[23:], uint32(d))
	reCRC(b)
}

// reCRC recomputes a batch's CRC-32C after its covered bytes changed.
func reCRC(b []byte) {
	binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[21:], crc32.MakeTable(crc32.Castagnoli)))
}

func baseOf(t testing.TB, batch []byte) int64 {
	t.Helper()
	h, err := recordbatch.ParseHeader(batch)
	if err != nil {
		t.Fatal(err)
	}
	return h.BaseOffset
}

// testFooter is a footer with every caller-supplied field set.
func testFooter() *tieringpb.SegmentFooter {
	return &tieringpb.SegmentFooter{
		Topic: "orders", TopicId: "4f1c2a9e5b7d3c80", Partition: 3,
		SourceLedgers: []uint64{41, 42}, CreatedAtMs: 1_700_000_123_456,
		WriterBroker: "broker-1", OwnerEpoch: 9, UploadId: "00c0ffee00c0ffee",
		Producers: []*brokerpb.ProducerState{{ProducerId: 5, Epoch: 1, LastTimestampMs: 1_700_000_000_000,
			Batches: []*brokerpb.ProducerBatch{{FirstSequence: 0, LastSequence: 2, BaseOffset: 100, LastOffset: 102}}}},
	}
}

// testKey is a tier key made of seed: tests with different seeds have
// different keys.
func testKey(t testing.TB, seed byte) *segfile.Key {
	t.Helper()
	k, err := segfile.NewKey(bytes.Repeat([]byte{seed}, segfile.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// authOf is how a reader that knows what metad records authenticates an
// object written with opts.
func authOf(opts segfile.Options) segfile.Auth {
	return segfile.Auth{Key: opts.Key, Name: opts.Name, Required: opts.Key != nil}
}

// authenticated returns opts writing an authenticated object named name
// with blockBytes-byte blocks.
func authenticated(t testing.TB, opts segfile.Options, name string, blockBytes int64) segfile.Options {
	opts.Key, opts.Name, opts.BlockBytes = testKey(t, 1), name, blockBytes
	return opts
}

// writeSegment writes batches into a segment and returns its bytes and
// summary.
func writeSegment(t testing.TB, batches [][]byte, opts segfile.Options) ([]byte, segfile.Summary) {
	t.Helper()
	var buf bytes.Buffer
	w, err := segfile.NewWriter(&buf, opts)
	if err != nil {
		t.Fatal(err)
	}
	for i, b := range batches {
		if err := w.Append(b); err != nil {
			t.Fatalf("append batch %d: %v", i, err)
		}
	}
	sum, err := w.Finish()
	if err != nil {
		t.Fatal(err)
	}
	if sum.Size != int64(buf.Len()) {
		t.Fatalf("summary size %d, wrote %d", sum.Size, buf.Len())
	}
	return buf.Bytes(), sum
}

// countingReader counts the reads of a RangeReader.
type countingReader struct {
	r     segfile.RangeReader
	reads int
	bytes int64
}

func (c *countingReader) ReadAt(ctx context.Context, off, n int64) ([]byte, error) {
	c.reads++
	c.bytes += n
	return c.r.ReadAt(ctx, off, n)
}

type wantTime struct {
	offset, ts int64
	found      bool
}

// bruteTime is ListOffsets by brute force: the first record at or after
// minOffset whose timestamp is >= ts.
func bruteTime(t testing.TB, batches [][]byte, ts, minOffset int64) wantTime {
	t.Helper()
	for _, b := range batches {
		h, recs, err := recordbatch.Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			rts := r.TimestampMs
			if h.LogAppendTime() {
				rts = h.MaxTimestamp
			}
			if rts >= ts && r.Offset >= minOffset {
				return wantTime{r.Offset, rts, true}
			}
		}
	}
	return wantTime{}
}

// bruteFetch is a fetch by brute force: the batches from the one holding
// offset (or the next), within maxBytes but at least one.
func bruteFetch(t testing.TB, batches [][]byte, offset, maxBytes int64) []byte {
	t.Helper()
	var out []byte
	for _, b := range batches {
		h, _ := recordbatch.ParseHeader(b)
		if h.LastOffset() < offset {
			continue
		}
		if len(out) > 0 && int64(len(out)+len(b)) > maxBytes {
			break
		}
		out = append(out, b...)
		if int64(len(out)) >= maxBytes {
			break
		}
	}
	return out
}
