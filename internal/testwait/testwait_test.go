package testwait

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestPollReturnsOnceTheConditionHolds(t *testing.T) {
	var calls atomic.Int32
	err := Poll(10*time.Second, "the third call", func() error {
		if calls.Add(1) < 3 {
			return errors.New("early")
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Poll = %v, want nil", err)
	}
	if got := calls.Load(); got != 3 {
		t.Fatalf("cond called %d times, want 3", got)
	}
}

func TestPollTimeoutNamesWhatAndWrapsTheLastError(t *testing.T) {
	last := errors.New("replica 2 at offset 7")
	start := time.Now()
	err := Poll(20*time.Millisecond, "every replica at offset 9", func() error { return last })
	if elapsed := time.Since(start); elapsed < 20*time.Millisecond {
		t.Fatalf("Poll gave up after %s, before its 20ms timeout", elapsed)
	}
	if !errors.Is(err, ErrTimeout) || !errors.Is(err, last) {
		t.Fatalf("Poll = %v, want it to wrap ErrTimeout and the last error", err)
	}
	for _, part := range []string{"every replica at offset 9", "replica 2 at offset 7", "timed out after"} {
		if !strings.Contains(err.Error(), part) {
			t.Errorf("message %q lacks %q", err, part)
		}
	}
}

func TestPollChecksOnceMoreAtTheDeadline(t *testing.T) {
	// The condition turns true while the poller sleeps past the deadline's
	// last interval: the final check must see it.
	deadline := time.Now().Add(30 * time.Millisecond)
	err := Poll(30*time.Millisecond, "the deadline", func() error {
		if time.Now().Before(deadline) {
			return errors.New("before")
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Poll = %v, want the check at the deadline to pass", err)
	}
}

func TestBooleanTimeoutLeavesOutNotYet(t *testing.T) {
	err := Poll(time.Millisecond, "nothing", func() error { return errNotYet })
	if err == nil || strings.Contains(err.Error(), "last:") {
		t.Fatalf("Poll = %v, want a timeout without a last error", err)
	}
}

// fakeTB records Fatal instead of stopping the goroutine's test.
type fakeTB struct {
	testing.TB
	failed string
}

func (f *fakeTB) Helper()           {}
func (f *fakeTB) Fatal(args ...any) { f.failed = args[0].(error).Error() }
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed = fmt.Sprintf(format, args...)
}

func TestUntilFailsTheTestWithTheMessage(t *testing.T) {
	f := &fakeTB{}
	Until(f, time.Millisecond, "a leader", func() bool { return false })
	if !strings.Contains(f.failed, "waiting for a leader") {
		t.Fatalf("Until failed with %q", f.failed)
	}
	f = &fakeTB{}
	Until(f, time.Second, "true", func() bool { return true })
	UntilNil(f, time.Second, "nil", func() error { return nil })
	if f.failed != "" {
		t.Fatalf("Until on a true condition failed with %q", f.failed)
	}
}

func TestRecv(t *testing.T) {
	ch := make(chan int, 1)
	ch <- 7
	if got := Recv(t, time.Second, "a value", ch); got != 7 {
		t.Fatalf("Recv = %d, want 7", got)
	}
	closed := make(chan struct{})
	close(closed)
	Recv(t, time.Second, "a closed channel", closed)
}

func TestRecvTimesOut(t *testing.T) {
	f := &fakeTB{}
	Recv(f, time.Millisecond, "an answer", make(chan int))
	if !strings.Contains(f.failed, "waiting for an answer") {
		t.Fatalf("Recv failed with %q", f.failed)
	}
}
