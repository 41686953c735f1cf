package e2e

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/strata-log/strata/client"
	"github.com/strata-log/strata/e2e/loadtest"
	"github.com/strata-log/strata/internal/rpcerror"
	"github.com/strata-log/strata/internal/testwait"
	"github.com/strata-log/strata/proto/bookiepb"
	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/recordbatch"
	"github.com/strata-log/strata/recordbatch/hostilebatch"
)

// brokerRSSGrowthBoundMiB is how much the broker's peak RSS (VmHWM) may grow
// while it refuses the requests of TestHostileBroker. Without the bounds,
// one ListOffsets over a stored 300 MiB gzip bomb takes the broker from
// 25 MB to 288 MB, and 300 Metadata repeats of one topic to 1 GB. With
// them a bomb's validation streams (a window and at most an 8 MiB zstd
// window), and a 300k-entry Produce is refused after gRPC decoded it (a
// few MiB).
const brokerRSSGrowthBoundMiB = 96

// TestHostileBroker sends hostile requests (forged record counts, writes
// to internal topics, decompression bombs, oversized requests) to a real
// broker through raw gRPC: every one is refused with a clear,
// non-retryable error, nothing is written, the broker's memory stays
// bounded, and a consumer from the earliest offset reads every good record.
func TestHostileBroker(t *testing.T) {
	skipShort(t)
	// __consumer_offsets (16) and "hostile" (1) leave room for 3 more.
	c := startStrata(t, 1, "--max-cluster-partitions=20")
	cl := c.client(t)
	createTopic(t, cl, "hostile", 1, nil)
	broker := c.brokers[0]
	bc := rawBroker(t, broker.Listen)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	now := time.Now().UnixMilli()
	good := func(value string) []byte {
		b, err := recordbatch.Encode(&recordbatch.Batch{ProducerID: -1, Records: []recordbatch.Record{{TimestampMs: now, Value: []byte(value)}}})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	produce := func(topic string, records []byte) *brokerpb.ProducePartitionResult {
		t.Helper()
		resp, err := bc.Produce(ctx, &brokerpb.ProduceRequest{Partitions: []*brokerpb.ProducePartition{{Topic: topic, Partition: 0, Records: records}}})
		if err != nil {
			t.Fatalf("produce to %s: %v", topic, err)
		}
		return resp.Partitions[0]
	}
	refused := func(what string, r *brokerpb.ProducePartitionResult, reason, message string) {
		t.Helper()
		e := r.Error
		if e.GetInfo().GetReason() != reason || e.GetInfo().GetRetryable() || !strings.Contains(e.GetMessage(), message) {
			t.Fatalf("%s: got %s retryable=%v %q, want %s (not retryable) containing %q",
				what, e.GetInfo().GetReason(), e.GetInfo().GetRetryable(), e.GetMessage(), reason, message)
		}
		t.Logf("%s: %s %s", what, e.GetInfo().GetReason(), e.GetMessage())
	}
	rss := func() (int64, int64) {
		t.Helper()
		cur, peak, err := rssKiB(broker.Pid())
		if err != nil {
			t.Fatal(err)
		}
		return cur >> 10, peak >> 10
	}

	if r := produce("hostile", good("first")); r.Error != nil || r.BaseOffset != 0 {
		t.Fatalf("first batch: %v at %d", r.Error, r.BaseOffset)
	}
	startRSS, startPeak := rss()
	t.Logf("broker RSS %d MiB, peak %d MiB before the hostile requests", startRSS, startPeak)

	// Forged counts: a 61-byte batch claiming 2^31-1 records would move
	// the next offset by two billion and stop every consumer.
	claim := hostilebatch.Claim([]recordbatch.Record{{TimestampMs: now, Value: []byte("x")}}, math.MaxInt32, math.MaxInt32)
	refused("2^31-1 records claimed", produce("hostile", claim), rpcerror.ReasonCorruptBatch, "records")

	// Decompression bombs, refused at produce (TestHostileCompressionBombs
	// has every codec).
	for name, bomb := range map[string][]byte{"gzip": hostilebatch.GzipBomb(300 << 20), "zstd": hostilebatch.ZstdBomb(200 << 20)} {
		refused(fmt.Sprintf("%s bomb (%d bytes)", name, len(bomb)), produce("hostile", bomb), rpcerror.ReasonInvalid, "max.compression.ratio")
	}

	// Internal topics: clients may not write the group coordinators' topic.
	refused("produce to __consumer_offsets", produce("__consumer_offsets", good("forged")), rpcerror.ReasonInvalid, "internal")

	// A record stamped after its batch's max timestamp would slip past
	// message.timestamp.after.max.ms and the time index.
	future, err := recordbatch.Encode(&recordbatch.Batch{ProducerID: -1, Records: []recordbatch.Record{
		{TimestampMs: now, Value: []byte("now")}, {TimestampMs: now + 365*24*3600*1000, Value: []byte("next year")}}})
	if err != nil {
		t.Fatal(err)
	}
	binary.BigEndian.PutUint64(future[35:], uint64(now)) // max timestamp: the first record's
	refused("a record after the max timestamp", produce("hostile", hostilebatch.Fix(future)), rpcerror.ReasonCorruptBatch, "max timestamp")

	// The next good batch gets the next dense offset: nothing was written.
	if r := produce("hostile", good("second")); r.Error != nil || r.BaseOffset != 1 {
		t.Fatalf("batch after the refused ones: %v at %d, want offset 1", r.Error, r.BaseOffset)
	}

	// Oversized requests: one topic named 300 times is described once.
	names := make([]string, 300)
	for i := range names {
		names[i] = "hostile"
	}
	start := time.Now()
	md, err := bc.Metadata(ctx, &brokerpb.MetadataRequest{Topics: names})
	if err != nil {
		t.Fatal(err)
	}
	if len(md.Topics) != 1 || md.Topics[0].Name != "hostile" {
		t.Fatalf("metadata for 300 repeats: %d topics, want 1", len(md.Topics))
	}
	t.Logf("metadata with 300 repeats: %v", time.Since(start))
	many := make([]string, 1001)
	for i := range many {
		many[i] = fmt.Sprintf("t%d", i)
	}
	_, err = bc.Metadata(ctx, &brokerpb.MetadataRequest{Topics: many})
	wantInvalid(t, "metadata for 1001 topics", err, "more than 1000")

	// 300k partition entries in one Produce (unbounded: a goroutine
	// each), 1001 in a Fetch.
	entries := make([]*brokerpb.ProducePartition, 300_000)
	for i := range entries {
		entries[i] = &brokerpb.ProducePartition{Topic: "hostile", Partition: 0}
	}
	start = time.Now()
	_, err = bc.Produce(ctx, &brokerpb.ProduceRequest{Partitions: entries})
	wantInvalid(t, "produce with 300k entries", err, "at most 1000")
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("produce with 300k entries refused after %v", took)
	} else {
		t.Logf("produce with 300k entries refused in %v", took)
	}
	fetches := make([]*brokerpb.FetchPartition, 1001)
	for i := range fetches {
		fetches[i] = &brokerpb.FetchPartition{Topic: "hostile", Partition: 0}
	}
	_, err = bc.Fetch(ctx, &brokerpb.FetchRequest{Partitions: fetches})
	wantInvalid(t, "fetch with 1001 entries", err, "at most 1000")
	_, err = bc.Fetch(ctx, &brokerpb.FetchRequest{Partitions: fetches[:2]})
	wantInvalid(t, "fetch naming one partition twice", err, "more than once")

	// A huge CreateTopic (unbounded, 10,000 partitions took 8 minutes,
	// 10,000 ledgers and 20,000 goroutines), and the cluster's partition
	// cap.
	_, err = bc.CreateTopic(ctx, &brokerpb.CreateTopicRequest{Name: "huge", Partitions: 10_001})
	wantInvalid(t, "a topic of 10,001 partitions", err, "max-partitions-per-topic")
	// The controller creates __consumer_offsets (16 partitions).
	testwait.UntilNil(t, 30*time.Second, "the controller to create __consumer_offsets", func() error {
		lt, err := bc.ListTopics(ctx, &brokerpb.ListTopicsRequest{IncludeInternal: true})
		if err != nil {
			return err
		}
		if !slices.ContainsFunc(lt.Topics, func(s *brokerpb.TopicSummary) bool { return s.Name == "__consumer_offsets" }) {
			return errors.New("not listed yet")
		}
		return nil
	})
	_, err = bc.CreateTopic(ctx, &brokerpb.CreateTopicRequest{Name: "big", Partitions: 4})
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "max-cluster-partitions") {
		t.Fatalf("a topic past --max-cluster-partitions: %v, want RESOURCE_EXHAUSTED", err)
	}
	t.Logf("a topic past --max-cluster-partitions: %v", err)
	createTopic(t, cl, "small", 3, nil) // exactly up to the cap

	endRSS, endPeak := rss()
	t.Logf("broker RSS %d MiB, peak %d MiB after (bound: peak grows by at most %d MiB)", endRSS, endPeak, brokerRSSGrowthBoundMiB)
	if endPeak-startRSS > brokerRSSGrowthBoundMiB {
		t.Errorf("broker peak RSS %d MiB, %d MiB above the %d MiB before", endPeak, endPeak-startRSS, startRSS)
	}

	// A consumer from the earliest offset reads everything.
	recs := loadtest.ReadAll(t, cl, "hostile", 1)[0]
	if len(recs) != 2 || string(recs[0].Value) != "first" || string(recs[1].Value) != "second" || recs[1].Offset != 1 {
		t.Fatalf("consumer read %d records, want first@0 and second@1", len(recs))
	}
	checkPeakRSS(t, nodeRSSBoundMiB, append(bookieProcs(c.bookies), metadProcs(c.meta)...)...)
}

// wantInvalid checks a whole-RPC refusal: INVALID_ARGUMENT, not retryable,
// with a message naming the limit.
func wantInvalid(t *testing.T, what string, err error, message string) {
	t.Helper()
	if status.Code(err) != codes.InvalidArgument || rpcerror.Reason(err) != rpcerror.ReasonInvalid || !strings.Contains(err.Error(), message) {
		t.Fatalf("%s: %v, want INVALID_ARGUMENT containing %q", what, err, message)
	}
	t.Logf("%s: %v", what, err)
}

// TestHostileFenceOneBookie: a Fence of
// a partition's open ledger sent to one of its bookies, while an
// idempotent producer writes, costs the partition a takeover of itself
// (its writer is fenced, the broker drops the partition, recovers the
// ledger and opens a new one), not data and not availability for long:
// every record is acknowledged, and every acknowledged record is consumed
// exactly once, in order per key.
func TestHostileFenceOneBookie(t *testing.T) {
	skipShort(t)
	c := startStrata(t, 1)
	cl := c.client(t)
	ctx := context.Background()
	createTopic(t, cl, "fenced", 1, nil)
	load := loadtest.Start(t, cl, loadtest.Config{Topic: "fenced", Keys: 10, Rate: 500, Producer: client.ProducerConfig{Acks: client.AcksQuorum, Linger: 2 * time.Millisecond}})

	openLedger := func() uint64 {
		t.Helper()
		d, err := cl.DescribeTopic(ctx, "fenced")
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range d.Partitions[0].Ledgers {
			if !l.Closed {
				return l.LedgerId
			}
		}
		return 0
	}
	load.AwaitAcks(t, 200, "the load before the fence")
	victim := openLedger()
	if victim == 0 {
		t.Fatal("fenced/0 has no open ledger")
	}
	before := load.Acked()
	if _, err := dialBookie(t, c.bookies[1].Listen).Fence(ctx, &bookiepb.FenceRequest{LedgerId: victim}); err != nil {
		t.Fatalf("fence ledger %d on %s: %v", victim, c.bookies[1].ID, err)
	}
	fenced := time.Now()
	t.Logf("fenced ledger %d on bookie %s with %d records acknowledged", victim, c.bookies[1].ID, before)
	testwait.UntilNil(t, 30*time.Second, "the partition writes to a new ledger", func() error {
		if l := openLedger(); l == victim || l == 0 {
			return fmt.Errorf("open ledger %d", l)
		}
		if n := load.Acked(); n < before+200 {
			return fmt.Errorf("%d acknowledged since the fence", n-before)
		}
		return nil
	})
	t.Logf("200 more records acknowledged %v after the fence, on ledger %d", time.Since(fenced).Round(time.Millisecond), openLedger())
	res := load.Finish(t)
	acks, gap := res.Acks, res.MaxGap
	loadtest.Verify(t, cl, "fenced", 1, acks)
	procs := append(bookieProcs(c.bookies), metadProcs(c.meta)...)
	checkPeakRSS(t, nodeRSSBoundMiB, append(procs, c.brokers[0].Process)...)
	t.Logf("%d records acknowledged, all consumed exactly once; longest gap between acknowledgements %v", len(acks), gap.Round(time.Millisecond))
}
