package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/strata-log/strata/client"
)

// Waits of a benchmark's producers.
const (
	// scheduleSlack: a producer sends without waiting when its next
	// scheduled time is at most this far away.
	scheduleSlack = 50 * time.Microsecond
	// interruptedFlush bounds the flush after Ctrl-C.
	interruptedFlush = 3 * time.Second
)

// Value returns a value for one record: payload's bytes, with the
// scheduled send time in the first 8 bytes when stamp (B2). It is a copy
// even unstamped, as an application's records each have their own value:
// the suite's client memory target (peak RSS against MaxBufferedBytes)
// would read low if every record shared one payload. The copies cost the
// load generator garbage collection: sharing cut its CPU per GB by about
// a fifth (docs/compaction.md).
func Value(payload []byte, sched time.Time, stamp bool) []byte {
	v := make([]byte, len(payload))
	copy(v, payload)
	if stamp {
		binary.BigEndian.PutUint64(v, uint64(sched.UnixNano()))
	}
	return v
}

// ScheduledTime reads the scheduled send time Value stamped in v, if v
// holds one.
func ScheduledTime(v []byte) (time.Time, bool) {
	if len(v) < 8 {
		return time.Time{}, false
	}
	return time.Unix(0, int64(binary.BigEndian.Uint64(v))), true
}

// randomPayload is size incompressible bytes, like most real payloads
// once encoded.
func randomPayload(size int) []byte {
	payload := make([]byte, size)
	rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	for i := range payload {
		payload[i] = byte(rng.Uint32())
	}
	return payload
}

// schedule is one producer's open-loop send times (B1): with a rate,
// producer i of n sends at start + i/rate, then every n/rate.
type schedule struct {
	rate     float64 // 0: as fast as possible
	next     time.Time
	interval time.Duration
	end      time.Time
}

func newSchedule(start, end time.Time, rate float64, i, n int) schedule {
	s := schedule{rate: rate, next: start, end: end}
	if rate > 0 {
		s.interval = time.Duration(float64(n) / rate * float64(time.Second))
		s.next = start.Add(time.Duration(float64(i) / rate * float64(time.Second)))
	}
	return s
}

// wait returns the next record's scheduled time once it comes, false at
// the end or when ctx ends.
func (s *schedule) wait(ctx context.Context) (time.Time, bool) {
	if s.rate <= 0 {
		now := time.Now()
		return now, now.Before(s.end)
	}
	if !s.next.Before(s.end) {
		return time.Time{}, false
	}
	if wait := time.Until(s.next); wait > scheduleSlack {
		select {
		case <-ctx.Done():
			return time.Time{}, false
		case <-time.After(wait):
		}
	}
	sched := s.next
	s.next = s.next.Add(s.interval)
	return sched, true
}

// Produce runs o.Producers producers for o.Duration. With o.Rate each
// producer sends at fixed scheduled times (B1); latency counts from the
// scheduled time. onAck, when set, sees each acknowledged record (e2e:
// then values are stamped, B2, and progress is the consumer side's).
func Produce(ctx context.Context, progress io.Writer, c *client.Client, o *Options, pcfg client.ProducerConfig,
	run *Run, onAck ackFunc) error {
	payload := randomPayload(o.RecordSize)
	prods, err := openProducers(c, pcfg, o.Producers)
	if err != nil {
		return err
	}
	runLoad(ctx, progress, o, run, onAck, func(i int, s *schedule) {
		produceScheduled(ctx, prods[i], s, o.Topic, payload, run, onAck)
	}, func() { closeProducers(ctx, prods, run) })
	return nil
}

// runLoad runs o.Producers producers, producer i sending on its own
// schedule (B1) with send, from run.Start (now, unless e2e started the
// clock and its progress itself) for o.Duration; then finish flushes
// them, with the progress line still running.
func runLoad(ctx context.Context, progress io.Writer, o *Options, run *Run, onAck ackFunc, send func(i int, s *schedule), finish func()) {
	if run.Start.IsZero() {
		run.Start = time.Now()
	}
	end := run.Start.Add(o.Duration)
	if onAck == nil {
		defer run.startProgress(ctx, progress)()
	}
	var wg sync.WaitGroup
	for i := range o.Producers {
		wg.Go(func() {
			s := newSchedule(run.Start, end, o.Rate, i, o.Producers)
			send(i, &s)
		})
	}
	wg.Wait()
	finish()
}

func openProducers(c *client.Client, pcfg client.ProducerConfig, n int) ([]*client.Producer, error) {
	prods := make([]*client.Producer, n)
	for i := range prods {
		p, err := c.NewProducer(pcfg)
		if err != nil {
			for _, q := range prods[:i] {
				_ = q.Close(context.Background())
			}
			return nil, err
		}
		prods[i] = p
	}
	return prods, nil
}

// produceScheduled sends a record at each of s's times until its end or
// ctx's.
func produceScheduled(ctx context.Context, prod *client.Producer, s *schedule, topic string, payload []byte,
	run *Run, onAck ackFunc) {
	for ctx.Err() == nil {
		sched, ok := s.wait(ctx)
		if !ok {
			return
		}
		rec := &client.Record{Topic: topic, Partition: -1, Value: Value(payload, sched, onAck != nil), Offset: -1}
		err := prod.Produce(ctx, rec, func(r *client.Record, err error) {
			now := time.Now()
			if err != nil {
				run.fail(err)
				return
			}
			run.acknowledged(sched, now, len(r.Value), r.Partition, r.Offset, onAck)
		})
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			run.fail(err)
		}
	}
}

// closeProducers flushes and closes prods (flushAll).
func closeProducers(ctx context.Context, prods []*client.Producer, run *Run) {
	flushAll(ctx, run, len(prods), func(ctx context.Context, i int) error { return prods[i].Close(ctx) })
}

// flushAll flushes a load's n producers, producer i with flush, within
// FlushTimeout, or a few seconds once ctx ended (Ctrl-C: do not wait
// long); a flush failure counts as the run's error when nothing else
// failed.
func flushAll(ctx context.Context, run *Run, n int, flush func(ctx context.Context, i int) error) {
	limit := FlushTimeout
	if ctx.Err() != nil {
		limit = interruptedFlush
	}
	flushCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), limit)
	defer cancel()
	var errs []error
	for i := range n {
		if err := flush(flushCtx, i); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 && run.errs.Load() == 0 {
		run.fail(fmt.Errorf("flush: %w", errors.Join(errs...)))
	}
}

// acknowledged counts one record of valueBytes scheduled at sched and
// acknowledged at now, and hands it to onAck (when set).
func (r *Run) acknowledged(sched, now time.Time, valueBytes int, partition int32, offset int64, onAck ackFunc) {
	r.count(1, int64(valueBytes))
	r.observe(LatPublishAck, now.Sub(sched))
	if onAck != nil {
		onAck(partition, offset, now)
	}
}
