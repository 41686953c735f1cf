package partlog

import (
	"bytes"
	"errors"
	"testing"

	"github.com/strata-log/strata/recordbatch"
)

// FuzzProduceFetch appends arbitrary bytes as a produced batch between two
// good ones, then reads the log back as a consumer does: Append either
// refuses the batch (ErrCorruptBatch, ErrTooLarge or another error, the log
// still open) or stores it; every fetched batch verifies and decodes to
// exactly its header's records at consecutive offsets; the good batches
// come back byte for byte at their offsets; and the log takes appends
// afterwards. One request cannot poison the partition for its readers.
func FuzzProduceFetch(f *testing.F) {
	for _, b := range []*recordbatch.Batch{
		{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1, Records: []recordbatch.Record{{TimestampMs: 5, Key: []byte("k"), Value: []byte("v")}}},
		{ProducerID: 7, ProducerEpoch: 0, BaseSequence: 0, Compression: recordbatch.CompressionGzip,
			Records: []recordbatch.Record{{TimestampMs: 5, Value: bytes.Repeat([]byte("a"), 300)}, {TimestampMs: 6, Value: nil}}},
		{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1, Compression: recordbatch.CompressionZstd,
			Records: []recordbatch.Record{{TimestampMs: 5, Value: []byte("x")}, {TimestampMs: 6, Value: []byte("y")}}},
	} {
		enc, err := recordbatch.Encode(b)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(enc)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		fx := NewFixture(t)
		l := fx.Open(fx.Config(1))
		before := Batch(t, fx.Clock.Now().UnixMilli(), "before-0", "before-1")
		after := Batch(t, fx.Clock.Now().UnixMilli(), "after")
		MustAppend(t, l, before, AcksQuorum)
		if _, err := l.Append(Ctx(t), bytes.Clone(in), AcksQuorum); err != nil {
			select {
			case <-l.Failed():
				t.Fatalf("a refused batch failed the log: %v", err)
			default:
			}
			if !errors.Is(err, ErrCorruptBatch) && !errors.Is(err, ErrTooLarge) {
				t.Logf("refused: %v", err)
			}
		}
		last := MustAppend(t, l, after, AcksQuorum)
		if hw := l.HighWatermark(); hw != last.BaseOffset+1 {
			t.Fatalf("high watermark %d after the last append at %d", hw, last.BaseOffset)
		}
		var got [][]byte
		for off := int64(0); off < l.HighWatermark(); {
			res, err := l.Fetch(Ctx(t), off, 1<<20, 0)
			if err != nil {
				t.Fatalf("Fetch(%d): %v", off, err)
			}
			batches, err := recordbatch.Split(res.Records())
			if err != nil || len(batches) == 0 {
				t.Fatalf("Fetch(%d): %d batches, %v", off, len(batches), err)
			}
			for _, b := range batches {
				h, err := recordbatch.Verify(b)
				if err != nil {
					t.Fatalf("stored batch at %d does not verify: %v", off, err)
				}
				_, recs, err := recordbatch.Decode(b)
				if err != nil || len(recs) != int(h.RecordCount) {
					t.Fatalf("stored batch at %d: %d records of %d, %v", h.BaseOffset, len(recs), h.RecordCount, err)
				}
				for i, r := range recs {
					if r.Offset != h.BaseOffset+int64(i) {
						t.Fatalf("record %d of the batch at %d has offset %d", i, h.BaseOffset, r.Offset)
					}
				}
				if h.BaseOffset != off {
					t.Fatalf("batch at %d, want %d", h.BaseOffset, off)
				}
				got = append(got, b)
				off = h.BaseOffset + int64(h.RecordCount)
			}
		}
		if len(got) < 2 || !sameBatch(got[0], before) || !sameBatch(got[len(got)-1], after) {
			t.Fatalf("the good batches did not come back unchanged (%d batches)", len(got))
		}
	})
}

// sameBatch compares a stored batch with what was produced, except the
// fields the owner stamps (base offset, partition leader epoch).
func sameBatch(stored, produced []byte) bool {
	return len(stored) == len(produced) && bytes.Equal(stored[8:12], produced[8:12]) && bytes.Equal(stored[16:], produced[16:])
}
