// Package bytebudget is a byte semaphore: callers take bytes before work
// that holds them (a queued write, a proposal in flight) and give them back
// after, so the bytes held stay bounded. A request larger than the limit
// is let in when nothing else holds bytes, so it waits but never
// deadlocks. The bookie's add queue and metad's proposals use it.
package bytebudget

import (
	"context"
	"sync"
)

// Budget is a byte semaphore of a fixed limit. Safe for concurrent use.
type Budget struct {
	limit int64

	mu struct {
		sync.Mutex
		used int64
		peak int64 // the most used at once
		// freed is closed on the next Release; nil while no Acquire
		// waits (made on demand: a Release with no waiter allocates
		// nothing).
		freed chan struct{}
	}
}

// New returns a Budget of limit bytes.
func New(limit int64) *Budget {
	return &Budget{limit: limit}
}

// Acquire takes n bytes, waiting until they fit or ctx ends.
func (b *Budget) Acquire(ctx context.Context, n int64) error {
	for {
		b.mu.Lock()
		if b.mu.used == 0 || b.mu.used+n <= b.limit {
			b.addLocked(n)
			b.mu.Unlock()
			return nil
		}
		if b.mu.freed == nil {
			b.mu.freed = make(chan struct{})
		}
		freed := b.mu.freed
		b.mu.Unlock()
		select {
		case <-freed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// TryAcquire takes n bytes if they fit now (as Acquire would let them in)
// and reports whether it did.
func (b *Budget) TryAcquire(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.mu.used == 0 || b.mu.used+n <= b.limit {
		b.addLocked(n)
		return true
	}
	return false
}

// addLocked takes n bytes.
// REQUIRES: b.mu held.
func (b *Budget) addLocked(n int64) {
	b.mu.used += n
	b.mu.peak = max(b.mu.peak, b.mu.used)
}

// Take takes n bytes whether or not they fit: for bytes a caller holds
// already and must account for (a read that returned more than it
// reserved). The bytes held may then exceed the limit until released.
func (b *Budget) Take(n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.addLocked(n)
}

// Used is the bytes held now.
func (b *Budget) Used() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.mu.used
}

// Peak is the most bytes held at once since New.
func (b *Budget) Peak() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.mu.peak
}

// Limit is the budget's limit.
func (b *Budget) Limit() int64 { return b.limit }

// Release gives back n bytes taken by Acquire, TryAcquire or Take.
func (b *Budget) Release(n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.mu.used -= n
	if b.mu.freed != nil {
		close(b.mu.freed)
		b.mu.freed = nil
	}
}
