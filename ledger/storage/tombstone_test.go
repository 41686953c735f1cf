package storage

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/strata-log/strata/ledger/journal"
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

// TestLostFenceRecordKeepsDeletedLedgerFenced: F1 when the index must be
// rebuilt from a journal that lost the ledger's fence record, to GC (a lost
// index, JOURNAL-TRIMMED) or to corruption (limbo), but still holds its
// delete record. Every ledger replay finds is fenced then; a ledger replay
// finds deleted must keep a fenced tombstone too, or the zombie writer that
// fence kept out is acknowledged again.
func TestLostFenceRecordKeepsDeletedLedgerFenced(t *testing.T) {
	ctx := context.Background()
	t.Run("index lost after GC", func(t *testing.T) {
		e := newEnv(t, func(o *Options) {
			o.JournalMaxFileBytes = 4 << 10
			o.JournalPreallocateBytes = 4 << 10
			o.CompactBelowLiveRatio = 0.99
		})
		for entry := range uint64(20) {
			mustAdd(t, e.s, 1, entry, int64(entry)-1, payloadFor(5, 1, entry, 300))
		}
		if _, err := e.s.Fence(ctx, 1); err != nil {
			t.Fatal(err)
		}
		fenceFile := e.s.j.Position().File
		for entry := range uint64(30) { // later files
			mustAdd(t, e.s, 2, entry, int64(entry)-1, payloadFor(5, 2, entry, 300))
		}
		if err := e.s.Delete(ctx, 1); err != nil {
			t.Fatal(err)
		}
		deleteFile := e.s.j.Position().File
		if _, err := e.s.GC(ctx); err != nil {
			t.Fatal(err)
		}
		files := map[uint64]bool{}
		for _, f := range e.s.j.Files() {
			files[f.Seq] = true
		}
		if files[fenceFile] || !files[deleteFile] {
			t.Fatalf("setup: fence in %d, delete in %d, files left %v", fenceFile, deleteFile, files)
		}
		if err := e.restartAfterCrash(e.crash(false, nil, nil), true); err != nil { // the index is gone
			t.Fatal(err)
		}
		if !e.s.rebuilt {
			t.Fatal("setup: index not rebuilt")
		}
		wantErr(t, add(e.s, 1, 20, 19, []byte("zombie"), false), ErrFenced)
		if st, ok := e.s.State(1); ok || !st.Fenced {
			t.Fatalf("State(1) = %+v %v, want no ledger, fenced", st, ok)
		}
	})
	t.Run("fence record corrupt", func(t *testing.T) {
		e := newEnv(t, nil)
		for entry := range uint64(3) {
			mustAdd(t, e.s, 1, entry, int64(entry)-1, []byte("old owner"))
		}
		if _, err := e.s.Fence(ctx, 1); err != nil {
			t.Fatal(err)
		}
		end := e.s.j.Position()
		if err := e.s.Delete(ctx, 1); err != nil {
			t.Fatal(err)
		}
		mustAdd(t, e.s, 2, 0, -1, []byte("later group"))
		// Crash: the index goes back to Open's checkpoint; the fence record,
		// synced and acknowledged, is damaged meanwhile.
		crashed := e.crash(false, nil, nil)
		flipByte(t, crashed, journalFile(end.File), end.Offset-journal.RecordHeaderSize+20)
		if err := e.restartAfterCrash(crashed, false); err != nil {
			t.Fatal(err)
		}
		if !e.s.Limbo() {
			t.Fatal("setup: not in limbo")
		}
		wantErr(t, add(e.s, 1, 3, 2, []byte("zombie"), false), ErrFenced)
		if st, ok := e.s.State(1); ok || !st.Fenced {
			t.Fatalf("State(1) = %+v %v, want no ledger, fenced", st, ok)
		}
	})
}
