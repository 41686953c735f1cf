package bookie

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	pebblevfs "github.com/cockroachdb/pebble/vfs"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"

	"github.com/strata-log/strata/internal/testwait"
	"github.com/strata-log/strata/ledger/storage"
	"github.com/strata-log/strata/vfs"
)

// The bookie starts goroutines (registration, decommission watch, orphan
// sweep, replicator): none may outlive a test.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestDecideOrphans(t *testing.T) {
	const grace = time.Hour
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0.Add(2 * grace)
	for _, tc := range []struct {
		name          string
		local, listed []uint64
		absent        map[uint64]time.Time
		wantDelete    []uint64
		wantAbsent    map[uint64]time.Time
	}{
		{name: "nothing held"},
		{name: "everything held is listed", local: []uint64{1, 2}, listed: []uint64{1, 2, 3}},
		{name: "O1: first seen absent starts the clock", local: []uint64{1, 2}, listed: []uint64{2},
			wantAbsent: map[uint64]time.Time{1: now}},
		{name: "O1: absent for less than the grace is kept", local: []uint64{1}, listed: nil,
			absent:     map[uint64]time.Time{1: now.Add(-grace + time.Second)},
			wantAbsent: map[uint64]time.Time{1: now.Add(-grace + time.Second)}},
		{name: "O1: absent for exactly the grace is kept", local: []uint64{1},
			absent:     map[uint64]time.Time{1: now.Add(-grace)},
			wantAbsent: map[uint64]time.Time{1: now.Add(-grace)}},
		{name: "O1: absent for longer than the grace is deleted", local: []uint64{1, 5}, listed: []uint64{5},
			absent:     map[uint64]time.Time{1: now.Add(-grace - time.Millisecond)},
			wantDelete: []uint64{1},
			wantAbsent: map[uint64]time.Time{1: now.Add(-grace - time.Millisecond)}},
		{name: "listed again: the clock is forgotten", local: []uint64{1}, listed: []uint64{1},
			absent: map[uint64]time.Time{1: t0}},
		{name: "no longer held: forgotten", local: []uint64{2}, listed: []uint64{2},
			absent: map[uint64]time.Time{1: t0, 3: now}},
		{name: "clock went backwards: kept, not deleted", local: []uint64{1},
			absent:     map[uint64]time.Time{1: now.Add(time.Hour)},
			wantAbsent: map[uint64]time.Time{1: now.Add(time.Hour)}},
		{name: "O3: empty listing deletes nothing at first sight", local: []uint64{1, 2, 3},
			wantAbsent: map[uint64]time.Time{1: now, 2: now, 3: now}},
		{name: "mixed, unsorted input", local: []uint64{9, 4, 7, 2, 8}, listed: []uint64{8, 2, 100},
			absent:     map[uint64]time.Time{9: t0, 7: t0, 4: now.Add(-time.Minute), 2: t0, 50: t0},
			wantDelete: []uint64{7, 9},
			wantAbsent: map[uint64]time.Time{9: t0, 7: t0, 4: now.Add(-time.Minute)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := maps.Clone(tc.absent)
			d := decideOrphans(tc.local, tc.listed, tc.absent, now, grace)
			if !slices.Equal(d.Delete, tc.wantDelete) {
				t.Errorf("Delete = %v, want %v", d.Delete, tc.wantDelete)
			}
			if tc.wantAbsent == nil {
				tc.wantAbsent = map[uint64]time.Time{}
			}
			if !maps.EqualFunc(d.Absent, tc.wantAbsent, time.Time.Equal) {
				t.Errorf("Absent = %v, want %v", d.Absent, tc.wantAbsent)
			}
			if !maps.EqualFunc(tc.absent, before, time.Time.Equal) {
				t.Errorf("the input map changed: %v, was %v", tc.absent, before)
			}
		})
	}
}

// value reads a counter's or a gauge's value.
func value(t *testing.T, c prometheus.Metric) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	if m.Counter != nil {
		return m.GetCounter().GetValue()
	}
	return m.GetGauge().GetValue()
}

// fakeHolder is an in-memory ledgerHolder.
type fakeHolder struct {
	mu        sync.Mutex
	ledgers   map[uint64]bool
	failFirst error // the next Delete fails with it
	calls     []string
}

func newFakeHolder(ids ...uint64) *fakeHolder {
	h := &fakeHolder{ledgers: map[uint64]bool{}}
	for _, id := range ids {
		h.ledgers[id] = true
	}
	return h
}

func (h *fakeHolder) Ledgers() []uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls = append(h.calls, "local")
	return slices.Sorted(maps.Keys(h.ledgers))
}

func (h *fakeHolder) Delete(_ context.Context, id uint64) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.failFirst; err != nil {
		h.failFirst = nil
		return err
	}
	delete(h.ledgers, id)
	return nil
}

func (h *fakeHolder) add(id uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ledgers[id] = true
}

func (h *fakeHolder) held() []uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Sorted(maps.Keys(h.ledgers))
}

// fakeLister is metad's ledger listing; during, if set, runs inside List
// (a concurrent creation racing the sweep).
type fakeLister struct {
	mu     sync.Mutex
	ids    []uint64
	err    error
	during func()
	holder *fakeHolder // records the call order
}

func (l *fakeLister) List(context.Context) ([]uint64, error) {
	l.mu.Lock()
	during := l.during
	l.mu.Unlock()
	if during != nil {
		during()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.holder != nil {
		l.holder.mu.Lock()
		l.holder.calls = append(l.holder.calls, "metad")
		l.holder.mu.Unlock()
	}
	if l.err != nil {
		return nil, l.err
	}
	return slices.Clone(l.ids), nil
}

func (l *fakeLister) set(ids []uint64, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ids, l.err = ids, err
}

// fakeClock is a settable clock.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

type sweepFixture struct {
	holder  *fakeHolder
	lister  *fakeLister
	clock   *fakeClock
	trusted error
	s       *orphanSweeper
}

func newSweepFixture(grace time.Duration, held []uint64, listed []uint64) *sweepFixture {
	f := &sweepFixture{
		holder: newFakeHolder(held...),
		clock:  &fakeClock{now: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)},
	}
	f.lister = &fakeLister{ids: listed, holder: f.holder}
	f.s = &orphanSweeper{
		interval: time.Minute, grace: grace, held: f.holder, meta: f.lister,
		trust: func(context.Context) error { return f.trusted },
		now:   f.clock.Now, log: slog.New(slog.DiscardHandler), metrics: NewSweepMetrics(),
	}
	return f
}

func (f *sweepFixture) sweep(t *testing.T) []uint64 {
	t.Helper()
	deleted, err := f.s.sweep(context.Background())
	if err != nil {
		t.Fatalf("sweep: %v", err)
	}
	return deleted
}

// TestSweepDeletesOrphansAfterGrace: rule O1 end to end over the fakes,
// with the metrics.
func TestSweepDeletesOrphansAfterGrace(t *testing.T) {
	f := newSweepFixture(time.Hour, []uint64{1, 2, 3}, []uint64{2})
	m := f.s.metrics
	if got := f.sweep(t); len(got) != 0 {
		t.Fatalf("first sight deleted %v", got)
	}
	if value(t, m.orphaned) != 2 || value(t, m.lastSweep) == 0 {
		t.Fatalf("orphaned %v, last sweep %v", value(t, m.orphaned), value(t, m.lastSweep))
	}
	f.clock.advance(time.Hour)
	if got := f.sweep(t); len(got) != 0 {
		t.Fatalf("deleted %v at exactly the grace", got)
	}
	f.clock.advance(time.Millisecond)
	if got := f.sweep(t); !slices.Equal(got, []uint64{1, 3}) {
		t.Fatalf("deleted %v, want [1 3]", got)
	}
	if held := f.holder.held(); !slices.Equal(held, []uint64{2}) {
		t.Fatalf("still held %v, want [2]", held)
	}
	if value(t, m.orphaned) != 0 || value(t, m.deleted) != 2 || value(t, m.errors) != 0 {
		t.Fatalf("orphaned %v deleted %v errors %v", value(t, m.orphaned), value(t, m.deleted), value(t, m.errors))
	}
}

// TestSweepNeverActsOnFailedListing: rule O3. A failed listing or a metad
// that does not hold this bookie's cookie deletes nothing, however long
// ago the ledger was first seen absent, and does not reset the clock.
func TestSweepNeverActsOnFailedListing(t *testing.T) {
	f := newSweepFixture(time.Hour, []uint64{1, 2}, []uint64{2})
	f.sweep(t)
	f.clock.advance(2 * time.Hour)

	f.lister.set(nil, errors.New("metad: no quorum"))
	if deleted, err := f.s.sweep(context.Background()); err == nil || len(deleted) != 0 {
		t.Fatalf("failed listing: deleted %v, err %v", deleted, err)
	}
	f.lister.set([]uint64{2}, nil)
	f.trusted = ErrUntrustedMetad
	if deleted, err := f.s.sweep(context.Background()); !errors.Is(err, ErrUntrustedMetad) || len(deleted) != 0 {
		t.Fatalf("untrusted metad: deleted %v, err %v", deleted, err)
	}
	if held := f.holder.held(); !slices.Equal(held, []uint64{1, 2}) {
		t.Fatalf("held %v after failed sweeps", held)
	}
	if got := value(t, f.s.metrics.errors); got != 2 {
		t.Fatalf("errors %v, want 2", got)
	}
	// Back to normal: ledger 1 has been absent since the first sweep.
	f.trusted = nil
	if got := f.sweep(t); !slices.Equal(got, []uint64{1}) {
		t.Fatalf("deleted %v, want [1]", got)
	}
}

// TestSweepListsLocalBeforeMetad: rule O2. A ledger created while the
// sweep runs (metadata first, then its first entry here) must not be seen
// as absent: the local listing comes first, so it is not in it.
func TestSweepListsLocalBeforeMetad(t *testing.T) {
	f := newSweepFixture(time.Hour, []uint64{1}, []uint64{1})
	f.lister.during = func() {
		f.lister.mu.Lock()
		f.lister.ids = append(f.lister.ids, 7) // metad: ledger 7 created
		f.lister.mu.Unlock()
		f.holder.add(7) // then its first entry reaches this bookie
	}
	f.sweep(t)
	if len(f.s.absent) != 0 {
		t.Fatalf("a ledger created during the sweep was seen absent: %v", f.s.absent)
	}
	if !slices.Equal(f.holder.calls, []string{"local", "metad"}) {
		t.Fatalf("calls %v, want local then metad", f.holder.calls)
	}
}

// TestSweepDeleteErrorKeepsClock: a failing local delete stops the sweep
// and is counted; the ledger keeps its first-seen time, so the next sweep
// deletes it without another grace period.
func TestSweepDeleteErrorKeepsClock(t *testing.T) {
	f := newSweepFixture(time.Hour, []uint64{1, 2}, nil)
	f.sweep(t)
	f.clock.advance(2 * time.Hour)
	f.holder.failFirst = errors.New("storage: closed")
	if deleted, err := f.s.sweep(context.Background()); err == nil || len(deleted) != 0 {
		t.Fatalf("deleted %v, err %v", deleted, err)
	}
	if value(t, f.s.metrics.errors) != 1 || value(t, f.s.metrics.orphaned) != 2 {
		t.Fatalf("errors %v orphaned %v", value(t, f.s.metrics.errors), value(t, f.s.metrics.orphaned))
	}
	if got := f.sweep(t); !slices.Equal(got, []uint64{1, 2}) {
		t.Fatalf("deleted %v, want [1 2]", got)
	}
}

// TestSweeperRunStopsWithContext: run sweeps at once and on its ticker, and
// returns when its context ends (the Bookie waits for it on Close).
func TestSweeperRunStopsWithContext(t *testing.T) {
	f := newSweepFixture(time.Hour, []uint64{1}, nil)
	f.s.interval = time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.s.run(ctx)
	}()
	// Three sweeps: a local and a metad listing each.
	testwait.Until(t, 10*time.Second, "six listings (three sweeps)", func() bool {
		f.holder.mu.Lock()
		defer f.holder.mu.Unlock()
		return len(f.holder.calls) >= 6
	})
	cancel()
	testwait.Recv(t, 10*time.Second, "run to return after cancel", done)
}

// TestSweepKeepsFencedTombstone: the sweep over a real storage. A ledger a
// new owner fenced, then dropped from metad, is deleted once; its fenced
// tombstone is not listed as held, so later sweeps do not delete it again,
// and the old owner's non-recovery add stays refused.
func TestSweepKeepsFencedTombstone(t *testing.T) {
	ctx := context.Background()
	store, err := storage.Open(ctx, storage.Options{
		Dir: "/data", FS: vfs.NewMem(), IndexFS: pebblevfs.NewMem(),
		DiskCheckInterval: -1, CheckpointInterval: -1, GCInterval: -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	add := func(entryID uint64, recovery bool) error {
		done := make(chan error, 1)
		if err := store.Add(ctx, 7, entryID, int64(entryID)-1, []byte("x"), recovery, func(err error) { done <- err }); err != nil {
			return err
		}
		return <-done
	}
	if err := add(0, false); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Fence(ctx, 7); err != nil { // recovery by a new owner
		t.Fatal(err)
	}
	f := newSweepFixture(time.Hour, nil, nil) // metad lists nothing
	f.s.held = store
	f.sweep(t)
	f.clock.advance(2 * time.Hour)
	if got := f.sweep(t); !slices.Equal(got, []uint64{7}) {
		t.Fatalf("deleted %v, want [7]", got)
	}
	for range 3 {
		f.clock.advance(2 * time.Hour)
		if got := f.sweep(t); len(got) != 0 {
			t.Fatalf("deleted %v again", got)
		}
	}
	if len(f.s.absent) != 0 || value(t, f.s.metrics.deleted) != 1 || value(t, f.s.metrics.orphaned) != 0 {
		t.Fatalf("absent %v, deleted %v, orphaned %v", f.s.absent, value(t, f.s.metrics.deleted), value(t, f.s.metrics.orphaned))
	}
	if err := add(1, false); !errors.Is(err, storage.ErrFenced) {
		t.Fatalf("the old owner's add after the sweep: %v, want %v", err, storage.ErrFenced)
	}
}
