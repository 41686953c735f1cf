package broker

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/strata-log/strata/internal/testwait"
)

// fakeFailing is a log's AfterFail: hooks run on goroutines of their own
// when fail is called, or at once when it was.
type fakeFailing struct {
	mu     sync.Mutex
	failed bool
	hooks  []func()
}

func (l *fakeFailing) AfterFail(f func()) func() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failed {
		go f()
		return func() bool { return false }
	}
	l.hooks = append(l.hooks, f)
	return func() bool { return false } // afterEither does not stop it
}

func (l *fakeFailing) fail() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.failed = true
	for _, f := range l.hooks {
		go f()
	}
	l.hooks = nil
}

// afterEither runs its function once, whichever of the context's end and
// the log's failure comes first, either of them before it was called (its
// goroutine then starts while afterEither still registers: it crashed on
// a nil stop function before they were registered under one lock), or
// both at once.
func TestAfterEither(t *testing.T) {
	for _, tc := range []struct {
		name                      string
		failedBefore, endedBefore bool
		failAfter, endAfter       bool
	}{
		{name: "log failed before", failedBefore: true, endAfter: true},
		{name: "context ended before", endedBefore: true, failAfter: true},
		{name: "both before", failedBefore: true, endedBefore: true},
		{name: "log fails", failAfter: true},
		{name: "context ends", endAfter: true},
		{name: "both at once", failAfter: true, endAfter: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for range 200 {
				ctx, cancel := context.WithCancel(context.Background())
				l := &fakeFailing{}
				if tc.failedBefore {
					l.fail()
				}
				if tc.endedBefore {
					cancel()
				}
				var runs atomic.Int32
				ran := make(chan struct{}, 2)
				afterEither(ctx, l, func() { runs.Add(1); ran <- struct{}{} })
				var wg sync.WaitGroup
				if tc.failAfter {
					wg.Go(l.fail)
				}
				if tc.endAfter {
					wg.Go(cancel)
				}
				wg.Wait()
				testwait.Recv(t, 10*time.Second, "the function to run", ran)
				if n := runs.Load(); n != 1 { // sync.Once makes a second run impossible
					t.Fatalf("ran %d times", n)
				}
				cancel()
			}
		})
	}
}
