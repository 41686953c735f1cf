package e2e

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/strata-log/strata/client"
	"github.com/strata-log/strata/internal/failpoint"
	"github.com/strata-log/strata/internal/testwait"
	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/proto/brokerpb"
)

// compactionArgs make compaction act within a test's patience: the
// compactor looks every 200 ms with a small key map (64 KiB: about 2,200
// keys), idle ledgers close after 1 s; unlisted ledgers (the outputs of a
// pass killed before its swap) are swept after 10 s (a pass must finish in
// half of that). Passes read at most compactionReadRate.
var compactionArgs = []string{"--compaction-check-interval", "200ms", "--compaction-map-bytes", "65536",
	"--idle-roll", "1s", "--orphan-ledger-grace", "10s", "--orphan-ledger-interval", "500ms",
	"--compaction-max-bytes-per-second", strconv.Itoa(compactionReadRate)}

// compactionReadRate is compactionArgs' --compaction-max-bytes-per-second.
const compactionReadRate = 8 << 20

// compactionModel is the reference: every acknowledged keyed record by
// offset.
type compactionModel struct {
	// batchBytes: the producer's batch size (0: 4 KiB, so that a small
	// ledger holds several batches).
	batchBytes int
	mu         sync.Mutex
	recs       map[int64]*client.Record
}

// produceKeyed writes n records with keys from keys distinct ones, values
// of about size bytes and one tombstone in tombstoneEvery, to partition 0,
// and records what was acknowledged.
func (m *compactionModel) produceKeyed(t *testing.T, cl *client.Client, topic string, rng *rand.Rand, n, keys, size, tombstoneEvery int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	batchBytes := m.batchBytes
	if batchBytes == 0 {
		batchBytes = 4096
	}
	p, err := cl.NewProducer(client.ProducerConfig{Linger: time.Millisecond, BatchBytes: batchBytes})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	if m.recs == nil {
		m.recs = map[int64]*client.Record{}
	}
	errs := make(chan error, n)
	for range n {
		k := "key-" + strconv.Itoa(rng.IntN(keys))
		var v []byte
		if rng.IntN(tombstoneEvery) != 0 {
			v = fmt.Appendf(nil, "%s=%d:%0*d", k, rng.Int64(), size, 0)
		}
		rec := &client.Record{Topic: topic, Partition: 0, Key: []byte(k), Value: v}
		if err := p.Produce(ctx, rec, func(r *client.Record, err error) {
			if err == nil {
				m.mu.Lock()
				m.recs[r.Offset] = &client.Record{Offset: r.Offset, Key: slices.Clone(rec.Key), Value: slices.Clone(rec.Value)}
				m.mu.Unlock()
			}
			errs <- err
		}); err != nil {
			t.Fatal(err)
		}
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// latest is what a fully compacted log holds: the latest record of each
// key, tombstones included when withTombstones, by offset.
func (m *compactionModel) latest(withTombstones bool) []*client.Record {
	m.mu.Lock()
	defer m.mu.Unlock()
	last := map[string]int64{}
	for off, r := range m.recs {
		if cur, ok := last[string(r.Key)]; !ok || off > cur {
			last[string(r.Key)] = off
		}
	}
	var out []*client.Record
	for _, off := range last {
		if r := m.recs[off]; r.Value != nil || withTombstones {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b *client.Record) int { return int(a.Offset - b.Offset) })
	return out
}

// readCompacted reads partition 0 from the earliest offset to the high
// watermark, across holes.
func readCompacted(t *testing.T, cl *client.Client, topic string) []*client.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tp := client.TopicPartition{Topic: topic, Partition: 0}
	end, err := cl.ListOffsets(ctx, tp, -1)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := cl.NewConsumer(client.ConsumerConfig{MaxWait: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	if err := cons.Assign(ctx, map[client.TopicPartition]client.Offset{tp: client.OffsetEarliest()}); err != nil {
		t.Fatal(err)
	}
	var out []*client.Record
	for {
		if pos, _ := cons.Position(tp); pos >= end.Offset {
			return out
		}
		recs, err := cons.Poll(ctx)
		if err != nil {
			t.Fatalf("poll: %v", err)
		}
		out = append(out, recs...)
	}
}

// checkAgainstModel compares what a consumer reads with the model.
func checkAgainstModel(t *testing.T, got, want []*client.Record) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("read %d records, the model keeps %d", len(got), len(want))
	}
	for i := range min(len(got), len(want)) {
		g, w := got[i], want[i]
		if g.Offset != w.Offset || string(g.Key) != string(w.Key) || string(g.Value) != string(w.Value) || (g.Value == nil) != (w.Value == nil) {
			t.Fatalf("record %d: offset %d key %s value %.30q (nil %t); want offset %d key %s value %.30q (nil %t)",
				i, g.Offset, g.Key, g.Value, g.Value == nil, w.Offset, w.Key, w.Value, w.Value == nil)
		}
	}
}

// describePartition0 is DescribeTopic's partition 0.
func describePartition0(t *testing.T, cl *client.Client, topic string) *brokerpb.PartitionDescription {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := cl.DescribeTopic(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	return d.Partitions[0]
}

// waitCleaned waits until compaction has cleaned everything written (the
// idle roll closed the last ledger, a pass covered it) after time since.
func waitCleaned(t *testing.T, cl *client.Client, topic string, since int64) *brokerpb.PartitionDescription {
	t.Helper()
	var p *brokerpb.PartitionDescription
	testwait.UntilNil(t, 60*time.Second, topic+" compacted to its end", func() error {
		p = describePartition0(t, cl, topic)
		if p.CleanedOffset != p.HighWatermark || p.LastCompactionMs <= since {
			return fmt.Errorf("cleaned to %d at %d, high watermark %d", p.CleanedOffset, p.LastCompactionMs, p.HighWatermark)
		}
		return nil
	})
	return p
}

// TestCompaction checks compaction against a reference model through the
// public interfaces, with real processes: random keys, values and
// tombstones over many small ledgers; a consumer from the earliest offset
// sees exactly the latest value of each live key at its original offset,
// tombstones inside their horizon (delete.retention.ms) and none after
// it; a kill -9 of the owner before or after a pass's swap loses nothing
// and leaves neither duplicates nor leaked ledgers; __consumer_offsets is
// compacted and a coordinator reloads the latest commits from it.
func TestCompaction(t *testing.T) {
	skipShort(t)
	c := startStrata(t, 1, compactionArgs...)
	cl := c.client(t)
	ctx := context.Background()
	env, _ := realLedgerEnv(t, c.meta)
	// Dirty ratio 0: any closed dirty ledger makes a pass, so the tests
	// can wait for "everything cleaned" (Decide's ratio has unit tests).
	compacted := map[string]string{"cleanup.policy": "compact", "segment.bytes": "16384", "min.cleanable.dirty.ratio": "0"}

	t.Run("reference model", func(t *testing.T) {
		keep := map[string]string{"delete.retention.ms": "3600000"}
		drop := map[string]string{"delete.retention.ms": "0"}
		for k, v := range compacted {
			keep[k], drop[k] = v, v
		}
		createTopic(t, cl, "compact-keep", 1, keep)
		createTopic(t, cl, "compact-drop", 1, drop)
		rng := rand.New(rand.NewPCG(11, 12))
		var mKeep, mDrop compactionModel
		began := time.Now()
		mKeep.produceKeyed(t, cl, "compact-keep", rng, 4000, 600, 300, 8)
		mDrop.produceKeyed(t, cl, "compact-drop", rng, 4000, 600, 300, 8)
		took := time.Since(began)
		pk := waitCleaned(t, cl, "compact-keep", 0)
		pd := waitCleaned(t, cl, "compact-drop", 0)
		admin := "http://" + c.brokers[0].AdminAddr + "/metrics"
		bytesIn, err1 := metricValue(admin, "strata_broker_compaction_bytes_in_total")
		secs, err2 := metricValue(admin, "strata_broker_compaction_duration_seconds_sum")
		runs, err3 := metricValue(admin, "strata_broker_compaction_runs_total")
		if err := errors.Join(err1, err2, err3); err != nil || runs < 2 || bytesIn <= 0 {
			t.Fatalf("compaction metrics: %v runs, %v bytes in: %v", runs, bytesIn, err)
		}
		t.Logf("compaction while producing, 16 KiB ledgers: %v passes, %.1f MB in, %.2f s in passes (each pass re-reads its range from the first ledger)",
			runs, bytesIn/1e6, secs)
		// Tombstones younger than delete.retention.ms stay.
		checkAgainstModel(t, readCompacted(t, cl, "compact-keep"), mKeep.latest(true))
		// With delete.retention.ms 0 a tombstone gets its horizon at the
		// pass that first keeps it and goes at the next pass: the next
		// compaction check runs one for the expired tombstones alone,
		// and new data makes one anyway.
		mDrop.produceKeyed(t, cl, "compact-drop", rng, 50, 10_000_000, 300, 1<<30)
		waitCleaned(t, cl, "compact-drop", pd.LastCompactionMs)
		checkAgainstModel(t, readCompacted(t, cl, "compact-drop"), mDrop.latest(false))
		if pk.Bytes >= int64(4000*300) || pk.DirtyRatio > 0.01 {
			t.Errorf("compact-keep: %d bytes, dirty ratio %v after compaction", pk.Bytes, pk.DirtyRatio)
		}
		t.Logf("2 x 4000 records (600 keys, 1 in 8 a tombstone) produced in %v; compact-keep compacted to %d bytes in %d ledgers",
			took.Round(time.Millisecond), pk.Bytes, len(pk.Ledgers))
		if out, errOut, code := strata(t, nil, "--broker="+c.brokers[0].Listen, "topic", "describe", "compact-keep"); code != 0 ||
			!strings.Contains(out, "compaction last ran") {
			t.Fatalf("topic describe: exit %d: %s%s", code, out, errOut)
		}
	})

	t.Run("kill -9 during compaction", func(t *testing.T) {
		// Compaction off while the data goes in; then the broker restarts
		// with a failpoint, compaction is switched on, the pass dies at
		// the failpoint, the broker comes back without it.
		createTopic(t, cl, "compact-crash", 1, map[string]string{"segment.bytes": "16384", "delete.retention.ms": "3600000"})
		rng := rand.New(rand.NewPCG(21, 22))
		var m compactionModel
		broker := c.brokers[0]
		for i, fp := range []string{"compaction.before_cas", "compaction.after_cas"} {
			wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
			if i > 0 {
				// Off again while more data goes in.
				if _, err := cl.AlterTopicConfigs(wctx, "compact-crash", map[string]string{"cleanup.policy": "delete"}, nil); err != nil {
					t.Fatal(err)
				}
			}
			m.produceKeyed(t, cl, "compact-crash", rng, 2000, 300, 300, 8)
			before := describePartition0(t, cl, "compact-crash")
			broker.Kill()
			broker.Env = []string{failpoint.EnvVar + "=" + fp + "=kill"}
			broker.Restart(t)
			if err := broker.WaitReady(wctx); err != nil {
				t.Fatal(err)
			}
			if _, err := cl.AlterTopicConfigs(wctx, "compact-crash", compacted, nil); err != nil {
				t.Fatal(err)
			}
			testwait.UntilNil(t, 60*time.Second, "the broker to die at "+fp, func() error {
				if broker.Running() {
					return errors.New("still running")
				}
				return nil
			})
			broker.Env = nil
			broker.Restart(t)
			if err := broker.WaitReady(wctx); err != nil {
				t.Fatal(err)
			}
			cancel()
			p := waitCleaned(t, cl, "compact-crash", before.LastCompactionMs)
			checkAgainstModel(t, readCompacted(t, cl, "compact-crash"), m.latest(true))
			// Every ledger of the partition is listed: the killed pass's
			// outputs (before_cas) or inputs (after_cas) were swept.
			testwait.UntilNil(t, 60*time.Second, "no unlisted ledger of the partition", func() error {
				all, err := ledger.ListAll(ctx, env.Meta)
				if err != nil {
					return err
				}
				p = describePartition0(t, cl, "compact-crash")
				listed := map[uint64]bool{}
				for _, l := range p.Ledgers {
					listed[l.LedgerId] = true
				}
				for _, md := range all {
					if md.Properties["topic"] == "compact-crash" && !listed[md.Id] {
						return fmt.Errorf("ledger %d is not listed", md.Id)
					}
				}
				return nil
			})
			t.Logf("killed at %s: the pass was redone, %d ledgers listed, nothing leaked", fp, len(p.Ledgers))
		}
	})

	t.Run("throughput", func(t *testing.T) {
		// 16 MB in 1 MiB ledgers written with compaction off, then one
		// pass (the 64 KiB map holds the 1,500 keys): MB/s of input, read from
		// the bookies, rewritten, written to new ledgers, swapped in and
		// the inputs deleted.
		createTopic(t, cl, "compact-bench", 1, map[string]string{"segment.bytes": "1048576"})
		m := compactionModel{batchBytes: 256 << 10}
		m.produceKeyed(t, cl, "compact-bench", rand.New(rand.NewPCG(31, 32)), 16000, 1500, 1000, 1<<30)
		testwait.UntilNil(t, 30*time.Second, "every ledger closed", func() error {
			p := describePartition0(t, cl, "compact-bench")
			if last := p.Ledgers[len(p.Ledgers)-1]; !last.Closed || last.LastOffset+1 != p.HighWatermark {
				return fmt.Errorf("the last ledger ends at %d (closed %t), high watermark %d", last.LastOffset, last.Closed, p.HighWatermark)
			}
			return nil
		})
		admin := "http://" + c.brokers[0].AdminAddr + "/metrics"
		metrics := func() (runs, bytesIn, secs float64) {
			runs, err0 := metricValue(admin, "strata_broker_compaction_runs_total")
			bytesIn, err1 := metricValue(admin, "strata_broker_compaction_bytes_in_total")
			secs, err2 := metricValue(admin, "strata_broker_compaction_duration_seconds_sum")
			if err := errors.Join(err0, err1, err2); err != nil {
				t.Fatal(err)
			}
			return runs, bytesIn, secs
		}
		runs0, in0, secs0 := metrics()
		before := describePartition0(t, cl, "compact-bench")
		if _, err := cl.AlterTopicConfigs(ctx, "compact-bench", map[string]string{"cleanup.policy": "compact",
			"min.cleanable.dirty.ratio": "0"}, nil); err != nil {
			t.Fatal(err)
		}
		p := waitCleaned(t, cl, "compact-bench", 0)
		// The pass is counted once its inputs are deleted, after the swap.
		var runs, in1, secs1 float64
		testwait.UntilNil(t, 30*time.Second, "the pass to be counted", func() error {
			if runs, in1, secs1 = metrics(); runs == runs0 {
				return errors.New("not yet")
			}
			return nil
		})
		checkAgainstModel(t, readCompacted(t, cl, "compact-bench"), m.latest(true))
		// The pass read no faster than --compaction-max-bytes-per-second
		// (its pacer lets it run ahead by 10 ms at most); unbounded, it
		// reads 15 to 30 MB/s here on a quiet machine.
		if rate := (in1 - in0) / (secs1 - secs0); rate > 1.05*compactionReadRate {
			t.Errorf("the pass read %.1f MB/s, above --compaction-max-bytes-per-second %.1f MB/s", rate/1e6, compactionReadRate/1e6)
		}
		t.Logf("%v passes; the last over %d ledgers, %.1f MB: %.2f s, %.1f MB/s of input (real processes: 3 bookies, 3 metad, 2 cores shared); %d bytes in %d ledgers after",
			runs-runs0, len(before.Ledgers)-1, (in1-in0)/1e6, secs1-secs0, (in1-in0)/1e6/(secs1-secs0), p.Bytes, len(p.Ledgers))
	})

	t.Run("consumer offsets", func(t *testing.T) {
		// Small ledgers for __consumer_offsets, so its commits are
		// compacted within the test.
		if _, err := cl.AlterTopicConfigs(ctx, "__consumer_offsets", map[string]string{"segment.bytes": "16384",
			"min.cleanable.dirty.ratio": "0.01"}, nil); err != nil {
			t.Fatal(err)
		}
		const groups, commits = 8, 300
		tp := client.TopicPartition{Topic: "compact-keep", Partition: 0}
		var wg sync.WaitGroup
		errs := make(chan error, groups)
		for g := range groups {
			wg.Add(1)
			go func() {
				defer wg.Done()
				cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
				defer cancel()
				for i := 1; i <= commits; i++ {
					if err := cl.CommitGroupOffsets(cctx, fmt.Sprintf("g%d", g), map[client.TopicPartition]int64{tp: int64(i*10 + g)}); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		var cleaned int
		var totalBytes int64
		testwait.UntilNil(t, 60*time.Second, "__consumer_offsets compacted", func() error {
			d, err := cl.DescribeTopic(ctx, "__consumer_offsets")
			if err != nil {
				return err
			}
			cleaned, totalBytes = 0, 0
			for _, p := range d.Partitions {
				totalBytes += p.Bytes
				if p.LastCompactionMs > 0 && p.CleanedOffset == p.HighWatermark {
					cleaned++
				} else if p.HighWatermark > 0 {
					return fmt.Errorf("partition %d: cleaned to %d, high watermark %d", p.Partition, p.CleanedOffset, p.HighWatermark)
				}
			}
			// About 100 bytes a commit before compaction; a handful of
			// records a group after.
			if totalBytes > groups*commits*100/10 {
				return fmt.Errorf("__consumer_offsets still holds %d bytes", totalBytes)
			}
			return nil
		})
		// A new coordinator replays the compacted partitions.
		broker := c.brokers[0]
		broker.Kill()
		broker.Restart(t)
		wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		if err := broker.WaitReady(wctx); err != nil {
			t.Fatal(err)
		}
		for g := range groups {
			testwait.UntilNil(t, 30*time.Second, "group offsets after reload", func() error {
				got, err := cl.FetchOffsets(wctx, fmt.Sprintf("g%d", g), tp)
				if err != nil {
					return err
				}
				if len(got) != 1 || got[0].Offset != int64(commits*10+g) {
					return fmt.Errorf("group g%d committed %v, want %d", g, got, commits*10+g)
				}
				return nil
			})
		}
		t.Logf("%d commits by %d groups; %d __consumer_offsets partitions compacted to %d bytes; offsets reloaded after kill -9",
			groups*commits, groups, cleaned, totalBytes)
	})
}
