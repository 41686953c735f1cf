package replication

import (
	"errors"
	"testing"
	"time"

	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/ledger/ledgertest"
)

// notifyScheduler signals every wait the replicator schedules; the test
// then moves the clock.
type notifyScheduler struct {
	*ledgertest.ManualScheduler
	scheduled chan time.Duration
}

func (s *notifyScheduler) AfterFunc(d time.Duration, f func()) func() bool {
	stop := s.ManualScheduler.AfterFunc(d, f)
	s.scheduled <- d
	return stop
}

func receive[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(testTimeout):
		t.Fatalf("no %s within %v", what, testTimeout)
		panic("unreachable")
	}
}

// The replicator runs rounds only while it leads, one per Interval, goes
// back to campaigning when the leadership is lost, and stops every
// goroutine on Close (goleak checks in TestMain).
func TestReplicatorLeadsAndStops(t *testing.T) {
	g := newRig(t, 4)
	w := g.write(ledger.CreateOptions{}, 5, true)
	bad := g.metadata(w.ID()).Fragments[0].Bookies[0]
	sched := &notifyScheduler{ManualScheduler: g.c.Scheduler, scheduled: make(chan time.Duration)}
	el := &fakeElector{grant: make(chan chan struct{}), campaigns: make(chan struct{})}
	r, err := New(Config{Grace: grace, Interval: 5 * time.Second, Now: g.c.Scheduler.Now, Scheduler: sched}, g.c.Env(), g.kv, el)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	receive(t, el.campaigns, "campaign")
	g.decommission(bad)
	if metricValue(t, r.metrics.leader) != 0 || len(g.kv.keys(AddressPrefix)) != 0 {
		t.Fatal("a follower did work")
	}

	lost := make(chan struct{})
	el.grant <- lost
	if d := receive(t, sched.scheduled, "wait after the first round"); d != 5*time.Second {
		t.Fatalf("waits %v, want the interval", d)
	}
	g.checkFullyReplicated(w.ID(), bad)
	if metricValue(t, r.metrics.leader) != 1 || metricValue(t, r.metrics.lastAudit) != float64(g.c.Scheduler.Now().Unix()) {
		t.Fatal("leader metrics not set")
	}
	// The next round comes after the interval.
	g.c.Scheduler.Advance(5 * time.Second)
	receive(t, sched.scheduled, "wait after the second round")
	if got := metricValue(t, r.metrics.lastAudit); got != float64(g.c.Scheduler.Now().Unix()) {
		t.Fatalf("last audit at %v, want the second round's time", got)
	}

	close(lost)
	receive(t, el.campaigns, "campaign after losing the leadership")
	if metricValue(t, r.metrics.leader) != 0 {
		t.Error("still reports leading")
	}
	el.mu.Lock()
	resigned := el.resigned
	el.mu.Unlock()
	if resigned != 1 {
		t.Errorf("resigned %d times, want 1", resigned)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.Start(); !errors.Is(err, ErrClosed) {
		t.Errorf("Start after Close: %v", err)
	}
	if _, err := r.RunOnce(testCtx(t)); !errors.Is(err, ErrClosed) {
		t.Errorf("RunOnce after Close: %v", err)
	}
}

func TestConfig(t *testing.T) {
	if err := (Config{Interval: -1}).Validate(); err == nil {
		t.Error("negative interval accepted")
	}
	if err := (Config{Parallelism: -1}).Validate(); err == nil {
		t.Error("negative parallelism accepted")
	}
	c := Config{}.withDefaults()
	if c.Interval != DefaultInterval || c.Grace != DefaultGrace || c.Parallelism != DefaultParallelism {
		t.Errorf("defaults: %v", c)
	}
	if s := (Config{ID: "b1"}).String(); s == "" {
		t.Error("empty String")
	}
}
