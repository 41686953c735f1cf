package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/strata-log/strata/client"
	"github.com/strata-log/strata/internal/failpoint"
	"github.com/strata-log/strata/internal/testwait"
	"github.com/strata-log/strata/ledger"
)

// retentionArgs make retention act within a test's patience: checks every
// 200 ms, idle segments close after 1 s, orphans are swept after 2 s.
var retentionArgs = []string{"--retention-check-interval", "200ms", "--idle-roll", "1s",
	"--orphan-ledger-grace", "2s", "--orphan-ledger-interval", "200ms"}

// produceValues writes n records "<prefix><i>" of size bytes to partition
// 0 and returns the acknowledged offset of each.
func produceValues(t *testing.T, cl *client.Client, topic, prefix string, n, size int) []int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// Small batches: a segment holds several, as it would with a real
	// segment.bytes.
	p, err := cl.NewProducer(client.ProducerConfig{Linger: time.Millisecond, BatchBytes: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	offsets := make([]int64, n)
	errs := make(chan error, n)
	pad := bytes.Repeat([]byte("x"), size)
	for i := range n {
		v := append([]byte(prefix+strconv.Itoa(i)+":"), pad...)
		if err := p.Produce(ctx, &client.Record{Topic: topic, Partition: 0, Value: v}, func(r *client.Record, err error) {
			if err == nil {
				offsets[i] = r.Offset
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
	return offsets
}

// partitionLog is what DescribeTopic says of partition 0.
func partitionLog(t *testing.T, cl *client.Client, topic string) (start, hw, size int64, ledgers []uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := cl.DescribeTopic(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	p := d.Partitions[0]
	for _, l := range p.Ledgers {
		ledgers = append(ledgers, l.LedgerId)
	}
	return p.LogStartOffset, p.HighWatermark, p.Bytes, ledgers
}

// readFromEarliest reads partition 0 from OffsetEarliest to the high
// watermark and checks that the records are contiguous.
func readFromEarliest(t *testing.T, cl *client.Client, topic string) []*client.Record {
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
	first, _ := cons.Position(tp)
	if first != end.LogStartOffset {
		t.Fatalf("earliest resolved to %d, log start is %d", first, end.LogStartOffset)
	}
	var out []*client.Record
	for first+int64(len(out)) < end.Offset {
		recs, err := cons.Poll(ctx)
		if err != nil {
			t.Fatalf("poll: %v", err)
		}
		for _, r := range recs {
			if want := first + int64(len(out)); r.Offset != want {
				t.Fatalf("offset %d, want %d", r.Offset, want)
			}
			out = append(out, r)
		}
	}
	return out
}

// TestRetention: size retention on a busy partition, time retention on an
// idle one, the timestamp bound, and a crash between the CAS that unlinks
// segments and the deletion of their ledgers.
func TestRetention(t *testing.T) {
	skipShort(t)
	c := startStrata(t, 1, retentionArgs...)
	cl := c.client(t)
	ctx := context.Background()
	env, _ := realLedgerEnv(t, c.meta)
	exists := func(id uint64) bool {
		_, _, err := env.Meta.Get(ctx, id)
		if err != nil && !errors.Is(err, ledger.ErrNoSuchLedger) {
			t.Fatal(err)
		}
		return err == nil
	}
	// deleted waits for ledgers to go: they are deleted after the CAS that
	// moves the log start past them.
	deleted := func(t *testing.T, ids []uint64) {
		t.Helper()
		testwait.UntilNil(t, 30*time.Second, "the ledgers retention removed to be deleted", func() error {
			for _, id := range ids {
				if exists(id) {
					return fmt.Errorf("ledger %d still exists", id)
				}
			}
			return nil
		})
	}

	t.Run("size", func(t *testing.T) {
		const segment, keep = 16384, 65536
		createTopic(t, cl, "sized", 1, map[string]string{"segment.bytes": fmt.Sprint(segment), "retention.bytes": fmt.Sprint(keep)})
		_, _, _, initial := partitionLog(t, cl, "sized")
		offsets := produceValues(t, cl, "sized", "s", 1000, 1024) // ~1 MiB: ~64 segments
		var start, size int64
		// Until retention is done: deleting the first ledger left would
		// keep less than retention.bytes (a pass that ran just before the
		// last records went in leaves one more to delete).
		testwait.UntilNil(t, 30*time.Second, "size retention", func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			d, err := cl.DescribeTopic(ctx, "sized")
			if err != nil {
				return err
			}
			p := d.Partitions[0]
			start, size = p.LogStartOffset, p.Bytes
			if start == 0 || size > keep+2*segment || len(p.Ledgers) > 1 && size-p.Ledgers[0].Bytes >= keep {
				return fmt.Errorf("log start %d, %d bytes in %d ledgers", start, size, len(p.Ledgers))
			}
			return nil
		})
		recs := readFromEarliest(t, cl, "sized")
		if int64(len(recs)) != offsets[len(offsets)-1]+1-start {
			t.Fatalf("read %d records from %d", len(recs), start)
		}
		for _, r := range recs {
			if !bytes.HasPrefix(r.Value, []byte("s"+strconv.FormatInt(r.Offset, 10)+":")) {
				t.Fatalf("offset %d holds %.20q", r.Offset, r.Value)
			}
		}
		deleted(t, initial)
		testwait.UntilNil(t, 30*time.Second, "bookies to hold no copy of a deleted ledger", func() error {
			return bookieCopiesMatch(c, env)
		})
		d, err := cl.DescribeTopic(context.Background(), "sized")
		if err != nil || d.Partitions[0].LastRetentionMs <= 0 {
			t.Fatalf("describe says retention never ran: %v", err)
		}
		t.Logf("1000 records of 1 KiB, retention.bytes %d: log start %d, %d bytes kept", keep, start, size)
	})

	t.Run("time on an idle partition", func(t *testing.T) {
		createTopic(t, cl, "timed", 1, map[string]string{"retention.ms": "2000"})
		produceValues(t, cl, "timed", "t", 100, 10)
		_, hw, _, ledgers := partitionLog(t, cl, "timed")
		// The idle roll closes the segment after 1 s, retention deletes it
		// once its newest record is 2 s old.
		testwait.UntilNil(t, 30*time.Second, "time retention", func() error {
			if start, _, _, _ := partitionLog(t, cl, "timed"); start != hw {
				return fmt.Errorf("log start %d, high watermark %d", start, hw)
			}
			return nil
		})
		deleted(t, ledgers)
		cons, err := cl.NewConsumer(client.ConsumerConfig{MaxWait: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		defer cons.Close()
		tp := client.TopicPartition{Topic: "timed", Partition: 0}
		if err := cons.Assign(ctx, map[client.TopicPartition]client.Offset{tp: client.OffsetAt(0)}); err != nil {
			t.Fatal(err)
		}
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err = cons.Poll(pctx)
		var oor *client.OffsetOutOfRangeError
		if !errors.As(err, &oor) || oor.LogStartOffset != hw {
			t.Fatalf("fetch at 0 after retention: %v, want out of range with log start %d", err, hw)
		}
	})

	t.Run("time on a busy partition", func(t *testing.T) {
		// Segments roll every second (segment.ms), retention drops those
		// whose newest record is older than 1.5 s, while records keep
		// coming.
		createTopic(t, cl, "busy", 1, map[string]string{"retention.ms": "1500", "segment.ms": "1000"})
		p, err := cl.NewProducer(client.ProducerConfig{Linger: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close(ctx)
		var starts []int64
		for i := 0; len(starts) < 3; i++ {
			if _, err := p.ProduceSync(ctx, &client.Record{Topic: "busy", Partition: 0, Value: []byte("b" + strconv.Itoa(i))}); err != nil {
				t.Fatal(err)
			}
			if start, _, _, _ := partitionLog(t, cl, "busy"); start > 0 && (len(starts) == 0 || start > starts[len(starts)-1]) {
				starts = append(starts, start)
			}
			if i > 100000 {
				t.Fatalf("log start moved only %v times while producing", starts)
			}
		}
		recs := readFromEarliest(t, cl, "busy")
		for _, r := range recs {
			if string(r.Value) != "b"+strconv.FormatInt(r.Offset, 10) {
				t.Fatalf("offset %d holds %q", r.Offset, r.Value)
			}
		}
		t.Logf("log start advanced to %v while producing; %d records kept", starts, len(recs))
	})

	t.Run("group committed below the log start", func(t *testing.T) {
		createTopic(t, cl, "lost", 1, map[string]string{"segment.bytes": "16384"})
		produceValues(t, cl, "lost", "l", 100, 1024)
		gc, err := cl.NewGroupConsumer(client.GroupConfig{Group: "slow", Topics: []string{"lost"}, DisableAutoCommit: true,
			SessionTimeout: groupSession, ResetOffset: client.OffsetEarliest()})
		if err != nil {
			t.Fatal(err)
		}
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if _, err := gc.Poll(pctx); err != nil {
			t.Fatal(err)
		}
		if err := gc.CommitOffsets(pctx, map[client.TopicPartition]int64{{Topic: "lost", Partition: 0}: 10}); err != nil {
			t.Fatal(err)
		}
		if err := gc.Close(pctx); err != nil {
			t.Fatal(err)
		}
		if _, err := cl.AlterTopicConfigs(pctx, "lost", map[string]string{"retention.bytes": "40000"}, nil); err != nil {
			t.Fatal(err)
		}
		var start int64
		testwait.UntilNil(t, 30*time.Second, "retention", func() error {
			if start, _, _, _ = partitionLog(t, cl, "lost"); start <= 10 {
				return fmt.Errorf("log start %d", start)
			}
			return nil
		})
		broker := "--broker=" + c.brokers[0].Listen
		out, errOut, code := strata(t, nil, broker, "group", "describe", "slow", "--output", "json")
		if code != 0 {
			t.Fatalf("group describe: exit %d: %s", code, errOut)
		}
		var d struct {
			Partitions []struct {
				Committed     int64 `json:"committed"`
				LogStart      int64 `json:"log_start"`
				BelowLogStart bool  `json:"below_log_start"`
			} `json:"partitions"`
		}
		if err := json.Unmarshal([]byte(out), &d); err != nil || len(d.Partitions) != 1 {
			t.Fatalf("group describe: %v: %s", err, out)
		}
		if p := d.Partitions[0]; p.Committed != 10 || p.LogStart != start || !p.BelowLogStart {
			t.Fatalf("group describe: %+v, want committed 10 below log start %d", p, start)
		}
		out, _, _ = strata(t, nil, broker, "group", "describe", "slow")
		if !strings.Contains(out, "10*") || !strings.Contains(out, fmt.Sprintf("committed 10, log start %d", start)) {
			t.Fatalf("group describe does not flag the committed offset below the log start:\n%s", out)
		}
	})

	t.Run("far-future timestamps", func(t *testing.T) {
		createTopic(t, cl, "future", 1, map[string]string{"message.timestamp.after.max.ms": "60000"})
		p, err := cl.NewProducer(client.ProducerConfig{})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close(ctx)
		rec := &client.Record{Topic: "future", Partition: 0, Value: []byte("from 2099"), Timestamp: time.Now().Add(2 * time.Hour)}
		if _, err := p.ProduceSync(ctx, rec); err == nil || !bytes.Contains([]byte(err.Error()), []byte("message.timestamp.after.max.ms")) {
			t.Fatalf("a record 2 h ahead: %v", err)
		}
		rec = &client.Record{Topic: "future", Partition: 0, Value: []byte("now"), Timestamp: time.Now().Add(time.Second)}
		if _, err := p.ProduceSync(ctx, rec); err != nil {
			t.Fatalf("a record 1 s ahead: %v", err)
		}
	})

	t.Run("crash after the unlinking CAS", func(t *testing.T) {
		createTopic(t, cl, "crash", 1, map[string]string{"segment.bytes": "16384"})
		offsets := produceValues(t, cl, "crash", "c", 200, 1024)
		d, err := cl.DescribeTopic(ctx, "crash")
		if err != nil {
			t.Fatal(err)
		}
		ledgers := d.Partitions[0].Ledgers
		if len(ledgers) < 8 {
			t.Fatalf("%d ledgers, want several closed ones", len(ledgers))
		}
		broker := c.brokers[0]
		broker.Kill()
		broker.Env = []string{failpoint.EnvVar + "=retention.after_cas=kill"}
		broker.Restart(t)
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := broker.WaitReady(wctx); err != nil {
			t.Fatal(err)
		}
		if _, err := cl.AlterTopicConfigs(wctx, "crash", map[string]string{"retention.bytes": "50000"}, nil); err != nil {
			t.Fatal(err)
		}
		testwait.UntilNil(t, 30*time.Second, "the broker to die at the failpoint", func() error {
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
		// The CAS applied: the list no longer names the first ledgers,
		// which the crash left behind; the orphan sweeper deletes them.
		var start int64
		var listed []uint64
		testwait.UntilNil(t, 30*time.Second, "the unlinked ledgers to be swept", func() error {
			start, _, _, listed = partitionLog(t, cl, "crash")
			if start == 0 {
				return errors.New("log start did not move")
			}
			for _, l := range ledgers {
				if l.LastOffset < start && exists(l.LedgerId) {
					return fmt.Errorf("ledger %d (offsets %d-%d) still exists, log start %d", l.LedgerId, l.FirstOffset, l.LastOffset, start)
				}
			}
			return nil
		})
		for _, id := range listed {
			if !exists(id) {
				t.Fatalf("listed ledger %d was deleted", id)
			}
		}
		testwait.UntilNil(t, 30*time.Second, "bookies to hold no copy of a deleted ledger", func() error {
			return bookieCopiesMatch(c, env)
		})
		recs := readFromEarliest(t, cl, "crash")
		if int64(len(recs)) != offsets[len(offsets)-1]+1-start || len(recs) == 0 {
			t.Fatalf("read %d records from %d, last acknowledged %d", len(recs), start, offsets[len(offsets)-1])
		}
		for _, r := range recs {
			if !bytes.HasPrefix(r.Value, []byte("c"+strconv.FormatInt(r.Offset, 10)+":")) {
				t.Fatalf("offset %d holds %.20q", r.Offset, r.Value)
			}
		}
		t.Logf("crashed after the unlinking CAS; log start %d; the unlinked ledgers were swept; %d records kept", start, len(recs))
	})
}

// bookieCopiesMatch checks that the bookies hold no more ledger copies than
// the ledgers metad lists (each has at most 3): a deleted ledger's copies
// are gone.
func bookieCopiesMatch(c *strataCluster, env ledger.Env) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	all, err := ledger.ListAll(ctx, env.Meta)
	if err != nil {
		return err
	}
	copies := 0.0
	for _, b := range c.bookies {
		n, err := metricValue("http://"+b.AdminAddr+"/metrics", "strata_bookie_ledgers")
		if err != nil {
			return err
		}
		copies += n
	}
	if copies > float64(3*len(all)) {
		return fmt.Errorf("bookies hold %v ledger copies, metad lists %d ledgers", copies, len(all))
	}
	return nil
}
