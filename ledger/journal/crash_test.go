package journal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/strata-log/strata/vfs"
)

var errCrashed = errors.New("process crashed")

// key identifies a record of the crash test: writer and sequence number.
type key struct{ ledger, entry uint64 }

// crashPayload is the payload of record k, so any replayed record can be
// checked against what was appended.
func crashPayload(k key, size int) []byte {
	p := make([]byte, size)
	for i := range p {
		p[i] = byte(k.ledger*31 + k.entry*7 + uint64(i))
	}
	return p
}

// crashHistory is what the test knows across generations.
type crashHistory struct {
	mu        sync.Mutex
	attempted map[key]int      // payload size of every record ever appended
	acked     map[key]Location // acked before the crash of their generation
}

func crashOptions(fsys vfs.FS) Options {
	// A file holds its header block and four groups (each padded to 4 KiB).
	return Options{FS: fsys, Dir: testDir, MaxFileBytes: 20 << 10, PreallocateBytes: 8 << 10, MaxGroupBytes: 2 << 10, MaxQueueBytes: 16 << 10}
}

// TestCrashRecovery appends from several goroutines, crashes the file
// system at a random point (an exact operation of the writer, or at an
// arbitrary moment from another goroutine), with torn tails, restarts, and
// checks after every restart that:
//   - every record acknowledged before a crash is replayed intact, at the
//     location its ack gave;
//   - every replayed record is one that was appended, intact, in journal
//     order, and each writer's records in the order it appended them;
//   - nothing is reported corrupt: a crash only ever damages the last
//     group, which is a torn tail.
func TestCrashRecovery(t *testing.T) {
	seeds := 1000
	if testing.Short() {
		seeds = 100
	}
	for seed := range uint64(seeds) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			runCrashSeed(t, seed)
		})
	}
}

func runCrashSeed(t *testing.T, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	h := &crashHistory{attempted: map[key]int{}, acked: map[key]Location{}}
	var fsys *vfs.MemFS = vfs.NewMem()
	for gen := range uint64(4) {
		j, recs, res := openReplayed(t, crashOptions(fsys))
		checkReplay(t, h, recs, res)
		if gen == 3 {
			mustClose(t, j)
			return
		}
		fsys = crashGeneration(t, r, fsys, j, h, gen)
	}
}

// crashGeneration runs writers against j until a crash and returns the
// crashed file system.
func crashGeneration(t *testing.T, r *rand.Rand, fsys *vfs.MemFS, j *Journal, h *crashHistory, gen uint64) *vfs.MemFS {
	const writers, perWriter = 4, 40
	torn := vfs.CrashOptions{TornTail: true, Rand: rand.New(rand.NewPCG(r.Uint64(), r.Uint64()))}

	// Either cut at the n-th occurrence of one writer operation (the
	// "process" then dies: every later operation fails), or from this
	// goroutine once some records are acked.
	var crashed atomic.Pointer[vfs.MemFS]
	var dead atomic.Bool
	// Half the time just before a sync: the group then is written but not
	// synced, the case torn tails come from.
	// The counts are about how often each happens in a generation (~25
	// groups, ~5 files), so the cut usually lands while writers run.
	ops := []struct {
		op    vfs.Op
		count int
	}{{vfs.OpSync, 24}, {vfs.OpSync, 24}, {vfs.OpSync, 24}, {vfs.OpSync, 24},
		{vfs.OpWrite, 24}, {vfs.OpPreallocate, 16}, {vfs.OpSyncDir, 4}, {vfs.OpCreate, 4}}
	pick := ops[r.IntN(len(ops))]
	atOp, atCount := pick.op, int64(1+r.IntN(pick.count))
	ackTarget := int64(r.IntN(writers * perWriter))
	byOp := r.IntN(4) != 0
	var opCount atomic.Int64
	if byOp {
		fsys.InjectError(func(op vfs.Op, name string) error {
			if dead.Load() {
				return errCrashed
			}
			if op == atOp && opCount.Add(1) == atCount {
				crashed.Store(fsys.Crash(torn))
				dead.Store(true)
				return errCrashed
			}
			return nil
		})
	}

	var acks atomic.Int64
	reached := make(chan struct{})
	var wg sync.WaitGroup
	for w := range uint64(writers) {
		wg.Add(1)
		size := 1 + r.IntN(400)
		go func() {
			defer wg.Done()
			for i := range uint64(perWriter) {
				k := key{ledger: w, entry: gen<<32 | i}
				rec := Record{Type: TypeAdd, LedgerID: k.ledger, EntryID: k.entry, LAC: int64(i) - 1, Payload: crashPayload(k, size)}
				h.mu.Lock()
				h.attempted[k] = size
				h.mu.Unlock()
				err := j.Append(context.Background(), rec, func(loc Location, err error) {
					if err != nil {
						if !errors.Is(err, ErrFailed) {
							t.Errorf("done: %v, want ErrFailed", err)
						}
						return
					}
					h.mu.Lock()
					if crashed.Load() == nil { // acked before the crash
						h.acked[k] = loc
					}
					h.mu.Unlock()
					if acks.Add(1) == ackTarget+1 {
						close(reached)
					}
				})
				if err != nil {
					if !errors.Is(err, ErrFailed) {
						t.Errorf("Append: %v", err)
					}
					return
				}
			}
		}()
	}
	if !byOp {
		select {
		case <-reached:
		case <-waitGroupDone(&wg):
		}
		// Acks recorded so far are before the crash: done runs after
		// the sync, and recording happens under h.mu, which Crash waits
		// out below by taking it.
		h.mu.Lock()
		crashed.Store(fsys.Crash(torn))
		h.mu.Unlock()
	}
	wg.Wait()
	err := j.Close()
	if byOp && crashed.Load() != nil && !errors.Is(err, ErrFailed) {
		t.Fatalf("Close after the crash: %v, want ErrFailed", err)
	}
	if c := crashed.Load(); c != nil {
		return c
	}
	// The chosen operation never happened: crash now.
	return fsys.Crash(torn)
}

func waitGroupDone(wg *sync.WaitGroup) <-chan struct{} {
	ch := make(chan struct{})
	go func() { wg.Wait(); close(ch) }()
	return ch
}

func checkReplay(t *testing.T, h *crashHistory, recs []replayed, res ReplayResult) {
	t.Helper()
	if len(res.Corrupt) != 0 {
		t.Fatalf("crash damage reported as corruption: %+v", res.Corrupt)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	seen := map[key]Location{}
	lastEntry := map[uint64]uint64{}
	var prev Location
	for i, r := range recs {
		k := key{r.rec.LedgerID, r.rec.EntryID}
		size, ok := h.attempted[k]
		if !ok {
			t.Fatalf("replayed a record never appended: %+v", r.rec)
		}
		if !bytes.Equal(r.rec.Payload, crashPayload(k, size)) || r.rec.Type != TypeAdd || r.rec.LAC != int64(uint32(k.entry))-1 {
			t.Fatalf("replayed record %v differs from what was appended", k)
		}
		if _, dup := seen[k]; dup {
			t.Fatalf("record %v replayed twice", k)
		}
		seen[k] = r.loc
		if i > 0 && (r.loc.File < prev.File || (r.loc.File == prev.File && r.loc.Offset < prev.Offset+int64(prev.Length))) {
			t.Fatalf("record at %+v replayed after %+v", r.loc, prev)
		}
		prev = r.loc
		if last, ok := lastEntry[k.ledger]; ok && k.entry <= last {
			t.Fatalf("writer %d: entry %x replayed after %x", k.ledger, k.entry, last)
		}
		lastEntry[k.ledger] = k.entry
	}
	for k, loc := range h.acked {
		got, ok := seen[k]
		if !ok {
			t.Fatalf("acknowledged record %v at %+v lost (replayed %d records, %+v)", k, loc, len(recs), res)
		}
		if got != loc {
			t.Fatalf("acknowledged record %v at %+v replayed at %+v", k, loc, got)
		}
	}
}

// TestSyncErrorIsFatal fails one fdatasync and checks the fsyncgate rules:
// OnFatal once, the failed group and everything after it fails, no sync is
// ever attempted again, nothing is acked after the failure, and what was
// acked before survives.
func TestSyncErrorIsFatal(t *testing.T) {
	for _, failOp := range []vfs.Op{vfs.OpSync, vfs.OpWrite} {
		t.Run(failOp.String(), func(t *testing.T) { testWriteErrorIsFatal(t, failOp) })
	}
}

func testWriteErrorIsFatal(t *testing.T, failOp vfs.Op) {
	fsys := vfs.NewMem()
	opts := testOptions(fsys)
	var fatals atomic.Int32
	var fatalErr atomic.Value
	opts.OnFatal = func(err error) {
		fatals.Add(1)
		fatalErr.Store(err)
	}
	j, _, _ := openReplayed(t, opts)

	errIO := errors.New("EIO")
	var count, afterFailure atomic.Int32
	var failed atomic.Bool
	fsys.InjectError(func(op vfs.Op, name string) error {
		if failed.Load() && (op == vfs.OpSync || op == vfs.OpWrite) {
			afterFailure.Add(1)
		}
		if op == failOp && count.Add(1) == 5 {
			failed.Store(true)
			return errIO
		}
		return nil
	})

	var mu sync.Mutex
	var acked []Location
	var failedAcks int
	var ackAfterFail bool
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				var inner sync.WaitGroup
				inner.Add(1)
				err := j.Append(context.Background(), addRecord(uint64(w), uint64(i), 50), func(loc Location, err error) {
					defer inner.Done()
					mu.Lock()
					defer mu.Unlock()
					switch {
					case err == nil && failedAcks > 0:
						ackAfterFail = true
					case err == nil:
						acked = append(acked, loc)
					case errors.Is(err, ErrFailed) && errors.Is(err, errIO):
						failedAcks++
					default:
						t.Errorf("done: %v", err)
					}
				})
				if err != nil {
					inner.Done()
					if !errors.Is(err, ErrFailed) {
						t.Errorf("Append after the failure: %v, want ErrFailed", err)
					}
					return
				}
				inner.Wait()
			}
		}()
	}
	wg.Wait()
	if got := fatals.Load(); got != 1 {
		t.Fatalf("OnFatal called %d times", got)
	}
	if err, _ := fatalErr.Load().(error); !errors.Is(err, ErrFailed) || !errors.Is(err, errIO) {
		t.Fatalf("OnFatal error %v", err)
	}
	if failedAcks == 0 || ackAfterFail {
		t.Fatalf("failed acks %d, ack after failure %v", failedAcks, ackAfterFail)
	}
	if n := afterFailure.Load(); n != 0 {
		t.Fatalf("%d writes or syncs after the failure", n)
	}
	if err := j.Append(context.Background(), addRecord(9, 9, 1), func(Location, error) { t.Error("done called") }); !errors.Is(err, ErrFailed) {
		t.Fatalf("Append after failure: %v", err)
	}
	if err := j.Close(); !errors.Is(err, ErrFailed) {
		t.Fatalf("Close: %v, want ErrFailed", err)
	}

	fsys.InjectError(nil)
	j, recs, res := openReplayed(t, testOptions(fsys.Crash(vfs.CrashOptions{})))
	defer mustClose(t, j)
	if len(res.Corrupt) != 0 {
		t.Fatalf("corrupt: %+v", res.Corrupt)
	}
	found := map[Location]bool{}
	for _, r := range recs {
		found[r.loc] = true
	}
	for _, loc := range acked {
		if !found[loc] {
			t.Fatalf("acked record at %+v lost", loc)
		}
	}
}
