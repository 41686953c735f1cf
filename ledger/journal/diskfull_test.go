package journal

import (
	"errors"
	"io/fs"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/strata-log/strata/vfs"
)

// TestDiskFull fills a MemFS with a capacity. Space is reserved ahead of
// every group, so ENOSPC must come from a reservation (at rotation or when
// extending the reservation), never from a write in the middle of a group;
// it is fatal; and every acked record survives, even across a restart on
// the still-full disk (which fails cleanly) and then with space freed.
func TestDiskFull(t *testing.T) {
	// Each record is a group of its own: 544 bytes back to back, or a
	// 4 KiB block in the aligned layout.
	for _, tc := range []struct {
		name string
		opts Options
		cap  uint64
	}{
		{"aligned", Options{MaxFileBytes: 32 << 10, PreallocateBytes: 12 << 10}, 256 << 10},
		{"packed", Options{MaxFileBytes: 8 << 10, PreallocateBytes: 3 << 10, BufferedWrites: true}, 40 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) { testDiskFull(t, tc.opts, tc.cap) })
	}
}

func testDiskFull(t *testing.T, opts Options, capacity uint64) {
	fsys := vfs.NewMem()
	fsys.SetCapacity(capacity)
	opts.FS, opts.Dir = fsys, testDir
	var fatal atomic.Value
	opts.OnFatal = func(err error) { fatal.Store(err) }
	j, _, _ := openReplayed(t, opts)
	var acked []Location
	var failure error
	for i := 0; failure == nil; i++ {
		if i > 1000 {
			t.Fatal("the disk never filled")
		}
		loc, err := appendWait(t, j, addRecord(1, uint64(i), 500))
		if err != nil {
			failure = err
			break
		}
		acked = append(acked, loc)
	}
	if !errors.Is(failure, ErrFailed) || !errors.Is(failure, syscall.ENOSPC) {
		t.Fatalf("append on a full disk: %v, want ErrFailed wrapping ENOSPC", failure)
	}
	var pe *fs.PathError
	if !errors.As(failure, &pe) || pe.Op != vfs.OpPreallocate.String() {
		t.Fatalf("ENOSPC came from %v, want a preallocation", failure)
	}
	if err, _ := fatal.Load().(error); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("OnFatal got %v", err)
	}
	if err := j.Close(); !errors.Is(err, ErrFailed) {
		t.Fatalf("Close: %v", err)
	}
	if len(acked) < 40 {
		t.Fatalf("only %d records fit in %d KiB", len(acked), capacity>>10)
	}

	// Restart on the full disk: Replay starts a new file without a
	// reservation if its header fits, or fails with ENOSPC; either way it
	// changes nothing that matters.
	crashed := fsys.Crash(vfs.CrashOptions{})
	opts.FS, opts.OnFatal = crashed, nil
	j = mustOpen(t, opts)
	if _, err := j.Replay(Position{}, func(Record, Location) error { return nil }); err != nil && !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Replay on a full disk: %v, want success or ENOSPC", err)
	}
	_ = j.Close()

	// Space freed: everything acked is there.
	crashed.SetCapacity(0)
	j, recs, res := openReplayed(t, opts)
	defer mustClose(t, j)
	if len(res.Corrupt) != 0 {
		t.Fatalf("corrupt: %+v", res.Corrupt)
	}
	got := map[Location]bool{}
	for _, r := range recs {
		got[r.loc] = true
	}
	for _, loc := range acked {
		if !got[loc] {
			t.Fatalf("acked record at %+v lost", loc)
		}
	}
	mustAppend(t, j, addRecord(1, 9999, 10))
}

// TestReplayOnFullDisk: a bookie restarted on a full disk still starts (it
// must serve reads and free space by GC): the new file goes unreserved, and
// the next restart finds nothing amiss.
func TestReplayOnFullDisk(t *testing.T) {
	for _, buffered := range []bool{false, true} {
		t.Run(map[bool]string{false: "aligned", true: "packed"}[buffered], func(t *testing.T) { testReplayOnFullDisk(t, buffered) })
	}
}

func testReplayOnFullDisk(t *testing.T, buffered bool) {
	fsys := vfs.NewMem()
	opts := Options{FS: fsys, Dir: testDir, MaxFileBytes: 8 << 10, PreallocateBytes: 8 << 10, BufferedWrites: buffered}
	j, _, _ := openReplayed(t, opts)
	loc := mustAppend(t, j, addRecord(1, 1, 100))
	start := j.dataStart()
	mustClose(t, j)

	// Room for the next file's header block, not for its reservation.
	du, err := fsys.DiskUsage(testDir)
	must(t, err)
	fsys.SetCapacity(du.TotalBytes - du.FreeBytes + uint64(start) + 1<<10)
	j = mustOpen(t, opts)
	recs, res := replayAll(t, j, Position{})
	mustClose(t, j)
	if len(recs) != 1 || recs[0].loc != loc || len(res.Corrupt) != 0 {
		t.Fatalf("replay on a full disk: %+v %+v", recs, res)
	}
	fsys.SetCapacity(0)
	j, recs, res = openReplayed(t, opts)
	defer mustClose(t, j)
	mustAppend(t, j, addRecord(1, 2, 100))
	if len(recs) != 1 || len(res.Corrupt) != 0 || res.TruncatedBytes != 0 {
		t.Fatalf("restart after a full-disk start: %d records, %+v", len(recs), res)
	}
}
