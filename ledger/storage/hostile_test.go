package storage

import (
	"context"
	"errors"
	"math"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// The rules of doc.go's "Hostile and buggy writers": C2 (an entry, once
// stored, keeps its bytes), H1 (a LAC never passes the entries held) and
// H2 (nor the entries verified),
// live, across a clean restart, and across a crash whose replay meets the
// refused records again (with and without the index).

// TestOverwriteRules: re-adding a stored entry succeeds with the same
// bytes and is refused with other bytes, whoever sends it (writer or
// recovery add, fenced ledger or not); the stored bytes stay.
func TestOverwriteRules(t *testing.T) {
	stored := []byte("original")
	for _, tc := range []struct {
		name     string
		setup    func(t *testing.T, s *Storage) // after entry 0 is stored
		payload  []byte
		recovery bool
		want     error  // the re-add's outcome
		read     []byte // entry 0 afterwards
		deleted  bool   // entry 1 is gone too
	}{
		{name: "same bytes, recovery add", payload: stored, recovery: true, read: stored},
		{name: "same bytes, writer retry", payload: stored, read: stored},
		{name: "other bytes, recovery add", payload: []byte("EVIL-INJECTED"), recovery: true, want: ErrEntryConflict, read: stored},
		{name: "other bytes, writer add", payload: []byte("EVIL-INJECTED"), want: ErrEntryConflict, read: stored},
		{name: "other bytes of the same length", payload: []byte("origina!"), recovery: true, want: ErrEntryConflict, read: stored},
		{name: "empty payload", payload: nil, recovery: true, want: ErrEntryConflict, read: stored},
		{
			name: "other bytes, fenced ledger, recovery add", payload: []byte("x"), recovery: true,
			setup: func(t *testing.T, s *Storage) {
				if _, err := s.Fence(context.Background(), 1); err != nil {
					t.Fatal(err)
				}
			},
			want: ErrEntryConflict, read: stored,
		},
		{
			name: "fenced ledger, writer add", payload: stored,
			setup: func(t *testing.T, s *Storage) {
				if _, err := s.Fence(context.Background(), 1); err != nil {
					t.Fatal(err)
				}
			},
			want: ErrFenced, read: stored,
		},
		{
			name: "after a delete the id holds nothing", payload: []byte("new"), read: []byte("new"), deleted: true,
			setup: func(t *testing.T, s *Storage) {
				if err := s.Delete(context.Background(), 1); err != nil {
					t.Fatal(err)
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, nil)
			mustAdd(t, e.s, 1, 0, -1, stored)
			mustAdd(t, e.s, 1, 1, 0, []byte("next"))
			if tc.setup != nil {
				tc.setup(t, e.s)
			}
			if err := add(e.s, 1, 0, -1, tc.payload, tc.recovery); !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
				t.Fatalf("re-add: %v, want %v", err, tc.want)
			}
			wantRefused := 0.0
			if errors.Is(tc.want, ErrEntryConflict) {
				wantRefused = 1
			}
			if got := counterValue(t, e.s.metrics.overwritesRefused); got != wantRefused {
				t.Fatalf("strata_bookie_entry_overwrites_refused_total = %v, want %v", got, wantRefused)
			}
			mustRead(t, e.s, 1, 0, tc.read)
			// Replay meets the refused record again (the checkpoint is
			// the one Open wrote) and refuses it again; so does a rebuild
			// of a lost index from the journal.
			for _, wipe := range []bool{false, true} {
				crashed := e.crash(false, nil, nil)
				if err := e.restartAfterCrash(crashed, wipe); err != nil {
					t.Fatal(err)
				}
				mustRead(t, e.s, 1, 0, tc.read)
				if !tc.deleted {
					mustRead(t, e.s, 1, 1, []byte("next"))
				}
			}
		})
	}
}

// TestOverwriteRaceInOneBatch: two adds of one new entry with different
// bytes, both queued before either is applied: the first journaled wins,
// the second is refused, and both answers come in journal order.
func TestOverwriteRaceInOneBatch(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	answers := make(chan error, 2)
	for _, p := range []string{"first", "second"} {
		if err := e.s.Add(ctx, 7, 0, -1, []byte(p), false, func(err error) { answers <- err }); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-answers; err != nil {
		t.Fatalf("first add: %v", err)
	}
	if err := <-answers; !errors.Is(err, ErrEntryConflict) {
		t.Fatalf("second add: %v, want ErrEntryConflict", err)
	}
	mustRead(t, e.s, 7, 0, []byte("first"))
	if st, _ := e.s.State(7); st.LastEntryID != 0 {
		t.Fatalf("state %+v", st)
	}
	e.reopen()
	mustRead(t, e.s, 7, 0, []byte("first"))
}

// TestLACClampedToEntriesHeld: a LAC, explicit or piggybacked, is kept
// only up to the highest entry id held, a piggybacked one only below its
// entry (H1), and only up to the highest entry Options.Verify vouched for
// (H2); replay keeps the same value, because the journal records the
// lowered LAC.
func TestLACClampedToEntriesHeld(t *testing.T) {
	const huge = math.MaxInt64
	all := []uint64(nil) // Verify nil: every entry is vouched for
	for _, tc := range []struct {
		name       string
		entries    []uint64 // stored first, each with LAC -1
		verified   []uint64 // entries Verify vouches for; all: no Verify
		lac        int64    // then sent
		add        int64    // -1: WriteLAC(lac); else re-add or add this entry with lac
		want       int64    // LAC afterwards
		clamped    bool     // counted in strata_bookie_lac_clamped_total
		unverified bool     // counted in strata_bookie_lac_unverified_total
	}{
		{name: "explicit, within the entries", entries: []uint64{0, 1, 2, 3}, verified: all, lac: 2, add: -1, want: 2},
		{name: "explicit, at the last entry", entries: []uint64{0, 1, 2, 3}, verified: all, lac: 3, add: -1, want: 3},
		{name: "explicit, inflated", entries: []uint64{0, 1, 2, 3}, verified: all, lac: huge, add: -1, want: 3, clamped: true},
		{name: "explicit, no entries", verified: all, lac: 5, add: -1, want: -1, clamped: true},
		{name: "explicit, none", entries: []uint64{0}, verified: all, lac: -1, add: -1, want: -1},
		{name: "piggybacked on a re-add, inflated", entries: []uint64{0, 1, 2, 3}, verified: all, lac: 1_000_000_000, add: 3, want: 2, clamped: true},
		{name: "piggybacked on a new entry, below it", entries: []uint64{0, 1}, verified: all, lac: 1, add: 2, want: 1},
		{name: "piggybacked on a new entry, above it", entries: []uint64{0, 1}, verified: all, lac: 9, add: 2, want: 1, clamped: true},
		{name: "piggybacked on a new entry, naming it", entries: []uint64{0, 1}, verified: all, lac: 2, add: 2, want: 1, clamped: true},
		{name: "piggybacked after a gap", entries: []uint64{0, 10}, verified: all, lac: 8, add: 10, want: 8},
		{name: "one forged add far ahead", entries: []uint64{0, 1, 2, 3}, verified: []uint64{0, 1, 2, 3},
			lac: 999, add: 1000, want: 3, unverified: true},
		{name: "two forged adds far ahead", entries: []uint64{0, 1, 2, 3, 999}, verified: []uint64{0, 1, 2, 3},
			lac: 999, add: 1000, want: 3, unverified: true},
		{name: "forged, then an explicit LAC", entries: []uint64{0, 1, 2, 3, 999, 1000}, verified: []uint64{0, 1, 2, 3},
			lac: 1000, add: -1, want: 3, unverified: true},
		{name: "a verified add raises it past unverified ones", entries: []uint64{0, 1, 2, 3}, verified: []uint64{4},
			lac: 3, add: 4, want: 3},
		{name: "nothing verified", entries: []uint64{0, 1, 2, 3}, verified: []uint64{}, lac: 2, add: -1, want: -1, unverified: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, func(o *Options) {
				if tc.verified != nil {
					o.Verify = func(_, entryID uint64, _ []byte) bool { return slices.Contains(tc.verified, entryID) }
				}
			})
			payload := func(entry uint64) []byte { return payloadFor(9, 3, entry, 50) }
			for _, entry := range tc.entries {
				mustAdd(t, e.s, 3, entry, -1, payload(entry))
			}
			if tc.add < 0 {
				if err := e.s.WriteLAC(context.Background(), 3, tc.lac); err != nil {
					t.Fatal(err)
				}
			} else {
				mustAdd(t, e.s, 3, uint64(tc.add), tc.lac, payload(uint64(tc.add)))
			}
			check := func(when string) {
				t.Helper()
				if st, _ := e.s.State(3); st.LAC != tc.want {
					t.Fatalf("%s: LAC %d, want %d (state %+v)", when, st.LAC, tc.want, st)
				}
			}
			check("live")
			for _, c := range []struct {
				name    string
				counter prometheus.Counter
				want    bool
			}{
				{"strata_bookie_lac_clamped_total", e.s.metrics.lacClamped, tc.clamped},
				{"strata_bookie_lac_unverified_total", e.s.metrics.lacUnverified, tc.unverified},
			} {
				want := 0.0
				if c.want {
					want = 1
				}
				if got := counterValue(t, c.counter); got != want {
					t.Fatalf("%s = %v, want %v", c.name, got, want)
				}
			}
			crashed := e.crash(false, nil, nil)
			if err := e.restartAfterCrash(crashed, false); err != nil {
				t.Fatal(err)
			}
			check("after a crash and replay")
			e.reopen()
			check("after a clean restart")
		})
	}
}

// TestVerifiedLACReadBack: entries added before Options.Verify could
// vouch for them (their ledger's key not known yet) keep the LAC down,
// until an explicit LAC names one: it is read back and vouched for then
// (H2). After a restart the LAC kept stands for the entries vouched for
// before; the writer's next add, or an explicit LAC read back, raises it.
func TestVerifiedLACReadBack(t *testing.T) {
	var keyKnown atomic.Bool
	e := newEnv(t, func(o *Options) {
		o.Verify = func(_, _ uint64, entry []byte) bool { return keyKnown.Load() && len(entry) > 0 }
	})
	payload := func(entry uint64) []byte { return payloadFor(9, 3, entry, 50) }
	lac := func(want int64, when string) {
		t.Helper()
		if st, _ := e.s.State(3); st.LAC != want {
			t.Fatalf("%s: LAC %d, want %d", when, st.LAC, want)
		}
	}
	writeLAC := func(l int64) {
		t.Helper()
		if err := e.s.WriteLAC(context.Background(), 3, l); err != nil {
			t.Fatal(err)
		}
	}
	for entry := range uint64(5) {
		mustAdd(t, e.s, 3, entry, int64(entry)-1, payload(entry))
	}
	lac(-1, "adds before the key is known")
	writeLAC(4)
	lac(-1, "an explicit LAC before the key is known")
	keyKnown.Store(true)
	writeLAC(4)
	lac(4, "an explicit LAC once the key is known")
	mustAdd(t, e.s, 3, 5, 4, payload(5))
	e.reopen()
	keyKnown.Store(false)
	writeLAC(5)
	lac(4, "after a restart, before the key is known")
	keyKnown.Store(true)
	mustAdd(t, e.s, 3, 6, 5, payload(6))
	lac(5, "the writer's next add")
	writeLAC(6)
	lac(6, "an explicit LAC")
	writeLAC(1000)
	lac(6, "an explicit LAC past the entries")
}
