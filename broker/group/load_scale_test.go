package group

import (
	"context"
	"fmt"
	"testing"

	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/recordbatch"
)

// BenchmarkLoad is the coordinator's own cost of a load (decode each
// record, apply it), the log's reads aside (memLog hands over records):
// 100 groups x 10 partitions = 1,000 live offsets, replayed from the live
// state alone and from 1,000,000 commits of them (the broker's
// TestOffsetsLoadAfterMillionCommits loads through the partition log and
// compaction). ns/record is what one more record of history costs a
// load.
func BenchmarkLoad(b *testing.B) {
	const groups, partitions = 100, 10
	for _, commits := range []int{groups * partitions, 1_000_000} {
		b.Run(fmt.Sprintf("commits=%d", commits), func(b *testing.B) {
			log := &memLog{}
			ts := newClock().Now().UnixMilli()
			for r := range commits / (groups * partitions) {
				for g := range groups {
					recs := make([]recordbatch.Record, 0, partitions)
					for p := range partitions {
						rec, err := offsetRecord(fmt.Sprintf("group-%03d", g), TopicPartition{"orders", int32(p)},
							&brokerpb.GroupOffsetValue{Offset: int64(r), CommitTimestampMs: ts, MemberEpoch: -1}, ts)
						if err != nil {
							b.Fatal(err)
						}
						recs = append(recs, rec)
					}
					if err := log.Append(context.Background(), recs); err != nil {
						b.Fatal(err)
					}
				}
			}
			topics, clock := newTopics("orders", partitions), newClock()
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				c := New(testConfig(log, topics, clock))
				if err := c.Load(context.Background()); err != nil {
					b.Fatal(err)
				}
				if got := len(c.Offsets()); got != groups*partitions {
					b.Fatalf("%d offsets loaded, want %d", got, groups*partitions)
				}
				_ = c.Close()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(commits), "ns/record")
		})
	}
}
