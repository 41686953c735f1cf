package ctxtime

import (
	"context"
	"time"
)

// PacerMinSleep is the least a pacer waits: one ahead of its rate by
// less than this goes on (a few long sleeps, not one per item).
const PacerMinSleep = 10 * time.Millisecond

// Pacer holds a background job's work to at most Rate bytes per second
// on average since it began (the broker's compaction passes, the
// bookie's journal compaction), so that it takes a bounded share of the
// CPU and disk that foreground requests need. Not safe for concurrent
// use.
type Pacer struct {
	rate  float64 // bytes per second; <= 0: unbounded
	start time.Time
	bytes int64
	now   func() time.Time
	sleep func(context.Context, time.Duration) error
}

// NewPacer returns a pacer starting now; rate <= 0 never waits; now nil
// is time.Now.
func NewPacer(rate float64, now func() time.Time) *Pacer {
	if now == nil {
		now = time.Now
	}
	return &Pacer{rate: rate, start: now(), now: now, sleep: Sleep}
}

// Wait counts n bytes of work and, when the job is ahead of its rate by
// at least PacerMinSleep, waits until it is not or ctx ends. A nil
// Pacer never waits.
func (p *Pacer) Wait(ctx context.Context, n int) error {
	if p == nil || p.rate <= 0 {
		return nil
	}
	p.bytes += int64(n)
	due := p.start.Add(time.Duration(float64(p.bytes) / p.rate * float64(time.Second)).Round(time.Microsecond))
	if ahead := due.Sub(p.now()); ahead >= PacerMinSleep {
		return p.sleep(ctx, ahead)
	}
	return nil
}
