package partlog

import (
	"fmt"
	"testing"

	"github.com/strata-log/strata/recordbatch"
)

// BenchmarkAppend measures the broker-side CPU per batch (verify the CRC,
// dedup, stamp, hand to the ledger writer, acknowledge, tail cache) over
// in-memory bookies and metad that answer inline: the partition log's and
// the ledger writer's own cost, no I/O. Batches of 100-byte records.
func BenchmarkAppend(b *testing.B) {
	for _, idempotent := range []bool{false, true} {
		for _, records := range []int{1, 10, 100} {
			b.Run(fmt.Sprintf("idempotent=%v/records=%d", idempotent, records), func(b *testing.B) {
				f := NewFixture(b)
				cfg := f.Config(1)
				cfg.SegmentBytes = 1 << 40
				l := f.Open(cfg)
				recs := make([]recordbatch.Record, records)
				for i := range recs {
					recs[i] = recordbatch.Record{TimestampMs: 1_700_000_000_000, Value: make([]byte, 100)}
				}
				encode := func(seq int) []byte {
					pb := &recordbatch.Batch{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1, Records: recs}
					if idempotent {
						pb.ProducerID, pb.ProducerEpoch, pb.BaseSequence = 1, 0, int32(seq*records)
					}
					out, err := recordbatch.Encode(pb)
					if err != nil {
						b.Fatal(err)
					}
					return out
				}
				template := encode(0)
				ctx := Ctx(b)
				b.SetBytes(int64(len(template)))
				b.ReportAllocs()
				b.ResetTimer()
				for i := range b.N {
					var batch []byte
					if idempotent {
						b.StopTimer()
						batch = encode(i)
						b.StartTimer()
					} else {
						batch = append([]byte(nil), template...) // Append keeps the slice
					}
					if _, err := l.Append(ctx, batch, AcksQuorum); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
