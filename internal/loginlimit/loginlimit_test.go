package loginlimit

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/strata-log/strata/internal/testwait"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeClock is a Clock moved by Advance; After's channels fire when the
// time passes their deadline.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []fakeWaiter
}

type fakeWaiter struct {
	at time.Time
	ch chan time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Unix(1_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.waiters = append(c.waiters, fakeWaiter{at: c.now.Add(d), ch: ch})
	return ch
}

// waiting is the number of After channels not fired yet.
func (c *fakeClock) waiting() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiters)
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if w.at.After(c.now) {
			kept = append(kept, w)
			continue
		}
		w.ch <- c.now
	}
	c.waiters = kept
}

var (
	srcA = netip.MustParseAddr("192.0.2.1")
	srcB = netip.MustParseAddr("192.0.2.2")
	srcC = netip.MustParseAddr("192.0.2.3")
)

func newLimiter(t *testing.T, cfg Config) (*Limiter, *fakeClock) {
	t.Helper()
	clock := newFakeClock()
	l, err := New(cfg, clock)
	if err != nil {
		t.Fatal(err)
	}
	return l, clock
}

// fail runs one failed login of src through Begin.
func fail(t *testing.T, l *Limiter, src netip.Addr) Report {
	t.Helper()
	a, err := l.Begin(context.Background(), src)
	if err != nil {
		t.Fatalf("begin %v: %v", src, err)
	}
	return a.Failed()
}

func wantThrottled(t *testing.T, err error, retryAfter time.Duration) {
	t.Helper()
	var te *ThrottledError
	if !errors.As(err, &te) || !errors.Is(err, ErrThrottled) {
		t.Fatalf("%v, want a ThrottledError", err)
	}
	if te.RetryAfter != retryAfter {
		t.Fatalf("retry after %v, want %v", te.RetryAfter, retryAfter)
	}
}

// result runs fn in a goroutine; its channel yields fn's error.
func result(fn func() error) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- fn() }()
	return ch
}

func TestBudgetBurstThenOnePerInterval(t *testing.T) {
	l, clock := newLimiter(t, Config{Burst: 3, Interval: time.Second, MaxDelay: 500 * time.Millisecond})
	for range 3 {
		fail(t, l, srcA)
	}
	// L2: one failure of budget is a second away, past MaxDelay: refused
	// at once, for free.
	_, err := l.Begin(context.Background(), srcA)
	wantThrottled(t, err, time.Second)
	if err := l.Admit(context.Background(), srcA); !errors.Is(err, ErrThrottled) {
		t.Fatalf("admit: %v", err)
	}
	// Another source has its own budget.
	if err := l.Admit(context.Background(), srcB); err != nil {
		t.Fatalf("another source: %v", err)
	}
	// 600 ms on, the next failure is 400 ms away, within MaxDelay: the
	// attempt waits for it.
	clock.Advance(600 * time.Millisecond)
	done := result(func() error { return l.Admit(context.Background(), srcA) })
	testwait.Until(t, 5*time.Second, "the admission waits on the clock", func() bool { return clock.waiting() == 1 })
	select {
	case err := <-done:
		t.Fatalf("admitted before the budget came back: %v", err)
	default:
	}
	clock.Advance(400 * time.Millisecond)
	if err := <-done; err != nil {
		t.Fatalf("admit after the wait: %v", err)
	}
}

// TestChecksPerWindowBounded is L3: a source with many attempts at once
// gets at most Burst + W/Interval checks over a window W.
func TestChecksPerWindowBounded(t *testing.T) {
	const burst, window = 5, 20 * time.Second
	// MaxDelay 1ns: an attempt without budget is refused, never held
	// (this loop is the only thing moving the clock).
	l, clock := newLimiter(t, Config{Burst: burst, Interval: time.Second, MaxDelay: time.Nanosecond})
	checks := 0
	for step := time.Duration(0); step <= window; step += 100 * time.Millisecond {
		for range 8 { // 8 attempts every 100 ms
			a, err := l.Begin(context.Background(), srcA)
			if err != nil {
				if !errors.Is(err, ErrThrottled) {
					t.Fatal(err)
				}
				l.Refused(srcA)
				continue
			}
			checks++
			a.Failed()
		}
		clock.Advance(100 * time.Millisecond)
	}
	if max := burst + int(window/time.Second); checks > max || checks < max-1 {
		t.Fatalf("%d checks in %v, want about %d (burst %d + one a second)", checks, window, max, burst)
	}
}

func TestSuccessSpendsNothing(t *testing.T) {
	l, _ := newLimiter(t, Config{Burst: 2, MaxDelay: time.Millisecond})
	for i := range 100 {
		a, err := l.Begin(context.Background(), srcA)
		if err != nil {
			t.Fatalf("login %d: %v", i, err)
		}
		a.Release()
		a.Release() // idempotent
	}
	fail(t, l, srcA)
	fail(t, l, srcA)
	_, err := l.Begin(context.Background(), srcA)
	wantThrottled(t, err, time.Second)
}

func TestDebtIsCapped(t *testing.T) {
	l, clock := newLimiter(t, Config{Burst: 1, Interval: time.Second, MaxDelay: time.Millisecond})
	for range 10_000 {
		l.Failed(srcA)
	}
	_, err := l.Begin(context.Background(), srcA)
	wantThrottled(t, err, (maxDebt+1)*time.Second)
	clock.Advance((maxDebt + 1) * time.Second)
	if err := l.Admit(context.Background(), srcA); err != nil {
		t.Fatalf("after the capped debt is repaid: %v", err)
	}
}

// TestOneCheckPerSource is L3 and L4: a source's second attempt waits for
// its first; another source takes a free slot meanwhile, and a source
// waiting for a slot gets it before the first source's next attempt.
func TestOneCheckPerSource(t *testing.T) {
	l, _ := newLimiter(t, Config{Slots: 1, SlotWait: time.Hour, MaxDelay: time.Hour})
	ctx := context.Background()
	a1, err := l.Begin(ctx, srcA)
	if err != nil {
		t.Fatal(err)
	}
	var a2, b *Attempt
	a2Done := result(func() (err error) { a2, err = l.Begin(ctx, srcA); return err })
	bDone := result(func() (err error) { b, err = l.Begin(ctx, srcB); return err })
	testwait.Until(t, 5*time.Second, "both attempts wait", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.mu.sources[srcA].pending == 2 && l.mu.sources[srcB] != nil && l.mu.sources[srcB].pending == 1
	})
	a1.Failed()
	if err := <-bDone; err != nil {
		t.Fatalf("source B: %v", err)
	}
	select {
	case err := <-a2Done:
		t.Fatalf("A's second attempt ran beside B's: %v", err)
	default:
	}
	b.Release()
	if err := <-a2Done; err != nil {
		t.Fatal(err)
	}
	a2.Release()
}

func TestWaitsAreBounded(t *testing.T) {
	l, clock := newLimiter(t, Config{Slots: 1, SlotWait: 2 * time.Second, MaxDelay: time.Second, MaxPending: 2})
	ctx := context.Background()
	a1, err := l.Begin(ctx, srcA)
	if err != nil {
		t.Fatal(err)
	}
	defer a1.Release()
	// L5: A's second attempt waits for its turn; a third is refused.
	a2 := result(func() error { _, err := l.Begin(ctx, srcA); return err })
	testwait.Until(t, 5*time.Second, "A's second attempt waits", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.mu.sources[srcA].pending == 2
	})
	_, err = l.Begin(ctx, srcA)
	wantThrottled(t, err, time.Second)
	// B waits for the only slot.
	b := result(func() error { _, err := l.Begin(ctx, srcB); return err })
	testwait.Until(t, 5*time.Second, "A's turn and B's slot are awaited", func() bool { return clock.waiting() == 2 })
	clock.Advance(time.Second)
	wantThrottled(t, <-a2, time.Second)
	clock.Advance(time.Second)
	if err := <-b; !errors.Is(err, ErrBusy) {
		t.Fatalf("slot wait: %v, want ErrBusy", err)
	}
	// A cancelled wait ends at once.
	cctx, cancel := context.WithCancel(ctx)
	c := result(func() error { _, err := l.Begin(cctx, srcC); return err })
	cancel()
	if err := <-c; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for addr, s := range l.mu.sources {
		if want := map[netip.Addr]int{srcA: 1}[addr]; s.pending != want {
			t.Errorf("source %v: %d pending, want %d", addr, s.pending, want)
		}
	}
}

// TestSourcesBounded is L6.
func TestSourcesBounded(t *testing.T) {
	l, _ := newLimiter(t, Config{Sources: 2, Burst: 1, MaxDelay: time.Millisecond})
	fail(t, l, srcA)
	a, err := l.Begin(context.Background(), srcB) // B holds an attempt: pinned
	if err != nil {
		t.Fatal(err)
	}
	// C evicts A, the least recently seen source with nothing pending.
	if err := l.Admit(context.Background(), srcC); err != nil {
		t.Fatal(err)
	}
	if n := l.Len(); n != 2 {
		t.Fatalf("%d sources remembered, want 2", n)
	}
	// Forgotten, A starts again with a full budget.
	if err := l.Admit(context.Background(), srcA); err != nil {
		t.Fatalf("A after eviction: %v", err)
	}
	a.Release()
	// With every remembered source pinned, a new one is refused.
	a1, _ := l.Begin(context.Background(), srcA)
	b1, _ := l.Begin(context.Background(), srcB)
	if err := l.Admit(context.Background(), srcC); !errors.Is(err, ErrBusy) {
		t.Fatalf("all pinned: %v, want ErrBusy", err)
	}
	a1.Release()
	b1.Release()
}

// TestLogging is L7.
func TestLogging(t *testing.T) {
	l, clock := newLimiter(t, Config{LogEvery: time.Minute, LogBurst: 2, Burst: 100})
	if r := l.Failed(srcA); !r.Log || r.Failures != 1 {
		t.Fatalf("first failure: %+v, want logged", r)
	}
	for range 5 {
		if r := l.Failed(srcA); r.Log {
			t.Fatalf("a failure within LogEvery was logged: %+v", r)
		}
	}
	if r := l.Refused(srcB); !r.Log {
		t.Fatalf("another source's first refusal: %+v, want logged", r)
	}
	// The shared budget of lines is spent: C's first is not logged.
	if r := l.Refused(srcC); r.Log {
		t.Fatalf("past LogBurst: %+v", r)
	}
	clock.Advance(time.Minute)
	if r := l.Failed(srcA); !r.Log || r.Failures != 7 || r.Unlogged != 5 {
		t.Fatalf("after LogEvery: %+v, want logged with 7 failures, 5 unlogged", r)
	}
	if r := l.Refused(srcC); !r.Log || r.Unlogged != 1 {
		t.Fatalf("C after the wait: %+v", r)
	}
}

func TestSourceOf(t *testing.T) {
	for _, tc := range []struct {
		addr net.Addr
		want string
	}{
		{&net.TCPAddr{IP: net.ParseIP("10.1.2.3"), Port: 5}, "10.1.2.3"},
		{&net.TCPAddr{IP: net.ParseIP("::ffff:10.1.2.3"), Port: 5}, "10.1.2.3"},
		{&net.TCPAddr{IP: net.ParseIP("2001:db8:1:2:aaaa::1"), Port: 5}, "2001:db8:1:2::"},
		{&net.TCPAddr{IP: net.ParseIP("2001:db8:1:2:bbbb::9"), Port: 5}, "2001:db8:1:2::"},
		{&net.UDPAddr{IP: net.ParseIP("192.0.2.9"), Port: 5}, "192.0.2.9"},
		{&net.UnixAddr{Name: "/tmp/x", Net: "unix"}, "invalid IP"},
		{nil, "invalid IP"},
	} {
		if got := SourceOf(tc.addr).String(); got != tc.want {
			t.Errorf("SourceOf(%v) = %s, want %s", tc.addr, got, tc.want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	if err := (Config{}).Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if _, err := New(Config{Slots: -1}, nil); err == nil {
		t.Fatal("negative slots accepted")
	}
	if got := (Config{}).withDefaults().String(); got == "" {
		t.Fatal("no String")
	}
}

// FuzzChecksPerWindow drives a Limiter with an arbitrary schedule of
// attempts (each byte: the source, whether the password is right, how far
// the clock moves) and checks L1-L3: between any two checks of a source,
// it got at most Burst + elapsed/Interval + 1 failed checks, successes
// cost nothing, and nothing is left pending.
func FuzzChecksPerWindow(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 8, 0, 8, 0})
	f.Add([]byte{1, 5, 2, 255, 0, 4, 0, 0, 0, 3, 0, 0, 0, 200, 0})
	f.Fuzz(func(t *testing.T, schedule []byte) {
		const burst, interval = 3, time.Second
		l, clock := newLimiter(t, Config{Burst: burst, Interval: interval, MaxDelay: time.Nanosecond, Sources: 4})
		sources := []netip.Addr{srcA, srcB, srcC, netip.MustParseAddr("2001:db8::1")}
		failed := map[netip.Addr][]time.Time{}
		for _, op := range schedule[:min(len(schedule), 512)] {
			src, right := sources[op&3], op&4 != 0
			clock.Advance(time.Duration(op>>3) * 100 * time.Millisecond)
			a, err := l.Begin(context.Background(), src)
			if err != nil {
				if !errors.Is(err, ErrThrottled) {
					t.Fatal(err)
				}
				l.Refused(src)
				continue
			}
			if right {
				a.Release()
				continue
			}
			a.Failed()
			failed[src] = append(failed[src], clock.Now())
		}
		for src, times := range failed {
			for i := range times {
				for j := i; j < len(times); j++ {
					n := j - i + 1
					if allowed := burst + int(times[j].Sub(times[i])/interval) + 1; n > allowed {
						t.Fatalf("source %v: %d failed checks between %v and %v, at most %d allowed", src, n, times[i], times[j], allowed)
					}
				}
			}
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		for addr, s := range l.mu.sources {
			if s.pending != 0 {
				t.Fatalf("source %v: %d attempts left pending", addr, s.pending)
			}
		}
	})
}
