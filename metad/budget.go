package metad

import (
	"context"
	"sync"
)

// byteBudget is a byte semaphore. A request larger than the limit is let
// in when nothing else holds bytes, so it waits but never deadlocks.
type byteBudget struct {
	mu    sync.Mutex
	limit int64
	used  int64         // guarded by mu
	freed chan struct{} // guarded by mu; closed and replaced on release
}

func newByteBudget(limit int64) *byteBudget {
	return &byteBudget{limit: limit, freed: make(chan struct{})}
}

// acquire takes n bytes, waiting until they fit or ctx ends.
func (b *byteBudget) acquire(ctx context.Context, n int64) error {
	for {
		b.mu.Lock()
		if b.used == 0 || b.used+n <= b.limit {
			b.used += n
			b.mu.Unlock()
			return nil
		}
		freed := b.freed
		b.mu.Unlock()
		select {
		case <-freed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// release returns n bytes taken by acquire.
func (b *byteBudget) release(n int64) {
	b.mu.Lock()
	b.used -= n
	close(b.freed)
	b.freed = make(chan struct{})
	b.mu.Unlock()
}
