package ledger

import (
	"sync"
	"time"
)

// timerSet runs functions later through a Scheduler, and lets its owner
// stop them: once stopped, nothing new is scheduled and what has not
// started never will; wait then returns when what did start has finished.
// The writer's background work (retries, replacements, the explicit LAC)
// runs through one, so Close leaves no goroutine behind.
//
// Lock order: the owner's lock (Writer.mu) may be held when after or stop
// is called; a timer firing takes only t.mu, and runs its function with
// no lock held.
type timerSet struct {
	sched Scheduler
	// running counts scheduled functions that have neither run to the end
	// nor been stopped.
	running sync.WaitGroup
	mu      struct {
		sync.Mutex
		stopped bool
		stops   map[uint64]func() bool // by id, until the function starts
		nextID  uint64
	}
}

func newTimerSet(sched Scheduler) *timerSet {
	t := &timerSet{sched: sched}
	t.mu.stops = make(map[uint64]func() bool)
	return t
}

// after runs f after d, unless the set is stopped first.
func (t *timerSet) after(d time.Duration, f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.mu.stopped {
		return
	}
	id := t.mu.nextID
	t.mu.nextID++
	t.running.Add(1)
	t.mu.stops[id] = t.sched.AfterFunc(d, func() {
		t.mu.Lock()
		_, ok := t.mu.stops[id]
		delete(t.mu.stops, id)
		t.mu.Unlock()
		if !ok { // stopped, and counted done, by stop
			return
		}
		defer t.running.Done()
		f()
	})
}

// stop schedules nothing more and stops what has not started.
func (t *timerSet) stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.mu.stopped = true
	for id, stop := range t.mu.stops {
		if stop() {
			delete(t.mu.stops, id)
			t.running.Done()
		}
	}
}

// wait returns once every function that started has finished. Call it
// after stop, with no lock a scheduled function takes held.
func (t *timerSet) wait() { t.running.Wait() }
