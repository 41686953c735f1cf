package bytebudget

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestBudget(t *testing.T) {
	b := New(10)
	ctx := context.Background()
	if err := b.Acquire(ctx, 6); err != nil {
		t.Fatal(err)
	}
	// 6 + 6 > 10: waits until the first 6 are released.
	got := make(chan error, 1)
	go func() { got <- b.Acquire(ctx, 6) }()
	select {
	case err := <-got:
		t.Fatalf("acquired over the limit: %v", err)
	case <-time.After(20 * time.Millisecond): // it must still be waiting
	}
	b.Release(6)
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	b.Release(6)
	// Larger than the limit: let in when nothing is held.
	if err := b.Acquire(ctx, 100); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := b.Acquire(cctx, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("acquire with a done context while full: %v", err)
	}
	b.Release(100)
}

func TestTryAcquire(t *testing.T) {
	b := New(10)
	if !b.TryAcquire(6) || b.TryAcquire(6) {
		t.Fatal("TryAcquire: 6 must fit, 6 more must not")
	}
	b.Release(6)
	if !b.TryAcquire(100) { // larger than the limit: in when nothing is held
		t.Fatal("TryAcquire of more than the limit with nothing held")
	}
	b.Release(100)
}

// Take counts bytes already held even past the limit; they keep others
// out until released, and Used reports them.
func TestTake(t *testing.T) {
	b := New(10)
	b.Take(8)
	b.Take(8)
	if got, peak := b.Used(), b.Peak(); got != 16 || peak != 16 {
		t.Fatalf("used %d, peak %d after taking 8 twice, want 16 and 16", got, peak)
	}
	if b.TryAcquire(1) {
		t.Fatal("TryAcquire while over the limit")
	}
	b.Release(16)
	if got := b.Used(); got != 0 || !b.TryAcquire(10) || b.Peak() != 16 {
		t.Fatalf("after release: used %d, peak %d, or 10 did not fit", got, b.Peak())
	}
}
