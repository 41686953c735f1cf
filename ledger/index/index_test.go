package index

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/cockroachdb/pebble"
	pebblevfs "github.com/cockroachdb/pebble/vfs"
	"go.uber.org/goleak"

	"github.com/strata-log/strata/internal/corruption"
	"github.com/strata-log/strata/ledger/journal"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func openMem(t *testing.T, fs pebblevfs.FS) *Index {
	t.Helper()
	ix, err := Open(Options{Dir: "/index", FS: fs, CacheBytes: 1 << 20, MemTableBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	return ix
}

func loc(file uint64, off int64, n uint32) journal.Location {
	return journal.Location{File: file, Offset: off, Length: n}
}

func commit(t *testing.T, ix *Index, fn func(b *Batch) error) {
	t.Helper()
	b, err := ix.NewBatch()
	if err != nil {
		t.Fatal(err)
	}
	if err := fn(b); err != nil {
		b.Close()
		t.Fatal(err)
	}
	if err := b.Commit(false); err != nil {
		t.Fatal(err)
	}
}

func mustState(t *testing.T, ix *Index, ledgerID uint64) (LedgerState, bool) {
	t.Helper()
	st, ok, err := ix.State(ledgerID)
	if err != nil {
		t.Fatal(err)
	}
	return st, ok
}

func TestAddReadStateUsage(t *testing.T) {
	ix := openMem(t, pebblevfs.NewMem())
	defer ix.Close()
	commit(t, ix, func(b *Batch) error {
		for e := range uint64(3) {
			if _, err := b.Add(7, e, int64(e)-1, loc(1, 24+int64(e)*100, 100)); err != nil {
				return err
			}
		}
		_, err := b.Add(8, 0, -1, loc(2, 24, 50))
		return err
	})
	got, ok, err := ix.Get(7, 1)
	if err != nil || !ok || got != loc(1, 124, 100) {
		t.Fatalf("Get(7,1) = %+v %v %v", got, ok, err)
	}
	if _, ok, _ := ix.Get(7, 3); ok {
		t.Fatal("Get(7,3) found")
	}
	if st, ok := mustState(t, ix, 7); !ok || st != (LedgerState{LAC: 1, LastEntryID: 2}) {
		t.Fatalf("state 7 = %+v %v", st, ok)
	}
	if u := ix.FileUsage(); u[1] != (Usage{300, 3}) || u[2] != (Usage{50, 1}) {
		t.Fatalf("usage = %+v", u)
	}
	// Overwrite entry 1 in file 2: file 1 loses it.
	commit(t, ix, func(b *Batch) error {
		_, err := b.Add(7, 1, 0, loc(2, 74, 100))
		return err
	})
	if u := ix.FileUsage(); u[1] != (Usage{200, 2}) || u[2] != (Usage{150, 2}) {
		t.Fatalf("usage after overwrite = %+v", u)
	}
	if l := ix.FileLedgers(2); len(l) != 2 || l[7] != (Usage{100, 1}) || l[8] != (Usage{50, 1}) {
		t.Fatalf("FileLedgers(2) = %v", l)
	}
	// Re-applying the same add changes nothing.
	commit(t, ix, func(b *Batch) error {
		_, err := b.Add(7, 1, 0, loc(2, 74, 100))
		return err
	})
	if u := ix.FileUsage(); u[1] != (Usage{200, 2}) || u[2] != (Usage{150, 2}) {
		t.Fatalf("usage after re-apply = %+v", u)
	}
	es, err := ix.Entries(7, 0, math.MaxUint64, 10)
	if err != nil || len(es) != 3 || es[1].Location != loc(2, 74, 100) {
		t.Fatalf("Entries = %+v %v", es, err)
	}
	es, _ = ix.Entries(7, 1, 1, 10)
	if len(es) != 1 || es[0].EntryID != 1 {
		t.Fatalf("Entries(1,1) = %+v", es)
	}
}

func TestDeleteRangeAndRecreateInOneBatch(t *testing.T) {
	ix := openMem(t, pebblevfs.NewMem())
	defer ix.Close()
	commit(t, ix, func(b *Batch) error {
		for e := range uint64(100) {
			if _, err := b.Add(math.MaxUint64, e, -1, loc(1, 24+int64(e)*60, 60)); err != nil {
				return err
			}
		}
		_, err := b.Add(5, 0, -1, loc(1, 24+100*60, 60))
		return err
	})
	commit(t, ix, func(b *Batch) error {
		if _, err := b.Fence(math.MaxUint64); err != nil {
			return err
		}
		if _, err := b.Delete(math.MaxUint64, 1000); err != nil {
			return err
		}
		// Recreated after the delete, in the same batch: it must survive.
		_, err := b.Add(math.MaxUint64, 3, 2, loc(2, 24, 60))
		return err
	})
	es, err := ix.Entries(math.MaxUint64, 0, math.MaxUint64, 1000)
	if err != nil || len(es) != 1 || es[0].EntryID != 3 {
		t.Fatalf("entries after delete+add = %+v %v", es, err)
	}
	// The fence outlived the delete (invariant 4); the re-add makes the
	// tombstone a fenced ledger with entries again.
	if st, ok := mustState(t, ix, math.MaxUint64); !ok || st != (LedgerState{Fenced: true, LAC: 2, LastEntryID: 3}) {
		t.Fatalf("state = %+v %v", st, ok)
	}
	if u := ix.FileUsage(); u[1] != (Usage{60, 1}) || u[2] != (Usage{60, 1}) {
		t.Fatalf("usage = %+v", u)
	}
	// Ledger 5 (just below in key order) is untouched.
	if _, ok, _ := ix.Get(5, 0); !ok {
		t.Fatal("ledger 5 lost its entry")
	}
	commit(t, ix, func(b *Batch) error { _, err := b.Delete(math.MaxUint64, 2000); return err })
	want := LedgerState{Fenced: true, LAC: -1, LastEntryID: -1, Tombstone: true, DeletedUnixMs: 2000}
	if st, ok := mustState(t, ix, math.MaxUint64); !ok || st != want {
		t.Fatalf("state after delete = %+v %v, want the fenced tombstone %+v", st, ok, want)
	}
	if es, _ := ix.Entries(math.MaxUint64, 0, math.MaxUint64, 10); len(es) != 0 {
		t.Fatalf("entries after delete = %+v", es)
	}
	if u := ix.FileUsage(); len(u) != 1 || u[1] != (Usage{60, 1}) {
		t.Fatalf("usage after delete = %+v", u)
	}
}

// TestFencedTombstone: invariant 4. A delete of a fenced ledger keeps a
// fenced tombstone (no entries, no usage, LAC and last entry -1) that
// survives a reopen; deleting it again keeps it as it is; a re-add makes it
// a fenced ledger again; a delete of an unfenced ledger leaves no state;
// ExpireTombstone removes only tombstones deleted early enough.
func TestFencedTombstone(t *testing.T) {
	fs := pebblevfs.NewMem()
	ix := openMem(t, fs)
	commit(t, ix, func(b *Batch) error {
		for _, ledgerID := range []uint64{1, 2, 3} {
			for e := range uint64(3) {
				if _, err := b.Add(ledgerID, e, int64(e)-1, loc(1, 24+int64(ledgerID*10+e)*100, 100)); err != nil {
					return err
				}
			}
		}
		if _, err := b.Fence(1); err != nil {
			return err
		}
		_, err := b.Fence(3)
		return err
	})
	var got [4]LedgerState
	commit(t, ix, func(b *Batch) error {
		for _, ledgerID := range []uint64{1, 2, 3} {
			var err error
			if got[ledgerID], err = b.Delete(ledgerID, 5000); err != nil {
				return err
			}
		}
		return nil
	})
	tomb := func(at int64) LedgerState {
		return LedgerState{Fenced: true, LAC: -1, LastEntryID: -1, Tombstone: true, DeletedUnixMs: at}
	}
	if got[1] != tomb(5000) || got[2] != emptyState {
		t.Fatalf("Delete returned %+v and %+v", got[1], got[2])
	}
	check := func(when string) {
		t.Helper()
		for _, ledgerID := range []uint64{1, 3} {
			if st, ok := mustState(t, ix, ledgerID); !ok || st != tomb(5000) {
				t.Fatalf("%s: state of fenced ledger %d = %+v %v, want a tombstone", when, ledgerID, st, ok)
			}
		}
		if st, ok := mustState(t, ix, 2); ok {
			t.Fatalf("%s: unfenced ledger 2 kept state %+v", when, st)
		}
		for _, ledgerID := range []uint64{1, 2, 3} {
			if es, _ := ix.Entries(ledgerID, 0, math.MaxUint64, 10); len(es) != 0 {
				t.Fatalf("%s: ledger %d kept entries %+v", when, ledgerID, es)
			}
		}
		if u := ix.FileUsage(); len(u) != 0 {
			t.Fatalf("%s: usage %+v", when, u)
		}
		if ls, err := ix.Ledgers(); err != nil || len(ls) != 2 || ls[1] != tomb(5000) {
			t.Fatalf("%s: Ledgers() = %+v %v", when, ls, err)
		}
	}
	check("after delete")
	ix.Close()
	ix = openMem(t, fs)
	defer ix.Close()
	check("after reopen")

	// Deleting, fencing or setting the LAC of a tombstone changes nothing.
	commit(t, ix, func(b *Batch) error {
		if _, err := b.Delete(1, 9000); err != nil {
			return err
		}
		if _, err := b.Fence(1); err != nil {
			return err
		}
		_, err := b.SetLAC(1, -1)
		return err
	})
	check("after a second delete")

	// A recovery add (the storage engine's rule) turns it back into a
	// fenced ledger; a later delete leaves a new tombstone.
	commit(t, ix, func(b *Batch) error {
		_, err := b.Add(3, 0, -1, loc(2, 24, 100))
		return err
	})
	if st, ok := mustState(t, ix, 3); !ok || st != (LedgerState{Fenced: true, LAC: -1, LastEntryID: 0}) {
		t.Fatalf("state after re-add = %+v %v", st, ok)
	}
	commit(t, ix, func(b *Batch) error { _, err := b.Delete(3, 7000); return err })
	if st, _ := mustState(t, ix, 3); st != tomb(7000) {
		t.Fatalf("state after the second delete = %+v", st)
	}

	// Expiry: only tombstones deleted at or before the bound go.
	var expired [4]bool
	commit(t, ix, func(b *Batch) error {
		for _, ledgerID := range []uint64{1, 2, 3} {
			var err error
			if expired[ledgerID], err = b.ExpireTombstone(ledgerID, 6000); err != nil {
				return err
			}
		}
		return nil
	})
	if expired != [4]bool{false, true, false, false} {
		t.Fatalf("expired = %v, want only ledger 1", expired)
	}
	if _, ok := mustState(t, ix, 1); ok {
		t.Fatal("expired tombstone kept")
	}
	if st, _ := mustState(t, ix, 3); st != tomb(7000) {
		t.Fatalf("younger tombstone = %+v", st)
	}
}

func TestRelocate(t *testing.T) {
	ix := openMem(t, pebblevfs.NewMem())
	defer ix.Close()
	commit(t, ix, func(b *Batch) error {
		_, err := b.Add(1, 0, -1, loc(1, 24, 80))
		return err
	})
	var moved, stale bool
	commit(t, ix, func(b *Batch) error {
		var err error
		if moved, err = b.Relocate(1, 0, loc(1, 24, 80), loc(3, 24, 80)); err != nil {
			return err
		}
		stale, err = b.Relocate(1, 0, loc(1, 24, 80), loc(3, 104, 80))
		return err
	})
	if !moved || stale {
		t.Fatalf("moved %v stale %v", moved, stale)
	}
	if u := ix.FileUsage(); len(u) != 1 || u[3] != (Usage{80, 1}) {
		t.Fatalf("usage = %+v", u)
	}
}

func TestFenceLACCheckpointLimboPersist(t *testing.T) {
	fs := pebblevfs.NewMem()
	ix := openMem(t, fs)
	if _, ok, _ := ix.Checkpoint(); ok {
		t.Fatal("new index has a checkpoint")
	}
	commit(t, ix, func(b *Batch) error {
		if _, err := b.Fence(9); err != nil {
			return err
		}
		_, err := b.SetLAC(10, 4)
		return err
	})
	if err := ix.SetCheckpoint(journal.Position{File: 3, Offset: 99}); err != nil {
		t.Fatal(err)
	}
	b, err := ix.NewBatch()
	if err != nil {
		t.Fatal(err)
	}
	if err := b.SetLimbo(Limbo{SinceUnixMs: 12345, CorruptRanges: 2}); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(true); err != nil {
		t.Fatal(err)
	}
	if err := ix.Close(); err != nil {
		t.Fatal(err)
	}
	if err := ix.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("second Close = %v", err)
	}
	if _, _, err := ix.Get(1, 1); !errors.Is(err, ErrClosed) {
		t.Fatalf("Get after Close = %v", err)
	}

	ix = openMem(t, fs)
	defer ix.Close()
	if st, ok := mustState(t, ix, 9); !ok || st != (LedgerState{Fenced: true, LAC: -1, LastEntryID: -1}) {
		t.Fatalf("state 9 = %+v", st)
	}
	if st, _ := mustState(t, ix, 10); st != (LedgerState{LAC: 4, LastEntryID: -1}) {
		t.Fatalf("state 10 = %+v", st)
	}
	if pos, ok, _ := ix.Checkpoint(); !ok || pos != (journal.Position{File: 3, Offset: 99}) {
		t.Fatalf("checkpoint = %+v %v", pos, ok)
	}
	if l, ok, _ := ix.Limbo(); !ok || l.CorruptRanges != 2 || l.SinceUnixMs != 12345 {
		t.Fatalf("limbo = %+v %v", l, ok)
	}
	if err := ix.ClearLimbo(); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := ix.Limbo(); ok {
		t.Fatal("limbo not cleared")
	}
	all, err := ix.Ledgers()
	if err != nil || len(all) != 2 {
		t.Fatalf("Ledgers = %v %v", all, err)
	}
}

func TestInvalid(t *testing.T) {
	ix := openMem(t, pebblevfs.NewMem())
	defer ix.Close()
	b, err := ix.NewBatch()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := b.Add(1, math.MaxInt64+1, -1, loc(1, 24, 50)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("huge entry id: %v", err)
	}
	if _, err := b.Add(1, 0, -2, loc(1, 24, 50)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad lac: %v", err)
	}
	if _, err := b.Add(1, 0, -1, loc(0, 24, 50)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad location: %v", err)
	}
}

// A stored key or value that is not what the index writes fails with
// ErrCorrupt, marked as corruption, and is never decoded into an answer.
func TestCorruptValues(t *testing.T) {
	ix := openMem(t, pebblevfs.NewMem())
	defer ix.Close()
	commit(t, ix, func(b *Batch) error {
		_, err := b.Add(1, 0, -1, loc(1, 24, 50))
		return err
	})
	for key, value := range map[string][]byte{
		string(entryKey(1, 0)): {0x01, 0x02, 0x03},
		string(ledgerKey(2)):   {0x09},
	} {
		if err := ix.db.Set([]byte(key), value, pebble.Sync); err != nil {
			t.Fatal(err)
		}
	}
	_, _, err := ix.Get(1, 0)
	if !errors.Is(err, ErrCorrupt) || !corruption.Is(err) {
		t.Errorf("Get of a 3-byte location: %v, want ErrCorrupt, marked as corruption", err)
	}
	_, _, err = ix.State(2)
	if !errors.Is(err, ErrCorrupt) || !corruption.Is(err) {
		t.Errorf("State of a 1-byte value: %v, want ErrCorrupt, marked as corruption", err)
	}
	if _, ok, err := ix.State(1); err != nil || !ok {
		t.Errorf("State of the sound ledger beside them: %v, %v", ok, err)
	}
}

// TestCrashPrefixReplay is the property the storage engine relies on: from
// the state after any synced prefix of batches, re-applying the records
// since that point yields the same entries, states and accounting as never
// crashing.
func TestCrashPrefixReplay(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 1))
			type rec struct {
				op        int // 0 add, 1 fence, 2 lac, 3 delete
				ledger    uint64
				entry     uint64
				lac       int64
				loc       journal.Location
				batchEnds bool
			}
			var recs []rec
			off := map[uint64]int64{}
			file := uint64(1)
			for i := range 300 {
				if r.IntN(50) == 0 {
					file++
				}
				o := rec{ledger: uint64(r.IntN(4)), op: []int{0, 0, 0, 0, 0, 0, 1, 2, 3}[r.IntN(9)]}
				o.entry = uint64(r.IntN(20))
				o.lac = int64(r.IntN(20)) - 1
				n := uint32(44 + r.IntN(100))
				if off[file] == 0 {
					off[file] = 24
				}
				o.loc = loc(file, off[file], n)
				off[file] += int64(n)
				o.batchEnds = r.IntN(5) == 0 || i == 299
				recs = append(recs, o)
			}
			apply := func(b *Batch, o rec) {
				var err error
				switch o.op {
				case 0:
					_, err = b.Add(o.ledger, o.entry, o.lac, o.loc)
				case 1:
					_, err = b.Fence(o.ledger)
				case 2:
					_, err = b.SetLAC(o.ledger, o.lac)
				case 3:
					_, err = b.Delete(o.ledger, int64(o.entry)) // any time the record fixes
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			run := func(ix *Index, from int, cpAt, crashAt int, strict *pebblevfs.MemFS) {
				b, _ := ix.NewBatch()
				for i := from; i < len(recs); i++ {
					apply(b, recs[i])
					if recs[i].batchEnds {
						// A synced batch at the crash point: the index then
						// holds more than its checkpoint, as after a crash
						// with later batches on disk.
						if err := b.Commit(i == crashAt); err != nil {
							t.Fatal(err)
						}
						if i == cpAt {
							if err := ix.SetCheckpoint(journal.Position{File: 1, Offset: int64(i + 1)}); err != nil {
								t.Fatal(err)
							}
						}
						if i == crashAt {
							strict.SetIgnoreSyncs(true)
						}
						b, _ = ix.NewBatch()
					}
				}
				b.Close()
			}
			snapshot := func(ix *Index) string {
				out := fmt.Sprint(ix.FileUsage())
				for l := range uint64(4) {
					st, ok := mustState(t, ix, l)
					es, _ := ix.Entries(l, 0, math.MaxUint64, 1000)
					out += fmt.Sprint(l, st, ok, es)
				}
				return out
			}
			// Reference: no crash.
			ref := openMem(t, pebblevfs.NewMem())
			run(ref, 0, -1, -1, nil)
			want := snapshot(ref)
			ref.Close()

			// Crash somewhere after a checkpoint, reopen at the synced state.
			var ends []int
			for i, o := range recs {
				if o.batchEnds {
					ends = append(ends, i)
				}
			}
			cpAt := ends[r.IntN(len(ends))]
			crashAt := ends[r.IntN(len(ends))]
			if crashAt < cpAt {
				cpAt, crashAt = crashAt, cpAt
			}
			fs := pebblevfs.NewStrictMem()
			ix := openMem(t, fs)
			run(ix, 0, cpAt, crashAt, fs)
			ix.Close()
			fs.ResetToSyncedState()
			fs.SetIgnoreSyncs(false)
			ix = openMem(t, fs)
			defer ix.Close()
			pos, ok, err := ix.Checkpoint()
			if err != nil || !ok || pos.Offset != int64(cpAt+1) {
				t.Fatalf("checkpoint after crash = %+v %v %v, want %d", pos, ok, err, cpAt+1)
			}
			run(ix, int(pos.Offset), -1, -1, nil)
			if got := snapshot(ix); got != want {
				t.Fatalf("state after crash+replay differs:\n got %s\nwant %s", got, want)
			}
		})
	}
}
