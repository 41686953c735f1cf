package kafka_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-log/strata/internal/testwait"
)

// A partition that moves between brokers (each move a new owner epoch)
// while an idempotent producer writes and a consumer reads: every record
// is acknowledged once, the consumer reads each exactly once in order and
// never resets or reports data loss (franz-go validates its position with
// OffsetForLeaderEpoch after each move), and the epoch history answers
// each old epoch with where it ended.
func TestPartitionMovesUnderKafkaClients(t *testing.T) {
	c := kafkaCluster(t, 2)
	c.CreateTopic("moving", 1, nil)
	ctx := testCtx(t)
	p := kgoClient(t, c, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	cons := kgoClient(t, c, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"moving": {0: kgo.NewOffset().At(0)}}),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()), kgo.FetchMaxWait(100*time.Millisecond))

	var (
		mu       sync.Mutex
		acked    = map[int64]string{}
		produced int
		stop     = make(chan struct{})
		done     = make(chan error, 1)
	)
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			v := fmt.Sprintf("r%05d", i)
			r := &kgo.Record{Topic: "moving", Partition: 0, Value: []byte(v)}
			if err := p.ProduceSync(ctx, r).FirstErr(); err != nil {
				done <- fmt.Errorf("produce %s: %w", v, err)
				return
			}
			mu.Lock()
			if prev, dup := acked[r.Offset]; dup {
				mu.Unlock()
				done <- fmt.Errorf("offset %d acknowledged for %s and %s", r.Offset, prev, v)
				return
			}
			acked[r.Offset] = v
			produced++
			mu.Unlock()
		}
	}()
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return produced
	}
	var read []*kgo.Record
	consumeUntil := func(n int) {
		t.Helper()
		for len(read) < n {
			fs := cons.PollFetches(ctx)
			fs.EachError(func(_ string, _ int32, err error) {
				var loss *kgo.ErrDataLoss
				if errors.As(err, &loss) {
					t.Fatalf("consumer saw data loss: %v", err)
				}
				t.Logf("fetch error (retried): %v", err)
			})
			read = append(read, fs.Records()...)
		}
	}
	for move := range 4 {
		from := count()
		testwait.UntilNil(t, 30*time.Second, "records produced since the last move", func() error {
			if count() < from+50 {
				return fmt.Errorf("%d produced", count())
			}
			return nil
		})
		id, _ := c.Owner("moving", 0)
		to := 0
		if id == c.Brokers[0].ID {
			to = 1
		}
		if err := c.MovePartition("moving", 0, to); err != nil {
			t.Fatalf("move %d: %v", move, err)
		}
		consumeUntil(count() / 2)
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	consumeUntil(count())
	for i, r := range read {
		want := acked[int64(i)]
		if r.Offset != int64(i) || string(r.Value) != want {
			t.Fatalf("record %d read as %s at offset %d, acknowledged as %s", i, r.Value, r.Offset, want)
		}
	}
	if len(read) != count() {
		t.Fatalf("read %d records, %d acknowledged", len(read), count())
	}
	checkEpochEnds(t, c.KafkaAddrs(), read)
}

// checkEpochEnds asks OffsetForLeaderEpoch for every epoch the records
// were written in: each epoch ends after its last record and at or before
// the first record of a later epoch (P10: never a false truncation, never
// past what the epoch wrote).
func checkEpochEnds(t *testing.T, addrs []string, read []*kgo.Record) {
	t.Helper()
	last, firstAfter := map[int32]int64{}, map[int32]int64{}
	var epochs []int32
	for _, r := range read {
		if _, seen := last[r.LeaderEpoch]; !seen {
			epochs = append(epochs, r.LeaderEpoch)
		}
		last[r.LeaderEpoch] = r.Offset
	}
	if len(epochs) < 3 {
		t.Fatalf("records written in epochs %v: the moves made too few", epochs)
	}
	for i, e := range epochs[:len(epochs)-1] {
		firstAfter[e] = last[epochs[i]] + 1
	}
	for _, e := range epochs {
		req := kmsg.NewPtrOffsetForLeaderEpochRequest()
		req.Version = 4
		rt := kmsg.NewOffsetForLeaderEpochRequestTopic()
		rt.Topic = "moving"
		rp := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
		rp.LeaderEpoch, rp.CurrentLeaderEpoch = e, -1
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		var got kmsg.OffsetForLeaderEpochResponseTopicPartition
		for _, addr := range addrs { // the owner answers; the other says NOT_LEADER
			resp := rawRequest[*kmsg.OffsetForLeaderEpochResponse](t, addr, req)
			if got = resp.Topics[0].Partitions[0]; got.ErrorCode == 0 {
				break
			}
		}
		if got.ErrorCode != 0 || got.LeaderEpoch != e || got.EndOffset <= last[e] {
			t.Fatalf("epoch %d (last record at %d): answered epoch %d end %d code %d", e, last[e], got.LeaderEpoch, got.EndOffset, got.ErrorCode)
		}
		if after, ok := firstAfter[e]; ok && got.EndOffset > after {
			t.Fatalf("epoch %d ends at %d, past the next epoch's first record %d", e, got.EndOffset, after)
		}
	}
}
