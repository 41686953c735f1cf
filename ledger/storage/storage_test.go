package storage

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/strata-log/strata/internal/testwait"
	"github.com/strata-log/strata/ledger/journal"
	"github.com/strata-log/strata/vfs"
)

func TestOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    Options
		bad  string
	}{
		{"defaults", Options{Dir: "/d"}, ""},
		{"no dir", Options{}, "Dir"},
		{"no hysteresis", Options{Dir: "/d", ReadOnlyAbove: 0.9, WritableBelow: 0.9}, "WritableBelow"},
		{"above one", Options{Dir: "/d", ReadOnlyAbove: 1.5}, "ReadOnlyAbove"},
		{"ratio", Options{Dir: "/d", CompactBelowLiveRatio: 2}, "CompactBelowLiveRatio"},
		{"entry", Options{Dir: "/d", MaxEntryBytes: journal.MaxPayloadBytes + 1}, "MaxEntryBytes"},
		{"journal", Options{Dir: "/d", JournalMaxFileBytes: 10}, "MaxFileBytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.o.Validate()
			if (err == nil) != (tc.bad == "") || (err != nil && !strings.Contains(err.Error(), tc.bad)) {
				t.Fatalf("Validate() = %v, want an error about %q", err, tc.bad)
			}
		})
	}
	if s := (Options{Dir: "/d"}).String(); !strings.Contains(s, "ReadOnlyAbove: 0.95") {
		t.Fatalf("String() = %s", s)
	}
}

func TestAddReadRange(t *testing.T) {
	e := newEnv(t, nil)
	s := e.s
	for entry := range uint64(10) {
		mustAdd(t, s, 1, entry, int64(entry)-1, payloadFor(1, 1, entry, 100))
	}
	mustAdd(t, s, 2, 0, -1, []byte("other"))
	for entry := range uint64(10) {
		mustRead(t, s, 1, entry, payloadFor(1, 1, entry, 100))
	}
	_, err := s.Read(1, 10)
	wantErr(t, err, ErrNoEntry)
	_, err = s.Read(3, 0)
	wantErr(t, err, ErrNoEntry)
	if st, ok := s.State(1); !ok || st != (LedgerState{LAC: 8, LastEntryID: 9}) {
		t.Fatalf("State = %+v %v", st, ok)
	}
	if st, ok := s.State(3); ok || st != (LedgerState{LAC: -1, LastEntryID: -1}) {
		t.Fatalf("State(unknown) = %+v %v", st, ok)
	}

	var got []uint64
	collect := func(e Entry) error { got = append(got, e.EntryID); return nil }
	if err := s.ReadRange(1, 3, 20, 0, collect); err != nil || fmt.Sprint(got) != "[3 4 5 6 7 8 9]" {
		t.Fatalf("ReadRange = %v %v", got, err)
	}
	got = nil
	if err := s.ReadRange(1, 0, math.MaxUint64, 1, collect); err != nil || fmt.Sprint(got) != "[0]" {
		t.Fatalf("ReadRange(maxBytes 1) = %v %v: at least one entry", got, err)
	}
	got = nil
	if err := s.ReadRange(1, 10, 12, 0, collect); !errors.Is(err, ErrNoEntry) || got != nil {
		t.Fatalf("ReadRange(missing first) = %v %v", got, err)
	}
	// Entries beyond one index chunk, with a gap.
	for entry := range uint64(150) {
		if entry != 120 {
			mustAdd(t, s, 4, entry, -1, []byte{byte(entry)})
		}
	}
	got = nil
	if err := s.ReadRange(4, 0, 149, 0, collect); err != nil || len(got) != 120 || got[119] != 119 {
		t.Fatalf("ReadRange(gap at 120) = %d entries %v", len(got), err)
	}
	stop := errors.New("stop")
	if err := s.ReadRange(4, 0, 10, 0, func(Entry) error { return stop }); !errors.Is(err, stop) {
		t.Fatalf("ReadRange fn error = %v", err)
	}
	wantErr(t, s.ReadRange(4, 5, 4, 0, collect), ErrInvalid)

	// Re-adding an entry with the same bytes succeeds (a recovery add);
	// with other bytes it is refused (C2, hostile_test.go).
	mustAdd(t, s, 1, 3, 2, payloadFor(1, 1, 3, 100))
	wantErr(t, add(s, 1, 3, 2, []byte("rewritten"), true), ErrEntryConflict)
	mustRead(t, s, 1, 3, payloadFor(1, 1, 3, 100))

	e.reopen()
	mustRead(t, e.s, 1, 3, payloadFor(1, 1, 3, 100))
	mustRead(t, e.s, 1, 9, payloadFor(1, 1, 9, 100))
	if st, _ := e.s.State(1); st != (LedgerState{LAC: 8, LastEntryID: 9}) {
		t.Fatalf("State after reopen = %+v", st)
	}
}

func TestAddInvalid(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.MaxEntryBytes = 100 })
	s := e.s
	ctx := context.Background()
	nop := func(error) { t.Error("done called for a refused add") }
	wantErr(t, s.Add(ctx, 1, 0, -1, make([]byte, 101), false, nop), ErrInvalid)
	wantErr(t, s.Add(ctx, 1, math.MaxInt64+1, -1, nil, false, nop), ErrInvalid)
	wantErr(t, s.Add(ctx, 1, 0, -2, nil, false, nop), ErrInvalid)
	wantErr(t, s.Add(ctx, 1, 0, -1, nil, false, nil), ErrInvalid)
	wantErr(t, s.WriteLAC(ctx, 1, -2), ErrInvalid)
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	wantErr(t, s.Add(cancelled, 1, 0, -1, nil, false, nop), context.Canceled)
	if err := add(s, 1, 0, -1, make([]byte, 100), false); err != nil {
		t.Fatal(err)
	}
}

func TestFence(t *testing.T) {
	e := newEnv(t, nil)
	s := e.s
	ctx := context.Background()
	for entry := range uint64(3) {
		mustAdd(t, s, 1, entry, int64(entry)-1, []byte("x"))
	}
	st, err := s.Fence(ctx, 1)
	if err != nil || st != (LedgerState{LAC: 1, LastEntryID: 2, Fenced: true}) {
		t.Fatalf("Fence = %+v %v", st, err)
	}
	wantErr(t, add(s, 1, 3, 2, []byte("late"), false), ErrFenced)
	// Recovery adds go through.
	if err := add(s, 1, 2, 1, []byte("x"), true); err != nil {
		t.Fatal(err)
	}
	// Fencing a ledger never seen records it.
	if st, err := s.Fence(ctx, 9); err != nil || st != (LedgerState{LAC: -1, LastEntryID: -1, Fenced: true}) {
		t.Fatalf("Fence(unknown) = %+v %v", st, err)
	}
	e.reopen()
	wantErr(t, add(e.s, 1, 3, 2, []byte("late"), false), ErrFenced)
	wantErr(t, add(e.s, 9, 0, -1, []byte("late"), false), ErrFenced)
	if st, ok := e.s.State(9); !ok || !st.Fenced {
		t.Fatalf("State(9) = %+v %v", st, ok)
	}
}

// TestFenceIsAtomicWithAdds: every add accepted before the fence is in the
// state Fence returns, and no add is accepted after it.
func TestFenceIsAtomicWithAdds(t *testing.T) {
	for round := range 20 {
		e := newEnv(t, nil)
		s := e.s
		var (
			wg       sync.WaitGroup
			accepted atomic.Int64
			acked    sync.WaitGroup
			failures atomic.Int64
		)
		accepted.Store(-1)
		const writers = 4
		var next atomic.Uint64
		for range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					entry := next.Add(1) - 1
					acked.Add(1)
					err := s.Add(context.Background(), 7, entry, -1, []byte("p"), false, func(err error) {
						if err != nil {
							failures.Add(1)
						}
						acked.Done()
					})
					if err != nil {
						acked.Done()
						if !errors.Is(err, ErrFenced) {
							t.Errorf("add: %v", err)
						}
						return
					}
					for {
						old := accepted.Load()
						if int64(entry) <= old || accepted.CompareAndSwap(old, int64(entry)) {
							break
						}
					}
				}
			}()
		}
		testwait.Until(t, waitTimeout, "some adds", func() bool { return next.Load() > uint64(round*5) })
		st, err := s.Fence(context.Background(), 7)
		if err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		acked.Wait()
		if failures.Load() != 0 {
			t.Fatalf("%d accepted adds failed", failures.Load())
		}
		if a := accepted.Load(); a > st.LastEntryID {
			t.Fatalf("round %d: add of entry %d accepted but fence saw last entry %d", round, a, st.LastEntryID)
		}
		e.s.Close()
		e.s = nil
	}
}

func TestWriteLACAndWaitLAC(t *testing.T) {
	e := newEnv(t, nil)
	s := e.s
	ctx := context.Background()

	// A ledger nobody has written yet: the poll waits.
	got := make(chan LedgerState, 1)
	go func() {
		st, err := s.WaitLAC(ctx, 5, -1)
		if err != nil {
			t.Error(err)
		}
		got <- st
	}()
	mustAdd(t, s, 5, 0, -1, []byte("a")) // LAC stays -1
	select {
	case st := <-got:
		t.Fatalf("WaitLAC returned early: %+v", st)
	default:
	}
	mustAdd(t, s, 5, 1, 0, []byte("b"))
	if st := <-got; st.LAC != 0 || st.LastEntryID != 1 {
		t.Fatalf("WaitLAC = %+v", st)
	}

	// Already above: at once.
	if st, err := s.WaitLAC(ctx, 5, -1); err != nil || st.LAC != 0 {
		t.Fatalf("WaitLAC(already) = %+v %v", st, err)
	}
	// An explicit LAC wakes it too, and only raises. (The bookie holds
	// entries up to 7: a LAC above the entries held is lowered, see
	// TestLACClampedToEntriesHeld.)
	for entry := uint64(2); entry <= 7; entry++ {
		mustAdd(t, s, 5, entry, 0, []byte("c"))
	}
	go func() {
		st, err := s.WaitLAC(ctx, 5, 0)
		if err != nil {
			t.Error(err)
		}
		got <- st
	}()
	if err := s.WriteLAC(ctx, 5, 7); err != nil {
		t.Fatal(err)
	}
	if st := <-got; st.LAC != 7 {
		t.Fatalf("WaitLAC after WriteLAC = %+v", st)
	}
	if err := s.WriteLAC(ctx, 5, 3); err != nil {
		t.Fatal(err)
	}
	if st, _ := s.State(5); st.LAC != 7 {
		t.Fatalf("LAC went down: %+v", st)
	}
	// ctx ends first: the current state and ctx's error.
	short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	st, err := s.WaitLAC(short, 5, 7)
	if !errors.Is(err, context.DeadlineExceeded) || st.LAC != 7 {
		t.Fatalf("WaitLAC(timeout) = %+v %v", st, err)
	}
	// Close ends polls.
	errc := make(chan error, 1)
	go func() {
		_, err := s.WaitLAC(ctx, 5, 100)
		errc <- err
	}()
	e.reopen() // closes s
	wantErr(t, <-errc, ErrClosed)
	if st, _ := e.s.State(5); st.LAC != 7 {
		t.Fatalf("explicit LAC lost on restart: %+v", st)
	}
}

func TestDeleteIsNotResurrectedByReplay(t *testing.T) {
	e := newEnv(t, nil)
	s := e.s
	for entry := range uint64(20) {
		mustAdd(t, s, 3, entry, -1, []byte("doomed"))
		mustAdd(t, s, 4, entry, -1, []byte("kept"))
	}
	if _, err := s.Fence(context.Background(), 3); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(context.Background(), 3); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Read(3, 5); !errors.Is(err, ErrNoEntry) {
		t.Fatalf("read after delete: %v", err)
	}
	if _, ok := s.State(3); ok {
		t.Fatal("state after delete")
	}
	// Crash with the index at its last synced checkpoint (Open's, before
	// every add): replay re-applies the adds, then the delete.
	crashed := e.crash(false, nil, nil)
	if err := e.restartAfterCrash(crashed, false); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.Read(3, 5); !errors.Is(err, ErrNoEntry) {
		t.Fatalf("read after replay: %v", err)
	}
	if _, ok := e.s.State(3); ok {
		t.Fatal("deleted ledger resurrected")
	}
	mustRead(t, e.s, 4, 19, []byte("kept"))
	// Its fence outlives it (F1): only recovery adds. The delete of an
	// unfenced ledger leaves no fence (TestZombieAddAfterFencedDelete).
	wantErr(t, add(e.s, 3, 0, -1, []byte("new"), false), ErrFenced)
	if err := add(e.s, 3, 0, -1, []byte("new"), true); err != nil {
		t.Fatal(err)
	}
	mustRead(t, e.s, 3, 0, []byte("new"))
}

func TestSyncErrorIsFatal(t *testing.T) {
	var fatal atomic.Pointer[error]
	e := newEnv(t, func(o *Options) {
		o.OnFatal = func(err error) { fatal.Store(&err) }
	})
	s := e.s
	mustAdd(t, s, 1, 0, -1, []byte("before"))
	var syncs atomic.Int32
	var failing atomic.Bool
	e.mem.InjectError(func(op vfs.Op, name string) error {
		if op == vfs.OpSync && strings.Contains(name, "journal") && failing.Load() {
			syncs.Add(1)
			return syscall.EIO
		}
		return nil
	})
	failing.Store(true)
	var wg sync.WaitGroup
	var acked atomic.Int32
	for entry := uint64(1); entry <= 20; entry++ {
		wg.Add(1)
		err := s.Add(context.Background(), 1, entry, -1, []byte("after"), false, func(err error) {
			defer wg.Done()
			if err == nil {
				acked.Add(1)
			} else if !errors.Is(err, ErrFailed) {
				t.Errorf("done(%v), want ErrFailed", err)
			}
		})
		if err != nil {
			wg.Done()
			wantErr(t, err, ErrFailed)
		}
	}
	wg.Wait()
	if acked.Load() != 0 {
		t.Fatalf("%d adds acknowledged after a failed sync", acked.Load())
	}
	if fatal.Load() == nil || !errors.Is(*fatal.Load(), ErrFailed) {
		t.Fatal("OnFatal not called with ErrFailed")
	}
	if syncs.Load() != 1 {
		t.Fatalf("%d syncs attempted; a failed sync must never be retried", syncs.Load())
	}
	wantErr(t, add(s, 1, 30, -1, []byte("later"), false), ErrFailed)
	_, err := s.Fence(context.Background(), 1)
	wantErr(t, err, ErrFailed)
	mustRead(t, s, 1, 0, []byte("before")) // reads go on
	if err := s.Close(); err != nil {
		t.Fatalf("Close after failure: %v", err)
	}
	e.s = nil
	// The restarted bookie has what was acknowledged.
	e.mem.InjectError(nil)
	e.mem = e.mem.Crash(vfs.CrashOptions{})
	e.open()
	mustRead(t, e.s, 1, 0, []byte("before"))
}

func TestIndexWriteErrorIsFatal(t *testing.T) {
	var fatal atomic.Bool
	e := newEnv(t, func(o *Options) { o.OnFatal = func(error) { fatal.Store(true) } })
	mustAdd(t, e.s, 1, 0, -1, []byte("a"))
	// Close the index under the storage: the next batch fails.
	e.s.ix.Close()
	wantErr(t, add(e.s, 1, 1, -1, []byte("b"), false), ErrFailed)
	if !fatal.Load() {
		t.Fatal("OnFatal not called")
	}
	wantErr(t, add(e.s, 1, 2, -1, []byte("c"), false), ErrFailed)
	e.s.Close()
	e.s = nil
}

func TestClose(t *testing.T) {
	e := newEnv(t, nil)
	s := e.s
	// Adds queued when Close starts are completed.
	var wg sync.WaitGroup
	for entry := range uint64(50) {
		wg.Add(1)
		if err := s.Add(context.Background(), 1, entry, -1, []byte("x"), false, func(err error) {
			if err != nil {
				t.Errorf("queued add: %v", err)
			}
			wg.Done()
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	wantErr(t, s.Close(), ErrClosed)
	wantErr(t, add(s, 1, 99, -1, nil, false), ErrClosed)
	_, err := s.Read(1, 0)
	wantErr(t, err, ErrClosed)
	_, err = s.GC(context.Background())
	wantErr(t, err, ErrClosed)
	e.s = nil
	e.open()
	mustRead(t, e.s, 1, 49, []byte("x"))
}

func TestMetricsRegister(t *testing.T) {
	m := NewMetrics()
	reg := prometheus.NewPedanticRegistry()
	if err := m.Register(reg); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(o *Options) { o.Metrics = m })
	mustAdd(t, e.s, 1, 0, -1, []byte("x"))
	mustRead(t, e.s, 1, 0, []byte("x"))
	e.s.disk.check()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, f := range families {
		names[f.GetName()] = true
		if !strings.HasPrefix(f.GetName(), "strata_bookie_") {
			t.Errorf("metric %s lacks the strata_bookie_ prefix", f.GetName())
		}
	}
	for _, want := range []string{"strata_bookie_add_latency_seconds", "strata_bookie_journal_sync_latency_seconds",
		"strata_bookie_journal_group_records", "strata_bookie_corruptions_total", "strata_bookie_disk_free_bytes",
		"strata_bookie_ledgers", "strata_bookie_fence_tombstones", "strata_bookie_replay_duration_seconds", "strata_bookie_index_bytes"} {
		if !names[want] {
			t.Errorf("metric %s missing", want)
		}
	}
	if err := m.Register(reg); err == nil {
		t.Fatal("registering twice succeeded")
	}
}

// TestLedgers: Ledgers lists, in id order, the ledgers with an applied
// add, fence or LAC; a deleted ledger leaves the list, and replay brings
// back exactly the same list.
func TestLedgers(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	if got := e.s.Ledgers(); len(got) != 0 {
		t.Fatalf("empty storage lists %v", got)
	}
	mustAdd(t, e.s, 9, 0, -1, []byte("a"))
	mustAdd(t, e.s, 2, 0, -1, []byte("b"))
	if _, err := e.s.Fence(ctx, 5); err != nil {
		t.Fatal(err)
	}
	if err := e.s.WriteLAC(ctx, 7, 3); err != nil {
		t.Fatal(err)
	}
	mustAdd(t, e.s, 4, 0, -1, []byte("c"))
	if err := e.s.Delete(ctx, 4); err != nil {
		t.Fatal(err)
	}
	// A long poll on an unknown ledger is no record of it.
	pollCtx, cancel := context.WithTimeout(ctx, time.Millisecond)
	defer cancel()
	_, _ = e.s.WaitLAC(pollCtx, 11, 0)
	want := []uint64{2, 5, 7, 9}
	if got := e.s.Ledgers(); !slices.Equal(got, want) {
		t.Fatalf("Ledgers() = %v, want %v", got, want)
	}
	e.reopen()
	if got := e.s.Ledgers(); !slices.Equal(got, want) {
		t.Fatalf("after replay Ledgers() = %v, want %v", got, want)
	}
}
