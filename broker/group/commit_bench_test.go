package group

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/recordbatch"
)

// slowLog is an OffsetsLog whose appends take latency each, like a quorum
// write to the bookies, and may run concurrently (as partlog.Log pipelines
// them).
type slowLog struct {
	memLog
	latency time.Duration
}

func (l *slowLog) Append(ctx context.Context, records []recordbatch.Record) error {
	// Simulated bookie round trip: the point of the benchmark is what the
	// coordinator does while it waits.
	time.Sleep(l.latency)
	return l.memLog.Append(ctx, records)
}

// BenchmarkCommitThroughput: commits/s of one offsets partition whose
// appends take 2 ms, with 64 concurrent committers. groups=64: each
// committer is the only member of its own group (one append per commit,
// the groups' appends in parallel); groups=1: 64 admin committers of one
// group, each on its own partition (the lane batches what queues behind
// an append).
//
// Measured on a shared 2-core machine (load average
// ~11; -benchtime 2000x-3000x before, 20000x after): with the mutex held
// across the append (before) 270-420 commits/s whatever the groups, one
// append latency and more per commit; with the per-group lanes (after)
// groups=64 9,600-19,000 commits/s and groups=1 6,000-12,000 commits/s,
// bounded by CPU, not by the log.
func BenchmarkCommitThroughput(b *testing.B) {
	const committers = 64
	for _, groups := range []int{committers, 1} {
		b.Run(fmt.Sprintf("groups=%d", groups), func(b *testing.B) {
			log := &slowLog{latency: 2 * time.Millisecond}
			topics := newTopics("t", committers)
			cfg := testConfig(&log.memLog, topics, newClock())
			cfg.Log = log
			c := New(cfg)
			if err := c.Load(context.Background()); err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			ctx := context.Background()
			type committer struct {
				group, member string
				epoch         int32
				partition     int32
			}
			var cs []committer
			for i := range committers {
				k := committer{group: fmt.Sprintf("g%d", i%groups), partition: int32(i)}
				if groups > 1 {
					k.member = fmt.Sprintf("m%d", i)
					r, err := c.Heartbeat(ctx, &brokerpb.GroupHeartbeatRequest{GroupId: k.group, MemberId: k.member, SubscribedTopics: []string{"t"}})
					if err != nil {
						b.Fatal(err)
					}
					k.epoch = r.MemberEpoch
					k.partition = r.Assignment[0].Partitions[0]
					if _, err := c.Heartbeat(ctx, &brokerpb.GroupHeartbeatRequest{GroupId: k.group, MemberId: k.member, MemberEpoch: k.epoch, Owned: r.Assignment}); err != nil {
						b.Fatal(err)
					}
				}
				cs = append(cs, k)
			}
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			for _, k := range cs {
				wg.Go(func() {
					for off := next.Add(1); off <= int64(b.N); off = next.Add(1) {
						resp, err := c.Commit(ctx, &brokerpb.CommitOffsetsRequest{GroupId: k.group, MemberId: k.member, MemberEpoch: k.epoch,
							Offsets: []*brokerpb.OffsetCommit{{Topic: "t", Partition: k.partition, Offset: off}}})
						if err != nil || resp.Results[0].Error != nil {
							b.Errorf("commit: %v %v", resp, err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "commits/s")
		})
	}
}
