package testwait

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// Polling intervals: the first wait after a failed check, and the cap the
// doubling stops at.
const (
	FirstInterval = time.Millisecond
	MaxInterval   = 50 * time.Millisecond
)

// ErrTimeout is wrapped by the error Poll returns when the deadline passes.
var ErrTimeout = errors.New("testwait: timed out")

// Until polls cond until it returns true, failing t after timeout with a
// message naming what was awaited.
func Until(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if err := Poll(timeout, what, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	}); err != nil {
		t.Fatal(err)
	}
}

// UntilNil polls cond until it returns nil, failing t after timeout with a
// message naming what was awaited and cond's last error.
func UntilNil(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	if err := Poll(timeout, what, cond); err != nil {
		t.Fatal(err)
	}
}

// Recv receives one value from ch, failing t if none arrives within
// timeout; a closed channel yields its zero value, as a bare receive does.
// It bounds the bare `<-done` that would otherwise hang a test until go
// test's global timeout.
func Recv[T any](t testing.TB, timeout time.Duration, what string, ch <-chan T) T {
	t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("%v after %s waiting for %s", ErrTimeout, timeout, what)
		var zero T
		return zero
	}
}

// Poll polls cond until it returns nil and returns nil, or returns an error
// wrapping ErrTimeout and cond's last error once timeout has passed. It
// never calls into testing, so it may run on any goroutine.
func Poll(timeout time.Duration, what string, cond func() error) error {
	start := time.Now()
	deadline := start.Add(timeout)
	interval := FirstInterval
	polls := 0
	for {
		polls++
		err := cond()
		if err == nil {
			return nil
		}
		now := time.Now()
		if !now.Before(deadline) {
			if errors.Is(err, errNotYet) {
				return fmt.Errorf("%w after %s waiting for %s (%d polls)",
					ErrTimeout, now.Sub(start).Round(time.Millisecond), what, polls)
			}
			return fmt.Errorf("%w after %s waiting for %s (%d polls); last: %w",
				ErrTimeout, now.Sub(start).Round(time.Millisecond), what, polls, err)
		}
		// Never sleep past the deadline by more than needed for one last
		// check at it.
		time.Sleep(min(interval, deadline.Sub(now)))
		interval = min(2*interval, MaxInterval)
	}
}

// errNotYet is what a boolean condition reports while it is false; it is
// left out of timeout messages, which would only repeat "not yet".
var errNotYet = errors.New("condition not yet true")
