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

// ackFunc sees each acknowledged record of an e2e load: its partition
// and offset, and when its acknowledgement came.
type ackFunc func(partition int32, offset int64, at time.Time)

// e2eConsumer measures the consuming side of an e2e load, whatever
// protocol its poll speaks.
type e2eConsumer struct {
	run   *Run
	match *ackMatcher
	seen  atomic.Int64
	done  chan struct{}
	err   error // set before done closes
}

func newE2EConsumer(run *Run) *e2eConsumer {
	return &e2eConsumer{run: run, match: newAckMatcher(), done: make(chan struct{})}
}

// tail calls poll until ctx ends or poll fails (B3: done closes when it
// returns). poll hands each record it got to e.consumed.
func (e *e2eConsumer) tail(ctx context.Context, poll func(ctx context.Context) error) {
	defer close(e.done)
	for ctx.Err() == nil {
		if err := poll(ctx); err != nil {
			if ctx.Err() == nil {
				e.err = err
			}
			return
		}
	}
}

// consumed counts one record consumed at now (B2).
func (e *e2eConsumer) consumed(partition int32, offset int64, value []byte, now time.Time) {
	if sched, ok := ScheduledTime(value); ok {
		e.run.observe(LatPublishConsume, now.Sub(sched))
	}
	if d, ok := e.match.consumed(recordKey{partition, offset}, now); ok {
		e.run.observe(LatAckConsume, d)
	}
	e.seen.Add(1)
}

// acked is the producers' ackFunc: it pairs each acknowledgement with the
// record's consumption.
func (e *e2eConsumer) acked(acks *atomic.Int64) ackFunc {
	return func(partition int32, offset int64, at time.Time) {
		acks.Add(1)
		if d, ok := e.match.acked(recordKey{partition, offset}, at); ok {
			e.run.observe(LatAckConsume, d)
		}
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
	e := newE2EConsumer(run)
	poll := func(ctx context.Context) error {
		recs, err := cons.Poll(ctx)
		if err != nil {
			return err
		}
		now := time.Now()
		for _, r := range recs {
			e.consumed(r.Partition, r.Offset, r.Value, now)
		}
		return nil
	}
	return runE2E(ctx, progress, run, e, poll, func(onAck ackFunc) error {
		return Produce(ctx, io.Discard, c, o, pcfg, run, onAck)
	})
}

// runE2E runs an e2e load: e tails the topic with poll while produce
// runs with e's ackFunc, then e may catch up with every acknowledged
// record; a record acknowledged and never consumed is the run's error.
func runE2E(ctx context.Context, progress io.Writer, run *Run, e *e2eConsumer, poll func(ctx context.Context) error,
	produce func(onAck ackFunc) error) error {
	var ackCount atomic.Int64
	consCtx, stopConsumer := context.WithCancel(ctx)
	defer stopConsumer()
	go e.tail(consCtx, poll)
	run.Start = time.Now()
	defer run.startProgress(consCtx, progress)()
	if err := produce(e.acked(&ackCount)); err != nil {
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
