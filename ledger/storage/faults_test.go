package storage

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/strata-log/strata/internal/corruption"
	"github.com/strata-log/strata/internal/testwait"
	"github.com/strata-log/strata/ledger/journal"
	"github.com/strata-log/strata/vfs"
)

// flipByte changes one byte of a MemFS file in place (the FS only appends,
// so: read, cut, write back).
func flipByte(t *testing.T, mem *vfs.MemFS, name string, off int64) {
	t.Helper()
	f, err := mem.OpenReadWrite(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	tail := make([]byte, info.Size()-off)
	if _, err := f.ReadAt(tail, off); err != nil {
		t.Fatal(err)
	}
	tail[0] ^= 0x5a
	if err := f.Truncate(off); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(tail); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

func journalFile(seq uint64) string {
	return filepath.Join(testDir, "journal", fmt.Sprintf("%016x.journal", seq))
}

func locationOf(t *testing.T, s *Storage, ledgerID, entryID uint64) journal.Location {
	t.Helper()
	loc, ok, err := s.ix.Get(ledgerID, entryID)
	if err != nil || !ok {
		t.Fatalf("no location for %d/%d: %v", ledgerID, entryID, err)
	}
	return loc
}

func TestReadCorruptEntry(t *testing.T) {
	m := NewMetrics()
	e := newEnv(t, func(o *Options) { o.Metrics = m })
	mustAdd(t, e.s, 1, 0, -1, []byte("payload zero"))
	mustAdd(t, e.s, 1, 1, -1, []byte("payload one"))
	loc := locationOf(t, e.s, 1, 0)
	flipByte(t, e.mem, journalFile(loc.File), loc.Offset+journal.RecordHeaderSize+3)
	got, err := e.s.Read(1, 0)
	wantErr(t, err, ErrCorrupt)
	if !corruption.Is(err) {
		t.Fatalf("Read of a corrupt entry: %v is not marked as corruption", err)
	}
	if got.Payload != nil {
		t.Fatal("corrupt payload returned")
	}
	if err := e.s.ReadRange(1, 0, 1, 0, func(Entry) error { return nil }); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("ReadRange over a corrupt entry: %v", err)
	}
	mustRead(t, e.s, 1, 1, []byte("payload one"))
	if n := counterValue(t, m.corruptions.WithLabelValues(corruptionRead)); n != 2 {
		t.Fatalf("read corruption count = %v", n)
	}
}

// TestReadIOError: a read the disk fails is ErrIO (not corruption, not
// "no entry"), counted, and reads work again once the disk does.
func TestReadIOError(t *testing.T) {
	m := NewMetrics()
	e := newEnv(t, func(o *Options) { o.Metrics = m })
	mustAdd(t, e.s, 1, 0, -1, []byte("payload zero"))
	mustAdd(t, e.s, 1, 1, -1, []byte("payload one"))
	e.mem.InjectError(func(op vfs.Op, name string) error {
		if op == vfs.OpRead {
			return &fs.PathError{Op: "read", Path: name, Err: syscall.EIO}
		}
		return nil
	})
	_, err := e.s.Read(1, 0)
	wantErr(t, err, ErrIO)
	if !errors.Is(err, syscall.EIO) || corruption.Is(err) || errors.Is(err, ErrNoEntry) || errors.Is(err, ErrUnknown) {
		t.Fatalf("Read under EIO: %v, want ErrIO wrapping EIO and nothing else", err)
	}
	if err := e.s.ReadRange(1, 0, 1, 0, func(Entry) error { return nil }); !errors.Is(err, ErrIO) {
		t.Fatalf("ReadRange under EIO: %v", err)
	}
	if n := counterValue(t, m.readErrors); n != 2 {
		t.Fatalf("read errors counted = %v, want 2", n)
	}
	e.mem.InjectError(nil)
	mustRead(t, e.s, 1, 0, []byte("payload zero"))
	mustRead(t, e.s, 1, 1, []byte("payload one"))
}

func TestReplayCorruptionEntersLimbo(t *testing.T) {
	m := NewMetrics()
	e := newEnv(t, func(o *Options) { o.Metrics = m })
	// One group per add: the corrupt record is followed by later groups,
	// so replay must report it as corruption, not a torn tail.
	for entry := range uint64(10) {
		mustAdd(t, e.s, 1, entry, int64(entry)-1, []byte(fmt.Sprintf("entry %d", entry)))
	}
	mustAdd(t, e.s, 2, 0, -1, []byte("other ledger"))
	loc := locationOf(t, e.s, 1, 5)
	// Crash: the index goes back to Open's checkpoint, so replay reads
	// every record above; one of them is damaged meanwhile.
	crashed := e.crash(false, nil, nil)
	flipByte(t, crashed, journalFile(loc.File), loc.Offset+journal.RecordHeaderSize+1)
	if err := e.restartAfterCrash(crashed, false); err != nil {
		t.Fatal(err)
	}
	s := e.s
	if !s.Limbo() {
		t.Fatal("not in limbo after replaying a corrupt record")
	}
	if n := counterValue(t, m.corruptions.WithLabelValues(corruptionReplay)); n != 1 {
		t.Fatalf("replay corruption count = %v", n)
	}
	_, err := s.Read(1, 5)
	wantErr(t, err, ErrUnknown)
	_, err = s.Read(1, 50)
	wantErr(t, err, ErrUnknown)
	_, err = s.Read(77, 0) // even ledgers it never heard of: it cannot know
	wantErr(t, err, ErrUnknown)
	if err := s.ReadRange(1, 5, 9, 0, func(Entry) error { return nil }); !errors.Is(err, ErrUnknown) {
		t.Fatalf("ReadRange from the lost entry: %v", err)
	}
	for _, entry := range []uint64{0, 4, 6, 9} {
		mustRead(t, s, 1, entry, []byte(fmt.Sprintf("entry %d", entry)))
	}
	// A fence may have been in the lost bytes: every ledger is fenced.
	wantErr(t, add(s, 1, 10, -1, []byte("x"), false), ErrFenced)
	wantErr(t, add(s, 2, 1, -1, []byte("x"), false), ErrFenced)
	if err := add(s, 1, 5, 4, []byte("entry 5"), true); err != nil {
		t.Fatalf("recovery add in limbo: %v", err)
	}
	mustRead(t, s, 1, 5, []byte("entry 5"))

	e.reopen()
	if !e.s.Limbo() {
		t.Fatal("limbo lost on reopen")
	}
	_, err = e.s.Read(1, 50)
	wantErr(t, err, ErrUnknown)
	if err := e.s.ClearLimbo(); err != nil {
		t.Fatal(err)
	}
	_, err = e.s.Read(1, 50)
	wantErr(t, err, ErrNoEntry)
	e.reopen()
	if e.s.Limbo() {
		t.Fatal("limbo back after ClearLimbo and reopen")
	}
	wantErr(t, add(e.s, 2, 1, -1, []byte("x"), false), ErrFenced) // fences stay
}

func TestJournalMissingRefusesToOpen(t *testing.T) {
	e := newEnv(t, nil)
	mustAdd(t, e.s, 1, 0, -1, []byte("x"))
	e.s.Close()
	e.s = nil
	e.mem = vfs.NewMem() // a wiped journal disk under a surviving index
	if err := e.tryOpen(); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open with the journal gone: %v", err)
	}
}

func TestDiskFullTurnsReadOnly(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.JournalPreallocateBytes = 4 << 10 })
	s := e.s
	var changes []bool
	s.OnStateChange(func(ro bool) { changes = append(changes, ro) })
	for entry := range uint64(50) {
		mustAdd(t, s, 1, entry, -1, payloadFor(2, 1, entry, 500))
	}
	du, err := e.mem.DiskUsage(testDir)
	if err != nil {
		t.Fatal(err)
	}
	used := du.TotalBytes - du.FreeBytes
	e.mem.SetCapacity(uint64(float64(used) / 0.96)) // 96% used
	s.disk.check()
	if !s.ReadOnly() || fmt.Sprint(changes) != "[true]" {
		t.Fatalf("ReadOnly %v, changes %v", s.ReadOnly(), changes)
	}
	if du := s.DiskUsage(); du.FreeBytes == 0 || du.TotalBytes == 0 {
		t.Fatalf("DiskUsage = %+v", du)
	}
	wantErr(t, add(s, 1, 50, -1, []byte("x"), false), ErrReadOnly)
	wantErr(t, add(s, 1, 50, -1, []byte("x"), true), ErrReadOnly)
	for entry := range uint64(50) {
		mustRead(t, s, 1, entry, payloadFor(2, 1, entry, 500))
	}
	// Metadata records still work: fencing is how a new writer recovers.
	if _, err := s.Fence(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	// 92% used: still read-only (hysteresis).
	e.mem.SetCapacity(uint64(float64(used) / 0.92))
	s.disk.check()
	if !s.ReadOnly() {
		t.Fatal("writable above WritableBelow")
	}
	e.mem.SetCapacity(uint64(float64(used) / 0.5))
	s.disk.check()
	if s.ReadOnly() || fmt.Sprint(changes) != "[true false]" {
		t.Fatalf("ReadOnly %v, changes %v", s.ReadOnly(), changes)
	}
	if err := add(s, 2, 0, -1, []byte("x"), false); err != nil {
		t.Fatal(err)
	}
}

func TestDiskCheckLoop(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.DiskCheckInterval = time.Millisecond })
	var flips atomic.Int32
	e.s.OnStateChange(func(bool) { flips.Add(1) })
	mustAdd(t, e.s, 1, 0, -1, make([]byte, 1000))
	du, _ := e.mem.DiskUsage(testDir)
	e.mem.SetCapacity(du.TotalBytes - du.FreeBytes + 10)
	testwait.Until(t, waitTimeout, "read-only", e.s.ReadOnly)
	e.mem.SetCapacity(0)
	testwait.Until(t, waitTimeout, "writable, and both changes reported", func() bool { return !e.s.ReadOnly() && flips.Load() == 2 })
}

// TestFastWriterCannotFillTheDisk: with no disk check between adds, the add
// budget alone turns the storage read-only before the journal runs out of
// space (which would be fatal).
func TestFastWriterCannotFillTheDisk(t *testing.T) {
	var fatal atomic.Value
	e := newEnv(t, func(o *Options) {
		o.JournalPreallocateBytes = 16 << 10
		o.OnFatal = func(err error) { fatal.Store(err) }
	})
	e.mem.SetCapacity(1 << 20)
	e.s.disk.check()
	var acked []uint64
	for entry := uint64(0); ; entry++ {
		if entry > 10000 {
			t.Fatal("never turned read-only")
		}
		err := add(e.s, 1, entry, -1, payloadFor(3, 1, entry, 2000), false)
		if errors.Is(err, ErrReadOnly) {
			break
		}
		if err != nil {
			t.Fatalf("add %d: %v", entry, err)
		}
		acked = append(acked, entry)
	}
	if err := fatal.Load(); err != nil {
		t.Fatalf("the journal failed: %v", err)
	}
	if !e.s.ReadOnly() {
		t.Fatal("add refused but the storage does not say read-only")
	}
	for _, entry := range acked {
		mustRead(t, e.s, 1, entry, payloadFor(3, 1, entry, 2000))
	}
	t.Logf("read-only after %d adds of up to 2000 bytes on a 1 MiB disk", len(acked))
}
