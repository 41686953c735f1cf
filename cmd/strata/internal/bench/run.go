package bench

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/strata-log/strata/cmd/strata/internal/cli"
)

// progressInterval is how often the progress line is printed.
const progressInterval = time.Second

// Run holds a benchmark's counters, shared by producers, consumer and
// the progress reporter.
type Run struct {
	Mode, Topic string
	Partitions  int32
	// Start is when the measured part began (set by Produce, Consume or
	// E2E); End, when set, is when it ended (a group read: when the last
	// partition reached its end, before the members left).
	Start, End time.Time

	records, bytes, errs atomic.Int64
	errMu                sync.Mutex
	firstErr             error // REQUIRES: errMu held

	kinds []string // latency kinds reported, in order
	mu    sync.Mutex
	lat   map[string]*cli.Histogram // REQUIRES: mu held
	// phase and phases split the latencies in time as well (SetPhase):
	// phases[i] holds what was observed while phase i was set; nil
	// until SetPhase is first called.
	phase  int                         // REQUIRES: mu held
	phases []map[string]*cli.Histogram // REQUIRES: mu held
	// timeline: nil until EnableTimeline (timeline.go).
	timeline map[int64]*timelineBin // REQUIRES: mu held
}

// NewRun returns a Run of mode with the latency kinds mode measures.
func NewRun(mode, topic string, partitions int32) *Run {
	switch mode {
	case ModeProduce:
		return newRun(mode, topic, partitions, LatPublishAck)
	case ModeConsume:
		return newRun(mode, topic, partitions)
	}
	return newRun(mode, topic, partitions, LatPublishAck, LatAckConsume, LatPublishConsume)
}

func newRun(mode, topic string, partitions int32, kinds ...string) *Run {
	r := &Run{Mode: mode, Topic: topic, Partitions: partitions, kinds: kinds, lat: map[string]*cli.Histogram{}}
	for _, k := range kinds {
		r.lat[k] = &cli.Histogram{}
	}
	return r
}

// Elapsed is the measured part's length: to End when set, else until
// now.
func (r *Run) Elapsed() time.Duration {
	if !r.End.IsZero() {
		return r.End.Sub(r.Start)
	}
	return time.Since(r.Start)
}

// Kinds are the latency kinds the run reports, in order.
func (r *Run) Kinds() []string { return r.kinds }

func (r *Run) fail(err error) {
	r.errs.Add(1)
	r.errMu.Lock()
	if r.firstErr == nil {
		r.firstErr = err
	}
	r.errMu.Unlock()
}

func (r *Run) firstError() error {
	r.errMu.Lock()
	defer r.errMu.Unlock()
	return r.firstErr
}

// Err is nil when nothing failed, else the count and the first error.
func (r *Run) Err() error {
	if n := r.errs.Load(); n > 0 {
		return fmt.Errorf("%d errors; first: %w", n, r.firstError())
	}
	return nil
}

// count adds n records of b bytes.
func (r *Run) count(n, b int64) {
	r.records.Add(n)
	r.bytes.Add(b)
}

func (r *Run) observe(kind string, d time.Duration) {
	r.mu.Lock()
	r.lat[kind].RecordDuration(d)
	if r.phases != nil {
		r.phases[r.phase][kind].RecordDuration(d)
	}
	if r.timeline != nil && kind == LatPublishAck {
		r.addTimelineLocked(time.Now(), d)
	}
	r.mu.Unlock()
}

// SetPhase makes every latency observed from now on count in phase p
// (0, 1, ...) as well as in the run's totals: the compaction workload
// compares the latency of the same load before and during a pass.
func (r *Run) SetPhase(p int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for len(r.phases) <= p {
		h := map[string]*cli.Histogram{}
		for _, k := range r.kinds {
			h[k] = &cli.Histogram{}
		}
		r.phases = append(r.phases, h)
	}
	r.phase = p
}

// Phase is the phase set last (0 before SetPhase).
func (r *Run) Phase() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.phase
}

func (r *Run) quantile(kind string, q float64) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return time.Duration(r.lat[kind].Quantile(q))
}

// startProgress prints progress lines to w until the returned stop is
// called; stop waits for the last line (B3).
func (r *Run) startProgress(ctx context.Context, w io.Writer) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.progress(ctx, w)
	}()
	return func() {
		cancel()
		<-done
	}
}

// progress prints a line to w every second until ctx ends.
func (r *Run) progress(ctx context.Context, w io.Writer) {
	t := time.NewTicker(progressInterval)
	defer t.Stop()
	var lastRecords, lastBytes int64
	last := r.Start
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			rec, b := r.records.Load(), r.bytes.Load()
			fmt.Fprintln(w, r.progressLine(now, now.Sub(last), rec-lastRecords, b-lastBytes))
			lastRecords, lastBytes, last = rec, b, now
		}
	}
}

// progressLine is the line at now for records and bytes over the last
// interval.
func (r *Run) progressLine(now time.Time, interval time.Duration, records, bytes int64) string {
	secs := interval.Seconds()
	line := fmt.Sprintf("%6s  %9.0f records/s  %8.2f MB/s", now.Sub(r.Start).Round(time.Second),
		float64(records)/secs, float64(bytes)/secs/1e6)
	if len(r.kinds) > 0 {
		k := r.kinds[len(r.kinds)-1]
		line += fmt.Sprintf("  p99 %s %s", k, FormatLatency(r.quantile(k, 0.99)))
	}
	if e := r.errs.Load(); e > 0 {
		line += fmt.Sprintf("  errors %d", e)
	}
	return line
}

// FormatLatency prints d in s, ms or µs, two decimals (none for µs).
func FormatLatency(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.2fs", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.2fms", float64(d)/1e6)
	}
	return fmt.Sprintf("%.0fµs", float64(d)/1e3)
}
