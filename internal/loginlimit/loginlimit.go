package loginlimit

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"
)

// Sentinel errors.
var (
	// ErrThrottled: the source failed too many logins lately, or has too
	// many attempts waiting (L2, L5). Returned as a *ThrottledError.
	ErrThrottled = errors.New("loginlimit: too many failed logins from this address")
	// ErrBusy: no verification slot freed within SlotWait (L4), or every
	// remembered source has attempts waiting (L6). Retryable.
	ErrBusy = errors.New("loginlimit: password checks busy")
)

// ThrottledError is an ErrThrottled naming when an attempt from the
// source would next be admitted.
type ThrottledError struct {
	RetryAfter time.Duration
}

func (e *ThrottledError) Error() string {
	return fmt.Sprintf("%v: retry in %v", ErrThrottled, e.RetryAfter.Round(time.Millisecond))
}

func (e *ThrottledError) Unwrap() error { return ErrThrottled }

// maxDebt caps a source's debt, in Intervals (L1).
const maxDebt = 3600

// Config tunes a Limiter; zero fields take the defaults.
type Config struct {
	// Burst is the failures a source may make before it is slowed
	// (default 10).
	Burst int
	// Interval is how often a source gains back one failure (default 1s).
	Interval time.Duration
	// MaxDelay is the longest an attempt waits for its source's turn or
	// budget before it is refused (default 1s).
	MaxDelay time.Duration
	// MaxPending is the most attempts of one source waiting at once
	// (default 16).
	MaxPending int
	// Slots is how many password checks run at once, all sources
	// together (default 4).
	Slots int
	// SlotWait is the longest a check waits for a slot (default 5s).
	SlotWait time.Duration
	// Sources is how many sources are remembered (default 10,000).
	Sources int
	// LogEvery is how often a source's failures are logged after its
	// first (default 1m); LogBurst the lines at once over all sources,
	// one more per second (default 20).
	LogEvery time.Duration
	LogBurst int
}

func (c Config) withDefaults() Config {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	defDur := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.Burst, 10)
	defDur(&c.Interval, time.Second)
	defDur(&c.MaxDelay, time.Second)
	def(&c.MaxPending, 16)
	def(&c.Slots, 4)
	defDur(&c.SlotWait, 5*time.Second)
	def(&c.Sources, 10_000)
	defDur(&c.LogEvery, time.Minute)
	def(&c.LogBurst, 20)
	return c
}

// Validate reports a setting out of range (after defaults).
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.Burst < 1, c.MaxPending < 1, c.Slots < 1, c.Sources < 1, c.LogBurst < 1:
		return fmt.Errorf("loginlimit: counts must be positive: %s", c)
	case c.Interval < 0, c.MaxDelay < 0, c.SlotWait < 0, c.LogEvery < 0:
		return fmt.Errorf("loginlimit: durations must be positive: %s", c)
	}
	return nil
}

func (c Config) String() string {
	return fmt.Sprintf("burst=%d interval=%v max_delay=%v max_pending=%d slots=%d slot_wait=%v sources=%d log_every=%v log_burst=%d",
		c.Burst, c.Interval, c.MaxDelay, c.MaxPending, c.Slots, c.SlotWait, c.Sources, c.LogEvery, c.LogBurst)
}

// Clock is the Limiter's time.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time                         { return time.Now() }
func (systemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// SystemClock is the wall clock.
var SystemClock Clock = systemClock{}

// Report is what Failed and Refused say about a source: whether to log
// now (L7), and its counts.
type Report struct {
	Log bool
	// Failures counts the source's failed and refused attempts while it
	// has been remembered, this one included.
	Failures int64
	// Unlogged counts those not in a log line before this one.
	Unlogged int64
}

// source is one source's state.
type source struct {
	addr    netip.Addr
	elem    *list.Element
	turn    chan struct{} // cap 1: held by the attempt between Begin and its end
	pending int           // attempts inside Begin or Admit, or holding the turn (pins the entry)

	// REQUIRES: Limiter.mu held, for the fields below.
	budget   float64 // failures of budget at updated
	updated  time.Time
	failures int64
	unlogged int64
	loggedAt time.Time // zero: never logged
}

// Limiter is a per-source budget of failed logins and shared, fair
// verification slots (see the package doc). Safe for concurrent use.
type Limiter struct {
	cfg   Config
	clock Clock
	slots chan struct{}

	mu struct {
		sync.Mutex
		sources    map[netip.Addr]*source
		lru        list.List // of *source, most recently seen first
		logBudget  float64
		logUpdated time.Time
	}
}

// New returns a Limiter; clock nil is SystemClock.
func New(cfg Config, clock Clock) (*Limiter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if clock == nil {
		clock = SystemClock
	}
	cfg = cfg.withDefaults()
	l := &Limiter{cfg: cfg, clock: clock, slots: make(chan struct{}, cfg.Slots)}
	l.mu.sources = map[netip.Addr]*source{}
	l.mu.logBudget = float64(cfg.LogBurst)
	return l, nil
}

// Config is the Limiter's configuration, defaults applied.
func (l *Limiter) Config() Config { return l.cfg }

// SourceOf is the source key of addr (see the package doc).
func SourceOf(addr net.Addr) netip.Addr {
	if addr == nil {
		return netip.Addr{}
	}
	var ip netip.Addr
	if tcp, ok := addr.(*net.TCPAddr); ok {
		ip = tcp.AddrPort().Addr()
	} else if ap, err := netip.ParseAddrPort(addr.String()); err == nil {
		ip = ap.Addr()
	}
	return SourceOfIP(ip)
}

// SourceOfIP is the source key of ip.
func SourceOfIP(ip netip.Addr) netip.Addr {
	ip = ip.Unmap()
	if ip.Is6() {
		p, _ := ip.WithZone("").Prefix(64)
		return p.Addr()
	}
	return ip
}

// Len is the number of sources remembered.
func (l *Limiter) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.mu.sources)
}

// Attempt is a password check under way, holding its source's turn and a
// shared slot (Begin). End it with Failed or Release.
type Attempt struct {
	l    *Limiter
	s    *source
	once sync.Once
}

// Begin waits for source's turn (L3), for budget (L2) and for a shared
// slot (L4), in that order, each wait bounded (L5). The caller runs one
// password check, then ends the Attempt: Failed when the password was
// wrong, else Release.
func (l *Limiter) Begin(ctx context.Context, src netip.Addr) (*Attempt, error) {
	s, err := l.pin(src)
	if err != nil {
		return nil, err
	}
	if err := l.acquire(ctx, s.turn, l.cfg.MaxDelay); err != nil {
		l.unpin(s)
		if errors.Is(err, errWaited) {
			err = &ThrottledError{RetryAfter: l.cfg.MaxDelay}
		}
		return nil, err
	}
	fail := func(err error) (*Attempt, error) {
		<-s.turn
		l.unpin(s)
		return nil, err
	}
	if err := l.waitBudget(ctx, s); err != nil {
		return fail(err)
	}
	if err := l.acquire(ctx, l.slots, l.cfg.SlotWait); err != nil {
		if errors.Is(err, errWaited) {
			err = fmt.Errorf("%w: no check slot within %v", ErrBusy, l.cfg.SlotWait)
		}
		return fail(err)
	}
	return &Attempt{l: l, s: s}, nil
}

// errWaited: acquire waited its whole bound.
var errWaited = errors.New("loginlimit: waited too long")

// acquire puts a token into sem, waiting at most bound (errWaited) and
// while ctx lives; uncontended, it starts no timer.
func (l *Limiter) acquire(ctx context.Context, sem chan struct{}, bound time.Duration) error {
	select {
	case sem <- struct{}{}:
		return nil
	default:
	}
	select {
	case sem <- struct{}{}:
		return nil
	case <-l.clock.After(bound):
		return errWaited
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Release ends the attempt without spending budget (the password was
// right, or nothing was checked). Later calls do nothing.
func (a *Attempt) Release() {
	a.once.Do(func() {
		<-a.l.slots
		<-a.s.turn
		a.l.unpin(a.s)
	})
}

// Failed ends the attempt as a failed login: it spends a failure of the
// source's budget before the source's next attempt gets its turn.
func (a *Attempt) Failed() Report {
	var r Report
	a.once.Do(func() {
		r = a.l.note(a.s.addr, true)
		<-a.l.slots
		<-a.s.turn
		a.l.unpin(a.s)
	})
	return r
}

// Admit waits until src has budget for one more failure (L2), for an
// exchange whose check runs elsewhere (SCRAM's proof): no turn, no slot.
// Report its failure with Failed.
func (l *Limiter) Admit(ctx context.Context, src netip.Addr) error {
	s, err := l.pin(src)
	if err != nil {
		return err
	}
	defer l.unpin(s)
	return l.waitBudget(ctx, s)
}

// Failed records a failed login from src outside an Attempt (after
// Admit): it spends a failure of budget.
func (l *Limiter) Failed(src netip.Addr) Report { return l.note(src, true) }

// Refused records an attempt from src refused by the Limiter itself
// (ErrThrottled, ErrBusy): counted and logged like a failure, but free.
func (l *Limiter) Refused(src netip.Addr) Report { return l.note(src, false) }

// waitBudget returns once s has a failure of budget, waiting at most
// MaxDelay (else a *ThrottledError at once).
func (l *Limiter) waitBudget(ctx context.Context, s *source) error {
	l.mu.Lock()
	wait := l.untilBudgetLocked(s, l.clock.Now())
	l.mu.Unlock()
	if wait == 0 {
		return nil
	}
	if wait > l.cfg.MaxDelay {
		return &ThrottledError{RetryAfter: wait}
	}
	select {
	case <-l.clock.After(wait):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// untilBudgetLocked is how long until s has one failure of budget.
// REQUIRES: l.mu held.
func (l *Limiter) untilBudgetLocked(s *source, now time.Time) time.Duration {
	l.refillLocked(s, now)
	if s.budget >= 1 {
		return 0
	}
	return time.Duration((1 - s.budget) * float64(l.cfg.Interval))
}

// refillLocked brings s's budget up to now (L1).
// REQUIRES: l.mu held.
func (l *Limiter) refillLocked(s *source, now time.Time) {
	if elapsed := now.Sub(s.updated); elapsed > 0 {
		if l.cfg.Interval == 0 {
			s.budget = float64(l.cfg.Burst)
		} else {
			s.budget = min(float64(l.cfg.Burst), s.budget+float64(elapsed)/float64(l.cfg.Interval))
		}
		s.updated = now
	}
}

// note counts a failed (spend) or refused attempt of src and decides
// whether to log it (L7).
func (l *Limiter) note(src netip.Addr, spend bool) Report {
	now := l.clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.sourceLocked(src, now)
	if s == nil {
		return Report{Log: l.takeLogLineLocked(now), Failures: 1}
	}
	if spend {
		l.refillLocked(s, now)
		s.budget = max(s.budget-1, -maxDebt)
	}
	s.failures++
	r := Report{Failures: s.failures, Unlogged: s.unlogged}
	due := s.loggedAt.IsZero() || now.Sub(s.loggedAt) >= l.cfg.LogEvery
	if due && l.takeLogLineLocked(now) {
		r.Log = true
		s.loggedAt, s.unlogged = now, 0
	} else {
		s.unlogged++
	}
	return r
}

// takeLogLineLocked spends one of the log lines shared by all sources.
// REQUIRES: l.mu held.
func (l *Limiter) takeLogLineLocked(now time.Time) bool {
	if elapsed := now.Sub(l.mu.logUpdated); elapsed > 0 {
		l.mu.logBudget = min(float64(l.cfg.LogBurst), l.mu.logBudget+elapsed.Seconds())
		l.mu.logUpdated = now
	}
	if l.mu.logBudget < 1 {
		return false
	}
	l.mu.logBudget--
	return true
}

// pin finds or makes src's entry and counts an attempt in it (L5).
func (l *Limiter) pin(src netip.Addr) (*source, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.sourceLocked(src, l.clock.Now())
	if s == nil {
		return nil, fmt.Errorf("%w: %d sources have attempts waiting", ErrBusy, l.cfg.Sources)
	}
	if s.pending >= l.cfg.MaxPending {
		return nil, &ThrottledError{RetryAfter: l.cfg.MaxDelay}
	}
	s.pending++
	return s, nil
}

func (l *Limiter) unpin(s *source) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s.pending--
}

// sourceLocked returns src's entry, made if needed (evicting per L6), and
// marks it the most recently seen; nil when it cannot be made.
// REQUIRES: l.mu held.
func (l *Limiter) sourceLocked(src netip.Addr, now time.Time) *source {
	if s, ok := l.mu.sources[src]; ok {
		l.mu.lru.MoveToFront(s.elem)
		return s
	}
	if len(l.mu.sources) >= l.cfg.Sources && !l.evictLocked() {
		return nil
	}
	s := &source{addr: src, turn: make(chan struct{}, 1), budget: float64(l.cfg.Burst), updated: now}
	s.elem = l.mu.lru.PushFront(s)
	l.mu.sources[src] = s
	return s
}

// evictLocked forgets the least recently seen source with nothing
// pending; false when every source has.
// REQUIRES: l.mu held.
func (l *Limiter) evictLocked() bool {
	for e := l.mu.lru.Back(); e != nil; e = e.Prev() {
		s := e.Value.(*source)
		if s.pending == 0 {
			l.mu.lru.Remove(e)
			delete(l.mu.sources, s.addr)
			return true
		}
	}
	return false
}
