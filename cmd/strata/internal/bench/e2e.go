package bench

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/strata-log/strata/client"
)

// catchUpPoll is how often E2E checks whether its consumer caught up.
const catchUpPoll = 50 * time.Millisecond

// recordKey names a record: partition and offset (one topic).
type recordKey struct {
	p int32
	o int64
}

// ackMatcher pairs each record's acknowledgement with its consumption,
// which race: whichever comes second computes ack->consume (B2).
type ackMatcher struct {
	mu struct {
		sync.Mutex
		acked    map[recordKey]time.Time
		consumed map[recordKey]time.Time
	}
}

func newAckMatcher() *ackMatcher {
	m := &ackMatcher{}
	m.mu.acked, m.mu.consumed = map[recordKey]time.Time{}, map[recordKey]time.Time{}
	return m
}

// acked records k's acknowledgement at at; it returns ack->consume when k
// was consumed already.
func (m *ackMatcher) acked(k recordKey, at time.Time) (time.Duration, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if ct, ok := m.mu.consumed[k]; ok {
		delete(m.mu.consumed, k)
		return max(0, ct.Sub(at)), true
	}
	m.mu.acked[k] = at
	return 0, false
}

// consumed records k's consumption at at; it returns ack->consume when k
// was acknowledged already.
func (m *ackMatcher) consumed(k recordKey, at time.Time) (time.Duration, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if a, ok := m.mu.acked[k]; ok {
		delete(m.mu.acked, k)
		return at.Sub(a), true
	}
	m.mu.consumed[k] = at
	return 0, false
}

// e2eConsumer tails every partition and measures the consuming side.
type e2eConsumer struct {
	cons  *client.Consumer
	run   *Run
	match *ackMatcher
	seen  atomic.Int64
	done  chan struct{}
	err   error // set before done closes
}

// consume polls until ctx ends (B3: done closes when it returns).
func (e *e2eConsumer) consume(ctx context.Context) {
	defer close(e.done)
	for ctx.Err() == nil {
		recs, err := e.cons.Poll(ctx)
		if err != nil {
			if ctx.Err() == nil {
				e.err = err
			}
			return
		}
		now := time.Now()
		for _, r := range recs {
			if sched, ok := ScheduledTime(r.Value); ok {
				e.run.observe(LatPublishConsume, now.Sub(sched))
			}
			if d, ok := e.match.consumed(recordKey{r.Partition, r.Offset}, now); ok {
				e.run.observe(LatAckConsume, d)
			}
		}
		e.seen.Add(int64(len(recs)))
	}
}

// E2E produces at o.Rate while a consumer tails every partition from its
// current end.
func E2E(ctx context.Context, progress io.Writer, c *client.Client, o *Options, pcfg client.ProducerConfig, run *Run) error {
	ends, err := partitionEnds(ctx, c, o.Topic, run.Partitions)
	if err != nil {
		return err
	}
	cons, err := assignAll(ctx, c, ends, client.OffsetAt)
	if err != nil {
		return err
	}
	defer cons.Close()
	e := &e2eConsumer{cons: cons, run: run, match: newAckMatcher(), done: make(chan struct{})}
	var ackCount atomic.Int64
	onAck := func(r *client.Record, at time.Time) {
		ackCount.Add(1)
		if d, ok := e.match.acked(recordKey{r.Partition, r.Offset}, at); ok {
			run.observe(LatAckConsume, d)
		}
	}
	consCtx, stopConsumer := context.WithCancel(ctx)
	defer stopConsumer()
	go e.consume(consCtx)
	run.Start = time.Now()
	defer run.startProgress(consCtx, progress)()
	if err := Produce(ctx, io.Discard, c, o, pcfg, run, onAck); err != nil {
		stopConsumer()
		<-e.done
		return err
	}
	waitCaughtUp(ctx, e, &ackCount)
	stopConsumer()
	<-e.done
	if e.err != nil {
		run.fail(fmt.Errorf("consume: %w", e.err))
	}
	if missing := ackCount.Load() - e.seen.Load(); missing > 0 {
		run.fail(fmt.Errorf("consumer saw %d of %d acknowledged records", e.seen.Load(), ackCount.Load()))
	}
	return nil
}

// waitCaughtUp lets the consumer catch up with every acknowledged record,
// for at most FlushTimeout.
func waitCaughtUp(ctx context.Context, e *e2eConsumer, acked *atomic.Int64) {
	deadline := time.Now().Add(FlushTimeout)
	for e.seen.Load() < acked.Load() && time.Now().Before(deadline) && ctx.Err() == nil {
		select {
		case <-e.done:
			deadline = time.Now()
		case <-time.After(catchUpPoll):
		}
	}
}
