package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/strata-log/strata/client"
	"github.com/strata-log/strata/cmd/strata/internal/chaos/history"
	"github.com/strata-log/strata/recordbatch"
)

// The workload's topics: keyed records on a plain topic (the most
// writers, two of them over the Kafka protocol), a compacted topic, and a
// topic whose history is read from the object store (local.retention.ms=0:
// segments leave the bookies as soon as they are tiered).
const (
	topicKeyed     = "chaos-keyed"
	topicCompacted = "chaos-compacted"
	topicTiered    = "chaos-tiered"
	group          = "chaos-group"
	kafkaGroup     = "chaos-kafka-group"
)

// topics are created before the workload starts.
var topics = []struct {
	name       string
	partitions int32
	configs    map[string]string
}{
	// Two minutes on the bookies, then from the object store only: a
	// long soak's ledgers do not fill the bookies' disks.
	{topicKeyed, 6, map[string]string{"local.retention.ms": "120000"}},
	{topicCompacted, 2, map[string]string{
		"cleanup.policy": "compact", "segment.ms": "2000",
		"min.cleanable.dirty.ratio": "0.01", "min.compaction.lag.ms": "0",
		"local.retention.ms": "120000",
	}},
	{topicTiered, 3, map[string]string{"local.retention.ms": "0"}},
}

// writer is one producer of the workload: it owns keys no other writer
// uses and numbers each key's records 1, 2, 3, ... so the checker can
// tell order and loss apart.
type writer struct {
	name  string
	topic string
	kafka bool          // over the Kafka protocol (franz-go) instead of the Go client
	keys  int           // distinct keys
	rate  time.Duration // one record per rate
	pad   int           // value bytes after the record's id
}

// writers is the workload's producers, about 500 records/s together:
// little enough to leave the two cores to the cluster and its faults.
var writers = []writer{
	{"grpc-1", topicKeyed, false, 16, 10 * time.Millisecond, 64},
	{"grpc-2", topicKeyed, false, 16, 10 * time.Millisecond, 64},
	{"kafka-1", topicKeyed, true, 16, 10 * time.Millisecond, 64},
	{"kafka-2", topicKeyed, true, 16, 20 * time.Millisecond, 64},
	{"compact", topicCompacted, true, 40, 20 * time.Millisecond, 64},
	{"tiered", topicTiered, false, 16, 10 * time.Millisecond, 1024},
}

// deliveryTimeout bounds each record's wait for an answer: past it the
// outcome is unknown, and the writer goes on with its next records.
const deliveryTimeout = 30 * time.Second

// recordID is what a record's value starts with, and what the history
// keeps of it: writer/key/seq, then '|' and padding.
func recordID(w writer, key string, seq int64) string {
	return w.name + "/" + key + "/" + strconv.FormatInt(seq, 10)
}

// idOf returns a read value's record id.
func idOf(value []byte) []byte {
	if i := bytes.IndexByte(value, '|'); i >= 0 {
		return value[:i]
	}
	return value
}

// keyOf returns writer w's key number i.
func keyOf(w writer, i int) string { return fmt.Sprintf("%s-k%d", w.name, i) }

// produce runs writer w until ctx ends, then waits for every record's
// answer, recording every attempt.
func produce(ctx context.Context, w writer, cl *client.Client, kafkaAddrs []string, dir string, rec *history.Recorder, log io.Writer) error {
	partitions := int32(0)
	for _, t := range topics {
		if t.name == w.topic {
			partitions = t.partitions
		}
	}
	send, flush, err := sender(w, cl, kafkaAddrs, dir)
	if err != nil {
		return err
	}
	pending := &inFlight{attempts: map[string]history.Attempt{}}
	defer func() {
		// Every answer, or after drainTimeout the answers still missing
		// are unknown outcomes: a client that never answers must not
		// hang the run, and its records may be stored.
		done := make(chan struct{})
		go func() { flush(); close(done) }()
		select {
		case <-done:
		case <-time.After(drainTimeout):
		}
		if n := pending.giveUp(rec); n > 0 {
			fmt.Fprintf(log, "%s writer %s: %d records unanswered %s after the faults ended; counted as unknown outcomes\n",
				stamp(), w.name, n, drainTimeout)
		}
	}()
	seqs := make([]int64, w.keys)
	pad := "|" + strings.Repeat("x", w.pad)
	tick := time.NewTicker(w.rate)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		k := i % w.keys
		seqs[k]++
		key := keyOf(w, k)
		id := recordID(w, key, seqs[k])
		p := history.Attempt{
			Topic: w.topic, Partition: recordbatch.PartitionForKey([]byte(key), partitions),
			Key: key, Seq: seqs[k], Value: []byte(id), Start: time.Now(),
		}
		pending.add(id, p)
		// ctx bounds a send that waits for room in the client's buffer;
		// the records it holds are answered after ctx ends.
		send(ctx, p, []byte(id+pad), func(offset int64, err error) {
			p.End = time.Now()
			p.Offset = offset
			p.Outcome = outcomeOf(err)
			if err != nil && p.Outcome == history.Failed {
				fmt.Fprintf(log, "chaos: %s: %s refused: %v\n", w.name, id, err)
			}
			if pending.answer(id) {
				rec.RecordAttempt(p)
			}
		})
	}
}

// drainTimeout bounds the wait for a writer's last answers.
const drainTimeout = 3 * deliveryTimeout

// inFlight are a writer's attempts not answered yet, by record id.
type inFlight struct {
	mu       sync.Mutex
	attempts map[string]history.Attempt
	gaveUp   bool
}

func (f *inFlight) add(id string, a history.Attempt) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.attempts[id] = a
}

// answer removes id, reporting whether its answer is to be recorded (not
// after giveUp recorded it as unknown).
func (f *inFlight) answer(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.attempts[id]
	delete(f.attempts, id)
	return ok && !f.gaveUp
}

// giveUp records every unanswered attempt as an unknown outcome ending now.
func (f *inFlight) giveUp(rec *history.Recorder) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gaveUp = true
	now := time.Now()
	for _, a := range f.attempts {
		a.End, a.Outcome = now, history.Unknown
		rec.RecordAttempt(a)
	}
	return len(f.attempts)
}

// outcomeOf classifies a produce answer: only an error that says the
// record was not stored is a failure; any other error (timeouts, lost
// connections, an unknown outcome) may hide a stored record.
func outcomeOf(err error) history.Outcome {
	switch {
	case err == nil:
		return history.OK
	case errors.Is(err, client.ErrRecordTooLarge), errors.Is(err, client.ErrUnknownTopic),
		errors.Is(err, client.ErrUnknownPartition):
		return history.Failed
	}
	return history.Unknown
}

// sender returns w's way to send one record (answering through done) and
// to wait for every answer. A Kafka writer logs franz-go's view to
// dir/logs/WRITER.log.
func sender(w writer, cl *client.Client, kafkaAddrs []string, dir string) (send func(ctx context.Context, p history.Attempt, value []byte, done func(int64, error)), flush func(), err error) {
	flushCtx := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), 2*deliveryTimeout)
	}
	if !w.kafka {
		prod, err := cl.NewProducer(client.ProducerConfig{Acks: client.AcksQuorum, DeliveryTimeout: deliveryTimeout})
		if err != nil {
			return nil, nil, err
		}
		send = func(ctx context.Context, p history.Attempt, value []byte, done func(int64, error)) {
			r := &client.Record{Topic: p.Topic, Partition: p.Partition, Key: []byte(p.Key), Value: value}
			if err := prod.Produce(ctx, r, func(r *client.Record, err error) { done(r.Offset, err) }); err != nil {
				done(-1, err)
			}
		}
		flush = func() {
			ctx, cancel := flushCtx()
			defer cancel()
			_ = prod.Close(ctx)
		}
		return send, flush, nil
	}
	logf, err := os.OpenFile(filepath.Join(dir, "logs", w.name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, err
	}
	kc, err := kgo.NewClient(kgo.SeedBrokers(kafkaAddrs...), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordDeliveryTimeout(deliveryTimeout), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.WithLogger(kgo.BasicLogger(logf, kgo.LogLevelInfo, nil)))
	if err != nil {
		logf.Close()
		return nil, nil, err
	}
	send = func(ctx context.Context, p history.Attempt, value []byte, done func(int64, error)) {
		r := &kgo.Record{Topic: p.Topic, Partition: p.Partition, Key: []byte(p.Key), Value: value}
		kc.Produce(ctx, r, func(r *kgo.Record, err error) { done(r.Offset, err) })
	}
	flush = func() {
		ctx, cancel := flushCtx()
		defer cancel()
		_ = kc.Flush(ctx)
		kc.Close()
		logf.Close()
	}
	return send, flush, nil
}

// tail reads every partition of topic from the start until ctx ends,
// recording each record read and each poll's success for availability.
func tail(ctx context.Context, cl *client.Client, topic string, partitions int32, rec *history.Recorder, log io.Writer) {
	cons, err := cl.NewConsumer(client.ConsumerConfig{MaxWait: 200 * time.Millisecond})
	if err != nil {
		fmt.Fprintf(log, "chaos: tail %s: %v\n", topic, err)
		return
	}
	defer cons.Close()
	assign := map[client.TopicPartition]client.Offset{}
	for p := int32(0); p < partitions; p++ {
		assign[client.TopicPartition{Topic: topic, Partition: p}] = client.OffsetEarliest()
	}
	for ctx.Err() == nil {
		if err := cons.Assign(ctx, assign); err == nil {
			break
		}
		sleep(ctx, time.Second)
	}
	reader := "tail-" + topic
	progress := newProgress(assign)
	for ctx.Err() == nil {
		start := time.Now()
		recs, err := cons.Poll(ctx)
		progress.record(cons, start, rec)
		if err != nil {
			var oor *client.OffsetOutOfRangeError
			if errors.As(err, &oor) {
				// Records below the log start are gone by retention or
				// compaction, which the final read and the checker judge.
				_ = cons.Seek(ctx, oor.TopicPartition, client.OffsetEarliest())
			}
			continue
		}
		now := time.Now()
		for _, r := range recs {
			rec.RecordRead(history.Read{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset,
				Key: r.Key, Value: idOf(r.Value), Reader: reader, Time: now})
		}
	}
}

// progress turns a tail reader's polls into the checker's read polls, at
// most one per partition every pollEvery: a partition was readable in a
// poll when the reader's position moved, or when it was at the high
// watermark the broker last reported (nothing to read). A reader stuck
// behind the high watermark could not read.
type progress struct {
	last map[client.TopicPartition]int64
	at   time.Time
}

const pollEvery = 100 * time.Millisecond

func newProgress(parts map[client.TopicPartition]client.Offset) *progress {
	p := &progress{last: map[client.TopicPartition]int64{}}
	for tp := range parts {
		p.last[tp] = -1
	}
	return p
}

func (p *progress) record(cons *client.Consumer, start time.Time, rec *history.Recorder) {
	now := time.Now()
	if now.Sub(p.at) < pollEvery {
		return
	}
	p.at = now
	for tp, last := range p.last {
		pos, ok := cons.Position(tp)
		if !ok {
			continue
		}
		hw, known := cons.HighWatermark(tp)
		rec.RecordPoll(history.Poll{Topic: tp.Topic, Partition: tp.Partition, Start: start, End: now,
			OK: pos > last || (known && pos >= hw)})
		p.last[tp] = pos
	}
}

// member is one consumer of the group until ctx ends: it records what it
// is given under its epoch and commits automatically every second.
func member(ctx context.Context, cl *client.Client, name string, rec *history.Recorder, log io.Writer) {
	var g *client.GroupConsumer
	for ctx.Err() == nil {
		var err error
		g, err = cl.NewGroupConsumer(client.GroupConfig{Group: group, Topics: []string{topicKeyed},
			SessionTimeout: 6 * time.Second, AutoCommitInterval: time.Second, ResetOffset: client.OffsetEarliest()})
		if err == nil {
			break
		}
		fmt.Fprintf(log, "chaos: %s: %v\n", name, err)
		sleep(ctx, time.Second)
	}
	if g == nil {
		return
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = g.Close(ctx)
	}()
	for ctx.Err() == nil {
		recs, err := g.Poll(ctx)
		if err != nil {
			continue
		}
		id, epoch := g.MemberID(), int64(g.MemberEpoch())
		for _, r := range recs {
			rec.RecordDelivery(history.Delivery{Group: group, Member: id, Generation: epoch,
				Topic: r.Topic, Partition: r.Partition, Offset: r.Offset})
		}
	}
}

// kafkaTail reads every partition of every topic from the start over the
// Kafka protocol (franz-go) until ctx ends, recording each record read.
func kafkaTail(ctx context.Context, addrs []string, rec *history.Recorder, log io.Writer) {
	parts := map[string]map[int32]kgo.Offset{}
	for _, t := range topics {
		parts[t.name] = map[int32]kgo.Offset{}
		for p := int32(0); p < t.partitions; p++ {
			parts[t.name][p] = kgo.NewOffset().AtStart()
		}
	}
	kc, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumePartitions(parts),
		kgo.FetchMaxWait(200*time.Millisecond), kgo.RequestTimeoutOverhead(5*time.Second))
	if err != nil {
		fmt.Fprintf(log, "chaos: kafka tail: %v\n", err)
		return
	}
	defer kc.Close()
	for ctx.Err() == nil {
		fetches := kc.PollFetches(ctx)
		now := time.Now()
		fetches.EachRecord(func(r *kgo.Record) {
			rec.RecordRead(history.Read{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset,
				Key: r.Key, Value: idOf(r.Value), Reader: "kafka-tail", Time: now})
		})
	}
}

// kafkaMember is one member of a classic Kafka group (JoinGroup and
// SyncGroup, cooperative-sticky) until ctx ends, recording what it is given
// under its generation; franz-go commits what it polled every second. It
// logs franz-go's view (joins, generations, assignments, revocations,
// commits) to logFile.
func kafkaMember(ctx context.Context, addrs []string, logFile string, rec *history.Recorder, log io.Writer) {
	logf, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintf(log, "chaos: kafka member: %v\n", err)
		return
	}
	defer logf.Close()
	kc, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumerGroup(kafkaGroup), kgo.ConsumeTopics(topicKeyed),
		kgo.Balancers(kgo.CooperativeStickyBalancer()), kgo.SessionTimeout(6*time.Second),
		kgo.AutoCommitInterval(time.Second), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(200*time.Millisecond), kgo.RequestTimeoutOverhead(5*time.Second),
		kgo.WithLogger(kgo.BasicLogger(logf, kgo.LogLevelInfo, func() string { return time.Now().Format("15:04:05.000 ") })))
	if err != nil {
		fmt.Fprintf(log, "chaos: kafka member: %v\n", err)
		return
	}
	defer kc.Close()
	for ctx.Err() == nil {
		fetches := kc.PollFetches(ctx)
		id, generation := kc.GroupMetadata()
		fetches.EachRecord(func(r *kgo.Record) {
			rec.RecordDelivery(history.Delivery{Group: kafkaGroup, Member: id, Generation: int64(generation),
				Topic: r.Topic, Partition: r.Partition, Offset: r.Offset})
		})
	}
}

// watchCommits polls the groups' committed offsets every second and
// records them, so the checker sees whether one ever moved back.
func watchCommits(ctx context.Context, cl *client.Client, rec *history.Recorder) {
	var tps []client.TopicPartition
	for p := int32(0); p < 6; p++ {
		tps = append(tps, client.TopicPartition{Topic: topicKeyed, Partition: p})
	}
	for ctx.Err() == nil {
		for _, g := range []string{group, kafkaGroup} {
			start := time.Now()
			offs, err := cl.FetchOffsets(ctx, g, tps...)
			if err != nil {
				continue
			}
			end := time.Now()
			for _, o := range offs {
				rec.RecordCommit(history.Commit{Group: g, Topic: o.Topic, Partition: o.Partition, Offset: o.Offset, Start: start, End: end})
			}
		}
		sleep(ctx, time.Second)
	}
}

// finalRead reads every partition of every topic from its start to its
// end, recording each record as final. It retries until ctx ends.
func finalRead(ctx context.Context, cl *client.Client, rec *history.Recorder) error {
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for _, t := range topics {
		for p := int32(0); p < t.partitions; p++ {
			wg.Add(1)
			go func(tp client.TopicPartition) {
				defer wg.Done()
				if err := readAll(ctx, cl, tp, rec); err != nil {
					errs <- fmt.Errorf("%s/%d: %w", tp.Topic, tp.Partition, err)
				}
			}(client.TopicPartition{Topic: t.name, Partition: p})
		}
	}
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	return errors.Join(all...)
}

// readAll reads tp from its log start to the high watermark it has now.
func readAll(ctx context.Context, cl *client.Client, tp client.TopicPartition, rec *history.Recorder) error {
	var end int64
	for {
		resp, err := cl.ListOffsets(ctx, tp, -1)
		if err == nil {
			end = resp.Offset
			break
		}
		if !sleep(ctx, 500*time.Millisecond) {
			return fmt.Errorf("end offset: %w", err)
		}
	}
	cons, err := cl.NewConsumer(client.ConsumerConfig{MaxWait: 100 * time.Millisecond})
	if err != nil {
		return err
	}
	defer cons.Close()
	if err := cons.Assign(ctx, map[client.TopicPartition]client.Offset{tp: client.OffsetEarliest()}); err != nil {
		return err
	}
	for {
		if pos, ok := cons.Position(tp); ok && pos >= end {
			return nil
		}
		recs, err := cons.Poll(ctx)
		if err != nil {
			if ctx.Err() != nil {
				pos, _ := cons.Position(tp)
				return fmt.Errorf("read to %d of %d: %w", pos, end, ctx.Err())
			}
			continue
		}
		for _, r := range recs {
			if r.Offset >= end {
				continue
			}
			rec.RecordRead(history.Read{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset,
				Key: r.Key, Value: idOf(r.Value), Reader: "final", Time: time.Now(), Final: true})
		}
	}
}

// sleep waits d or until ctx ends, reporting whether ctx is still live.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
