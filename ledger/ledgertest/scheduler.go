package ledgertest

import (
	"slices"
	"sync"
	"time"

	"github.com/strata-log/strata/ledger"
)

// ManualScheduler is a ledger.Scheduler on a fake clock: scheduled
// functions run only inside Advance or RunDue, on the caller's goroutine,
// in due-time order (ties in scheduling order). Safe for concurrent use.
type ManualScheduler struct {
	mu      sync.Mutex
	now     time.Time
	nextSeq uint64
	timers  []*manualTimer
}

var _ ledger.Scheduler = (*ManualScheduler)(nil)

type manualTimer struct {
	due time.Time
	seq uint64
	f   func()
}

// NewManualScheduler starts the clock at a fixed instant.
func NewManualScheduler() *ManualScheduler {
	return &ManualScheduler{now: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
}

// AfterFunc implements ledger.Scheduler.
func (s *ManualScheduler) AfterFunc(d time.Duration, f func()) func() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := &manualTimer{due: s.now.Add(d), seq: s.nextSeq, f: f}
	s.nextSeq++
	s.timers = append(s.timers, t)
	return func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		i := slices.Index(s.timers, t)
		if i < 0 {
			return false
		}
		s.timers = slices.Delete(s.timers, i, i+1)
		return true
	}
}

// Now is the fake clock (use it as ledger.Env.Now).
func (s *ManualScheduler) Now() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.now
}

// Pending counts the functions scheduled and not run.
func (s *ManualScheduler) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.timers)
}

// RunDue runs every function due now, including ones they schedule for
// now, and returns how many ran.
func (s *ManualScheduler) RunDue() int { return s.Advance(0) }

// Advance moves the clock forward by d, running each function when the
// clock reaches its due time, and returns how many ran.
func (s *ManualScheduler) Advance(d time.Duration) int {
	s.mu.Lock()
	end := s.now.Add(d)
	s.mu.Unlock()
	n := 0
	for ; ; n++ {
		s.mu.Lock()
		i := -1
		for j, t := range s.timers {
			if !t.due.After(end) && (i < 0 || t.due.Before(s.timers[i].due) ||
				(t.due.Equal(s.timers[i].due) && t.seq < s.timers[i].seq)) {
				i = j
			}
		}
		if i < 0 {
			s.now = end
			s.mu.Unlock()
			return n
		}
		t := s.timers[i]
		s.timers = slices.Delete(s.timers, i, i+1)
		if t.due.After(s.now) {
			s.now = t.due
		}
		s.mu.Unlock()
		t.f()
		if n > 1_000_000 {
			panic("ledgertest: scheduler does not converge")
		}
	}
}
