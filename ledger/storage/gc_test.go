package storage

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/strata-log/strata/internal/corruption"
	"github.com/strata-log/strata/internal/ctxtime"
	"github.com/strata-log/strata/internal/testwait"
	"github.com/strata-log/strata/ledger/journal"
	"github.com/strata-log/strata/vfs"
)

func journalBytes(s *Storage) (total int64, files int) {
	for _, f := range s.j.Files() {
		total += f.Size
		files++
	}
	return total, files
}

// gcEnv writes, into small journal files, ledger 100 alone (whole files
// that die with it) and then ledgers 1..6 interleaved (files that end half
// dead when 1..3 go).
func gcEnv(t *testing.T, m *Metrics, more ...func(*Options)) *env {
	e := newEnv(t, func(o *Options) {
		o.JournalMaxFileBytes = 4 << 10
		o.JournalPreallocateBytes = 4 << 10
		// Byte-exact live ratios: in the aligned format every lone add
		// would be a 4 KiB group, mostly padding, which GC compacts.
		o.JournalBufferedWrites = true
		o.CompactBelowLiveRatio = 0.6
		o.Metrics = m
		for _, f := range more {
			f(o)
		}
	})
	for entry := range uint64(60) {
		mustAdd(t, e.s, 100, entry, -1, payloadFor(3, 100, entry, 300))
	}
	for entry := range uint64(40) {
		for ledgerID := uint64(1); ledgerID <= 6; ledgerID++ {
			mustAdd(t, e.s, ledgerID, entry, int64(entry)-1, payloadFor(3, ledgerID, entry, 300))
		}
	}
	return e
}

// timedGC runs one GC and returns its result and duration.
func timedGC(t *testing.T, s *Storage) (GCResult, time.Duration) {
	t.Helper()
	start := time.Now()
	res, err := s.GC(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return res, time.Since(start)
}

func checkLive(t *testing.T, s *Storage, ledgers []uint64, entries uint64) {
	t.Helper()
	for _, ledgerID := range ledgers {
		for entry := range entries {
			mustRead(t, s, ledgerID, entry, payloadFor(3, ledgerID, entry, 300))
		}
		if st, ok := s.State(ledgerID); !ok || st.LastEntryID != int64(entries)-1 || st.LAC != int64(entries)-2 {
			t.Fatalf("ledger %d state %+v %v", ledgerID, st, ok)
		}
	}
}

func TestGCRemovesDeadFilesAndCompacts(t *testing.T) {
	m := NewMetrics()
	e := gcEnv(t, m)
	s := e.s
	ctx := context.Background()
	before, filesBefore := journalBytes(s)
	// Nothing dead yet; live ratio ~100%: nothing to do.
	if res, err := s.GC(ctx); err != nil || res != (GCResult{}) {
		t.Fatalf("GC with nothing dead = %+v %v", res, err)
	}
	for _, ledgerID := range []uint64{100, 1, 2, 3} {
		if err := s.Delete(ctx, ledgerID); err != nil {
			t.Fatal(err)
		}
	}
	res, err := s.GC(ctx)
	if err != nil {
		t.Fatal(err)
	}
	after, filesAfter := journalBytes(s)
	t.Logf("GC: %+v; journal %d bytes in %d files -> %d bytes in %d files", res, before, filesBefore, after, filesAfter)
	if res.RemovedFiles == 0 || res.CompactedFiles == 0 || res.ReclaimedBytes <= 0 {
		t.Fatalf("GC = %+v: want whole files removed and others compacted", res)
	}
	if after >= before-res.ReclaimedBytes/2 {
		t.Fatalf("journal %d -> %d bytes", before, after)
	}
	if got := counterValue(t, m.gcReclaimedBytes); got != float64(res.ReclaimedBytes) {
		t.Fatalf("reclaimed metric %v, result %d", got, res.ReclaimedBytes)
	}
	if counterValue(t, m.compactedFiles) != float64(res.CompactedFiles) || counterValue(t, m.compactedBytes) == 0 {
		t.Fatal("compaction metrics not updated")
	}
	live := []uint64{4, 5, 6}
	checkLive(t, s, live, 40)
	for _, ledgerID := range []uint64{100, 1} {
		if _, err := s.Read(ledgerID, 3); !errors.Is(err, ErrNoEntry) {
			t.Fatalf("deleted ledger %d: %v", ledgerID, err)
		}
	}
	// Every live byte is accounted in a file that exists.
	have := map[uint64]bool{}
	for _, f := range s.j.Files() {
		have[f.Seq] = true
	}
	for file := range s.ix.FileUsage() {
		if !have[file] {
			t.Fatalf("index points at removed file %d", file)
		}
	}
	// A second run finds nothing more to do.
	if res, err := s.GC(ctx); err != nil || res.CompactedFiles != 0 {
		t.Fatalf("second GC = %+v %v", res, err)
	}

	e.reopen()
	checkLive(t, e.s, live, 40)
	// And after a crash (index back to its synced checkpoint).
	crashed := e.crash(true, rand.New(rand.NewPCG(1, 2)), nil)
	if err := e.restartAfterCrash(crashed, false); err != nil {
		t.Fatal(err)
	}
	checkLive(t, e.s, live, 40)
	if e.s.Limbo() {
		t.Fatal("limbo after a clean crash")
	}
}

// A live entry that compaction cannot read (corruption, whichever layer
// finds it) keeps its file and sets it aside, counted once under
// source="compaction"; the run goes on with the other files, and the next
// run does not try the file again (BookKeeper #4596).
func TestGCSetsAsideAFileWithACorruptLiveEntry(t *testing.T) {
	m := NewMetrics()
	e := gcEnv(t, m)
	s := e.s
	ctx := context.Background()
	for _, ledgerID := range []uint64{100, 1, 2, 3} {
		if err := s.Delete(ctx, ledgerID); err != nil {
			t.Fatal(err)
		}
	}
	bad := locationOf(t, s, 4, 0)
	flipByte(t, e.mem, journalFile(bad.File), bad.Offset+journal.RecordHeaderSize+3)
	res, err := s.GC(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.CompactedFiles == 0 {
		t.Fatalf("GC = %+v: the other half-dead files were not compacted", res)
	}
	if n := counterValue(t, m.corruptions.WithLabelValues(corruptionCompaction)); n != 1 {
		t.Fatalf("compaction corruption count = %v, want 1", n)
	}
	kept := false
	for _, f := range s.j.Files() {
		kept = kept || f.Seq == bad.File
	}
	if !kept {
		t.Fatalf("journal file %016x with the corrupt live entry was removed", bad.File)
	}
	if _, err := s.Read(4, 0); !errors.Is(err, ErrCorrupt) || !corruption.Is(err) {
		t.Fatalf("read of the corrupt entry: %v, want ErrCorrupt, marked as corruption", err)
	}
	if _, err := s.GC(ctx); err != nil {
		t.Fatal(err)
	}
	if n := counterValue(t, m.corruptions.WithLabelValues(corruptionCompaction)); n != 1 {
		t.Fatalf("compaction corruption count after a second run = %v, want 1 (the file is set aside)", n)
	}
}

// TestGCCompactionIsPaced: a run copies no faster than
// CompactMaxBytesPerSecond (its pacer may run ahead by PacerMinSleep).
func TestGCCompactionIsPaced(t *testing.T) {
	const rate = 32 << 10
	m := NewMetrics()
	e := gcEnv(t, m, func(o *Options) { o.CompactMaxBytesPerSecond = rate })
	ctx := context.Background()
	for _, ledgerID := range []uint64{100, 1, 2, 3} {
		if err := e.s.Delete(ctx, ledgerID); err != nil {
			t.Fatal(err)
		}
	}
	res, took := timedGC(t, e.s)
	copied := counterValue(t, m.compactedBytes)
	if res.CompactedFiles == 0 || copied == 0 {
		t.Fatalf("GC = %+v, %v bytes copied: want files compacted", res, copied)
	}
	if least := time.Duration(copied/rate*float64(time.Second)) - ctxtime.PacerMinSleep; took < least {
		t.Fatalf("GC copied %v bytes in %s: faster than %d B/s (at least %s)", copied, took, rate, least)
	}
	checkLive(t, e.s, []uint64{4, 5, 6}, 40)
}

func TestGCKeepsTheCurrentFile(t *testing.T) {
	// 64 KiB files: everything below stays in file 1 (packed format; in
	// the aligned one each add is a 4 KiB group).
	e := newEnv(t, func(o *Options) { o.JournalBufferedWrites = true })
	for entry := range uint64(20) {
		mustAdd(t, e.s, 1, entry, -1, make([]byte, 300))
	}
	if err := e.s.Delete(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	res, err := e.s.GC(context.Background())
	if err != nil || res.RemovedFiles != 0 {
		t.Fatalf("GC = %+v %v", res, err)
	}
	if _, files := journalBytes(e.s); files != 1 {
		t.Fatalf("%d journal files", files)
	}
	// After a restart the journal moves to a new file and the old one,
	// now before the checkpoint and dead, goes.
	e.reopen()
	if res, err := e.s.GC(context.Background()); err != nil || res.RemovedFiles != 1 {
		t.Fatalf("GC after restart = %+v %v", res, err)
	}
	for _, f := range e.s.j.Files() {
		if f.Seq < e.s.checkpointed.File {
			t.Fatalf("dead file %d before the checkpoint survived", f.Seq)
		}
	}
}

// TestGCConcurrentWithWrites runs GC again and again while ledgers are
// written, rewritten by recovery adds, fenced and deleted; then everything
// acknowledged and not deleted must read back, also after a restart.
func TestGCConcurrentWithWrites(t *testing.T) {
	e := newEnv(t, func(o *Options) {
		o.JournalMaxFileBytes = 4 << 10
		o.JournalPreallocateBytes = 4 << 10
		o.CompactBelowLiveRatio = 0.9
	})
	s := e.s
	ctx := context.Background()
	const ledgers, entries = 8, 120
	var wg sync.WaitGroup
	stopGC := make(chan struct{})
	gcDone := make(chan struct{})
	go func() {
		defer close(gcDone)
		for {
			select {
			case <-stopGC:
				return
			default:
			}
			if _, err := s.GC(ctx); err != nil {
				t.Errorf("GC: %v", err)
				return
			}
		}
	}()
	for ledgerID := uint64(1); ledgerID <= ledgers; ledgerID++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for entry := range uint64(entries) {
				if err := add(s, ledgerID, entry, int64(entry)-1, payloadFor(3, ledgerID, entry, 300), false); err != nil {
					t.Errorf("add: %v", err)
					return
				}
				if entry%10 == 9 { // recovery rewrites of earlier entries
					back := entry - uint64(entry%7)
					if err := add(s, ledgerID, back, int64(back)-1, payloadFor(3, ledgerID, back, 300), true); err != nil {
						t.Errorf("recovery add: %v", err)
						return
					}
				}
				if ledgerID%4 == 0 && entry == entries/2 {
					if err := s.Delete(ctx, ledgerID); err != nil {
						t.Errorf("delete: %v", err)
					}
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stopGC)
	<-gcDone
	if _, err := s.GC(ctx); err != nil {
		t.Fatal(err)
	}
	check := func(s *Storage) {
		t.Helper()
		for ledgerID := uint64(1); ledgerID <= ledgers; ledgerID++ {
			if ledgerID%4 == 0 {
				if _, ok := s.State(ledgerID); ok {
					t.Fatalf("deleted ledger %d has state", ledgerID)
				}
				continue
			}
			for entry := range uint64(entries) {
				mustRead(t, s, ledgerID, entry, payloadFor(3, ledgerID, entry, 300))
			}
		}
	}
	check(s)
	e.reopen()
	check(e.s)
}

func TestIndexLostAfterGCFencesEverything(t *testing.T) {
	e := gcEnv(t, nil)
	ctx := context.Background()
	for _, ledgerID := range []uint64{100, 1, 2, 3} {
		if err := e.s.Delete(ctx, ledgerID); err != nil {
			t.Fatal(err)
		}
	}
	if res, err := e.s.GC(ctx); err != nil || res.RemovedFiles == 0 {
		t.Fatalf("GC = %+v %v", res, err)
	}
	crashed := e.crash(false, nil, nil)
	if err := e.restartAfterCrash(crashed, true); err != nil { // the index is gone
		t.Fatal(err)
	}
	live := []uint64{4, 5, 6}
	checkLive(t, e.s, live, 40)
	// Fence records may have been in removed files: every ledger is fenced.
	for _, ledgerID := range live {
		wantErr(t, add(e.s, ledgerID, 40, -1, []byte("x"), false), ErrFenced)
	}
}

// TestCompactionNeverCopiesPastASupersedingRecord: while a delete of a
// ledger (or a rewrite of one of its entries) is journaled but not yet
// applied, compaction must not journal a copy of that ledger's entries
// after it, or replay would bring the deleted (or replaced) data back.
func TestCompactionNeverCopiesPastASupersedingRecord(t *testing.T) {
	for _, tc := range []string{"delete", "rewrite"} {
		t.Run(tc, func(t *testing.T) {
			e := newEnv(t, func(o *Options) {
				o.JournalMaxFileBytes = 4 << 10
				o.JournalPreallocateBytes = 4 << 10
			})
			s := e.s
			ctx := context.Background()
			for entry := range uint64(30) {
				mustAdd(t, s, 1, entry, -1, payloadFor(4, 1, entry, 100))
				for k := range uint64(3) {
					mustAdd(t, s, 3, entry*3+k, -1, payloadFor(4, 3, entry*3+k, 100))
				}
			}
			if err := s.Delete(ctx, 3); err != nil {
				t.Fatal(err)
			}
			// Hold the journal's next sync: the superseding record is
			// written but neither durable nor applied.
			reached, release := make(chan struct{}), make(chan struct{})
			var once sync.Once
			e.mem.InjectError(func(op vfs.Op, name string) error {
				if op == vfs.OpSync && strings.HasSuffix(name, ".journal") {
					once.Do(func() { close(reached); <-release })
				}
				return nil
			})
			superseded := make(chan error, 1)
			go func() {
				if tc == "delete" {
					superseded <- s.Delete(ctx, 1)
				} else {
					superseded <- add(s, 1, 0, -1, []byte("rewritten"), true)
				}
			}()
			<-reached
			gcDone := make(chan error, 1)
			go func() {
				_, err := s.GC(ctx)
				gcDone <- err
			}()
			// Either GC finishes (it skipped ledger 1) or it queued copies
			// behind the held sync; release the sync in both cases.
			testwait.Until(t, waitTimeout, "GC to finish or queue copies", func() bool {
				select {
				case err := <-gcDone:
					gcDone <- err
					return true
				default:
				}
				s.mu.Lock()
				defer s.mu.Unlock()
				return s.mu.ledgers[1].queued > 1
			})
			close(release)
			// A rewrite with other bytes is refused when applied (C2), but
			// it is journaled and queued like any overwrite until then.
			if err := <-superseded; err != nil && (tc != "rewrite" || !errors.Is(err, ErrEntryConflict)) {
				t.Fatal(err)
			}
			if err := <-gcDone; err != nil {
				t.Fatal(err)
			}
			e.mem.InjectError(nil)
			// Read the journal as replay would.
			j, err := journal.Open(journal.Options{FS: e.mem.Crash(vfs.CrashOptions{}), Dir: testDir + "/journal"})
			if err != nil {
				t.Fatal(err)
			}
			defer j.Close()
			var superseding bool
			if _, err := j.Replay(journal.Position{}, func(rec journal.Record, _ journal.Location) error {
				switch {
				case rec.LedgerID != 1:
				case tc == "delete" && rec.Type == journal.TypeDelete,
					tc == "rewrite" && rec.Type == journal.TypeAdd && string(rec.Payload) == "rewritten":
					superseding = true
				case superseding && rec.Type == journal.TypeAdd && (tc == "delete" || rec.EntryID == 0):
					return fmt.Errorf("a copy of entry %d is journaled after the %s", rec.EntryID, tc)
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if !superseding {
				t.Fatalf("no %s record in the journal", tc)
			}
		})
	}
}

// TestCompactionNearFullDiskIsNotFatal: GC goes on near a full disk (doc.go,
// Contract), and its copies may start a journal file, whose reservation
// must fit: a rotation that cannot reserve its file is fatal. Compaction
// that would leave no room for it is skipped instead.
// TestGCRemovalIsPaced: GC removes dead journal files at
// RemoveMaxBytesPerSecond, each file on a pacer of its own, except on a
// pressed disk, where they go at once.
func TestGCRemovalIsPaced(t *testing.T) {
	const rate = 32 << 10
	e := gcEnv(t, NewMetrics(), func(o *Options) {
		o.CompactBelowLiveRatio = -1 // removals only
		o.RemoveMaxBytesPerSecond = rate
	})
	ctx := context.Background()
	if err := e.s.Delete(ctx, 100); err != nil {
		t.Fatal(err)
	}
	res, took := timedGC(t, e.s)
	if res.RemovedFiles < 2 {
		t.Fatalf("GC = %+v: want whole files removed", res)
	}
	if least := time.Duration(float64(res.ReclaimedBytes)/rate*float64(time.Second)) - ctxtime.PacerMinSleep; took < least {
		t.Fatalf("GC removed %d bytes in %s: faster than %d B/s (at least %s)", res.ReclaimedBytes, took, rate, least)
	}
	checkLive(t, e.s, []uint64{1, 2, 3, 4, 5, 6}, 40)

	// On a disk used above MajorCompactAboveUsed, a removal paced at 1 B/s
	// would take hours; it is not paced.
	e = gcEnv(t, NewMetrics(), func(o *Options) {
		o.CompactBelowLiveRatio = -1
		o.RemoveMaxBytesPerSecond = 1
	})
	if err := e.s.Delete(ctx, 100); err != nil {
		t.Fatal(err)
	}
	du, err := e.mem.DiskUsage(testDir)
	if err != nil {
		t.Fatal(err)
	}
	used := du.TotalBytes - du.FreeBytes
	e.mem.SetCapacity(used + used/10) // 91% used
	bounded, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if res, err := e.s.GC(bounded); err != nil || res.RemovedFiles < 2 {
		t.Fatalf("GC on a pressed disk = %+v, %v: want whole files removed at once", res, err)
	}
}

func TestCompactionNearFullDiskIsNotFatal(t *testing.T) {
	var fatal atomic.Value
	e := newEnv(t, func(o *Options) {
		o.JournalMaxFileBytes = 8 << 10
		o.JournalPreallocateBytes = 8 << 10
		o.CompactBelowLiveRatio = 0.9
		o.OnFatal = func(err error) { fatal.Store(err) }
	})
	for entry := range uint64(30) {
		for ledgerID := uint64(1); ledgerID <= 2; ledgerID++ {
			mustAdd(t, e.s, ledgerID, entry, -1, payloadFor(4, ledgerID, entry, 600))
		}
	}
	if err := e.s.Delete(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	files := e.s.j.Files()
	var largest int64
	for _, f := range files[:len(files)-1] {
		largest = max(largest, f.Size)
	}
	du, err := e.mem.DiskUsage(testDir)
	if err != nil {
		t.Fatal(err)
	}
	// Room for the largest half-dead file, not for it and a new journal file.
	e.mem.SetCapacity(du.TotalBytes - du.FreeBytes + uint64(largest) + 64)
	if _, err := e.s.GC(context.Background()); err != nil {
		t.Fatalf("GC: %v", err)
	}
	if err := fatal.Load(); err != nil {
		t.Fatalf("compaction near a full disk made the storage fail: %v", err)
	}
	for entry := range uint64(30) {
		mustRead(t, e.s, 2, entry, payloadFor(4, 2, entry, 600))
	}
}

// TestGCMinorAndMajor: a run compacts files below the minor ratio only; a
// major run (MajorCompactInterval after the last one, or on a disk used
// at or above MajorCompactAboveUsed) also those below the major ratio.
// gcEnv's files end about half live once ledgers 1..3 go.
func TestGCMinorAndMajor(t *testing.T) {
	var nowMs atomic.Int64
	nowMs.Store(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli())
	env := func() *env {
		e := gcEnv(t, NewMetrics(), func(o *Options) {
			o.CompactBelowLiveRatio, o.MajorCompactBelowLiveRatio, o.MajorCompactInterval = 0.2, 0.6, time.Hour
			o.Now = func() time.Time { return time.UnixMilli(nowMs.Load()) }
		})
		for _, ledgerID := range []uint64{100, 1, 2, 3} {
			if err := e.s.Delete(context.Background(), ledgerID); err != nil {
				t.Fatal(err)
			}
		}
		return e
	}
	// halfLive counts the files GC may compact that are live between the
	// minor and the major ratio.
	halfLive := func(s *Storage) (n int) {
		usage := s.ix.FileUsage()
		for _, f := range s.j.Files() {
			live := float64(usage[f.Seq].Bytes)
			if f.Seq != s.j.Position().File && live >= 0.2*float64(f.Size) && live < 0.6*float64(f.Size) {
				n++
			}
		}
		return n
	}
	gc := func(s *Storage, wantMajor bool) {
		t.Helper()
		res, err := s.GC(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		left := halfLive(s)
		if res.Major != wantMajor || (left == 0) != wantMajor {
			t.Fatalf("GC = %+v, leaving %d half-live files; want major %v", res, left, wantMajor)
		}
	}

	e := env()
	gc(e.s, false) // half-live files wait; ledger 100's dead files go
	nowMs.Add((time.Hour - time.Second).Milliseconds())
	gc(e.s, false)
	nowMs.Add(time.Second.Milliseconds())
	gc(e.s, true)
	if res, err := e.s.GC(context.Background()); err != nil || res.Major {
		t.Fatalf("GC right after a major one = %+v, %v; want a minor run", res, err)
	}
	checkLive(t, e.s, []uint64{4, 5, 6}, 40)

	// A disk 85% used: every run is major.
	e = env()
	gc(e.s, false)
	du, err := e.mem.DiskUsage(testDir)
	if err != nil {
		t.Fatal(err)
	}
	e.mem.SetCapacity(uint64(float64(du.TotalBytes-du.FreeBytes) / 0.85))
	gc(e.s, true)
	checkLive(t, e.s, []uint64{4, 5, 6}, 40)
}
