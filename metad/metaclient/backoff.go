package metaclient

import (
	"math/rand/v2"
	"time"
)

// Retry backoff bounds: the first retry waits about minBackoff, each further
// one twice as long, up to maxBackoff.
const (
	minBackoff = 50 * time.Millisecond
	maxBackoff = time.Second
)

// backoffState yields exponentially growing waits with jitter, so clients
// that lost the same leader do not retry in lock step.
type backoffState struct {
	cur time.Duration
}

func newBackoff() *backoffState { return &backoffState{cur: minBackoff} }

// next returns the wait before the next retry: uniformly random in
// [cur/2, cur], then doubles cur up to maxBackoff.
func (b *backoffState) next() time.Duration {
	d := b.cur
	b.cur = min(2*b.cur, maxBackoff)
	return d/2 + rand.N(d/2+1)
}

// reset starts over from minBackoff, after progress.
func (b *backoffState) reset() { b.cur = minBackoff }
