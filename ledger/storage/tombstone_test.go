package storage

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

// TestZombieAddAfterFencedDelete guards docs/ledgers.md's old known gap "a
// deleted ledger loses its fence on the bookies": a new owner fences ledger
// 7 (recovery), the ledger is deleted, and the old owner, still holding a
// writer, sends a non-recovery add. It must be refused (ErrFenced) and
// never acknowledged, live, after journal replay of the fence and delete
// records, and after a restart where the index (its synced checkpoint
// past the delete) carries the fenced tombstone. Recovery adds are still
// accepted, as on any fenced ledger. A deleted unfenced ledger leaves no
// state, as before: its id takes new adds.
func TestZombieAddAfterFencedDelete(t *testing.T) {
	for _, tc := range []struct {
		name    string
		restart func(e *env)
	}{
		{"live", func(*env) {}},
		{"journal replay", func(e *env) {
			// The index is back at Open's checkpoint, before every record:
			// replay applies the adds, the fence, then the delete.
			if err := e.restartAfterCrash(e.crash(false, nil, nil), false); err != nil {
				e.t.Fatal(err)
			}
		}},
		{"index checkpoint", func(e *env) {
			// Close checkpoints past the delete; the crash keeps only what
			// the index synced, so the index alone carries the tombstone.
			e.reopen()
			if err := e.restartAfterCrash(e.crash(false, nil, nil), false); err != nil {
				e.t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, nil)
			ctx := context.Background()
			for entry := range uint64(3) {
				mustAdd(t, e.s, 7, entry, int64(entry)-1, []byte("old owner"))
			}
			mustAdd(t, e.s, 8, 0, -1, []byte("unfenced"))
			if _, err := e.s.Fence(ctx, 7); err != nil {
				t.Fatal(err)
			}
			for _, ledgerID := range []uint64{7, 8, 7} { // deleting a tombstone keeps it
				if err := e.s.Delete(ctx, ledgerID); err != nil {
					t.Fatal(err)
				}
			}
			tc.restart(e)
			s := e.s

			wantErr(t, add(s, 7, 3, 2, []byte("zombie"), false), ErrFenced)
			wantErr(t, add(s, 7, 0, -1, []byte("zombie"), false), ErrFenced)
			_, err := s.Read(7, 0)
			wantErr(t, err, ErrNoEntry)
			if st, ok := s.State(7); ok || st != (LedgerState{LAC: -1, LastEntryID: -1, Fenced: true}) {
				t.Fatalf("State(7) = %+v %v, want no ledger, fenced", st, ok)
			}
			if got := s.Ledgers(); len(got) != 0 {
				t.Fatalf("Ledgers() = %v: deleted ledgers listed", got)
			}
			// The unfenced ledger is gone, fence-free, as before.
			if st, ok := s.State(8); ok || st.Fenced {
				t.Fatalf("State(8) = %+v %v", st, ok)
			}
			mustAdd(t, s, 8, 0, -1, []byte("new"))

			// GC keeps an unexpired tombstone.
			if _, err := s.GC(ctx); err != nil {
				t.Fatal(err)
			}
			wantErr(t, add(s, 7, 3, 2, []byte("zombie"), false), ErrFenced)

			// A recovering writer or re-replication may still copy entries.
			if err := add(s, 7, 0, -1, []byte("copy"), true); err != nil {
				t.Fatalf("recovery add after delete: %v", err)
			}
			mustRead(t, s, 7, 0, []byte("copy"))
			wantErr(t, add(s, 7, 1, 0, []byte("zombie"), false), ErrFenced)
			if st, ok := s.State(7); !ok || st != (LedgerState{LAC: -1, LastEntryID: 0, Fenced: true}) {
				t.Fatalf("State(7) after a recovery add = %+v %v", st, ok)
			}
			if got := s.Ledgers(); !slices.Equal(got, []uint64{7, 8}) {
				t.Fatalf("Ledgers() = %v, want [7 8]", got)
			}
		})
	}
}

// TestFenceTombstoneExpires: F2. GC forgets a tombstone's fence once it is
// older than FenceTombstoneTTL, not before; the ledger is then unknown here,
// also after a restart. A zero TTL means the default, a negative one never.
func TestFenceTombstoneExpires(t *testing.T) {
	const ttl = time.Hour
	var nowMs atomic.Int64
	nowMs.Store(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli())
	e := newEnv(t, func(o *Options) {
		o.FenceTombstoneTTL = ttl
		o.Now = func() time.Time { return time.UnixMilli(nowMs.Load()) }
	})
	ctx := context.Background()
	for _, ledgerID := range []uint64{1, 2} {
		mustAdd(t, e.s, ledgerID, 0, -1, []byte("x"))
		if _, err := e.s.Fence(ctx, ledgerID); err != nil {
			t.Fatal(err)
		}
		if err := e.s.Delete(ctx, ledgerID); err != nil {
			t.Fatal(err)
		}
		nowMs.Add(time.Minute.Milliseconds()) // ledger 2 is deleted a minute later
	}
	nowMs.Add((ttl - 2*time.Minute).Milliseconds()) // ledger 1's tombstone is exactly ttl old
	if _, err := e.s.GC(ctx); err != nil {
		t.Fatal(err)
	}
	if st, _ := e.s.State(1); st.Fenced {
		t.Fatal("a tombstone of exactly FenceTombstoneTTL kept its fence")
	}
	mustAdd(t, e.s, 1, 0, -1, []byte("new ledger with the old id"))
	wantErr(t, add(e.s, 2, 0, -1, []byte("zombie"), false), ErrFenced)
	if got := e.s.Ledgers(); !slices.Equal(got, []uint64{1}) {
		t.Fatalf("Ledgers() = %v, want [1]", got)
	}

	nowMs.Add(time.Minute.Milliseconds())
	if _, err := e.s.GC(ctx); err != nil {
		t.Fatal(err)
	}
	e.reopen()
	if st, ok := e.s.State(2); ok || st.Fenced {
		t.Fatalf("State(2) after expiry and restart = %+v %v", st, ok)
	}
	mustAdd(t, e.s, 2, 0, -1, []byte("unfenced"))

	if d := (Options{}).withDefaults().FenceTombstoneTTL; d != 7*24*time.Hour {
		t.Fatalf("default FenceTombstoneTTL = %v", d)
	}
	// Negative: kept forever.
	e2 := newEnv(t, func(o *Options) {
		o.FenceTombstoneTTL = -1
		o.Now = func() time.Time { return time.UnixMilli(nowMs.Load()) }
	})
	if _, err := e2.s.Fence(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if err := e2.s.Delete(ctx, 3); err != nil {
		t.Fatal(err)
	}
	nowMs.Add((100 * 365 * 24 * time.Hour).Milliseconds())
	if _, err := e2.s.GC(ctx); err != nil {
		t.Fatal(err)
	}
	wantErr(t, add(e2.s, 3, 0, -1, []byte("zombie"), false), ErrFenced)
}
