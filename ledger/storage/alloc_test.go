package storage

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/strata-log/strata/internal/alloctest"
	"github.com/strata-log/strata/vfs"
)

// addLoad keeps adds of one payload in flight, from several ledgers at
// once, as a bookie serving many writers sees them: each ledger has its
// own goroutine with up to window adds outstanding. Its own allocations
// are per run (a goroutine per ledger), not per add, so what a run costs
// per add is the storage's.
type addLoad struct {
	s       *Storage
	payload []byte
	window  int
	next    []uint64 // next entry id, per ledger
}

func newAddLoad(s *Storage, ledgers, window, size int) *addLoad {
	payload := make([]byte, size)
	for i := range payload {
		payload[i] = byte(i)
	}
	return &addLoad{s: s, payload: payload, window: window, next: make([]uint64, ledgers)}
}

// run adds n entries, spread over the ledgers, and waits until every one
// is acknowledged. It returns the first error.
func (l *addLoad) run(n int) error {
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	for ledger := range l.next {
		count := n / len(l.next)
		if ledger < n%len(l.next) {
			count++
		}
		wg.Go(func() {
			slots := make(chan struct{}, l.window)
			var pending sync.WaitGroup
			// One callback for every add of the ledger.
			done := func(err error) {
				if err != nil {
					failed.CompareAndSwap(nil, boxed(err))
				}
				<-slots
				pending.Done()
			}
			for range count {
				slots <- struct{}{}
				pending.Add(1)
				entry := l.next[ledger]
				l.next[ledger]++
				if err := l.s.Add(context.Background(), uint64(ledger)+1, entry, int64(entry)-1, l.payload, false, done); err != nil {
					done(err)
				}
			}
			pending.Wait()
		})
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		return *err
	}
	return nil
}

// boxed returns a pointer to a copy of err, so that a callback that is
// passed an error allocates only when there is one.
func boxed(err error) *error { return &err }

// openDiskStorage opens a storage in a temporary directory of the real
// disk (the journal's fdatasync and direct I/O, Pebble on the OS), with
// GC and disk checks off.
func openDiskStorage(tb testing.TB) *Storage {
	tb.Helper()
	s, err := Open(context.Background(), Options{
		FS:                 vfs.Default(),
		Dir:                tb.TempDir(),
		DiskCheckInterval:  -1,
		GCInterval:         -1,
		CheckpointInterval: time.Second,
		OnFatal:            func(err error) { tb.Errorf("fatal: %v", err) },
	})
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// BenchmarkAddAllocs measures the CPU and the allocations of one durable
// add of 1 KiB on the real disk, from 16 ledgers: admission, the
// journal's group commit, the index batch of the group and the
// acknowledgement. With 32 adds in flight per ledger a journal group
// holds hundreds of records; with 1, at most 16 (a lightly loaded
// bookie), so what each group and each batch costs weighs more per add.
// ns/op is wall time per add (mostly the disk's); cpu-ns/op is the
// process's CPU time per add, on every goroutine.
func BenchmarkAddAllocs(b *testing.B) {
	for _, window := range []int{32, 1} {
		b.Run(fmt.Sprintf("inflight=%d", 16*window), func(b *testing.B) {
			s := openDiskStorage(b)
			defer s.Close()
			load := newAddLoad(s, 16, window, 1<<10)
			if err := load.run(2000); err != nil { // warm: buffers grown, files made
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.SetBytes(1 << 10)
			b.ResetTimer()
			cpu := alloctest.CPUTime(b)
			if err := load.run(b.N); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(alloctest.CPUTime(b)-cpu)/float64(b.N), "cpu-ns/op")
		})
	}
}

// TestAddAllocationBound guards the allocations of the add path
// (BenchmarkAddAllocs), with large journal groups and with small ones: a
// change that allocates per add, per group or per index batch again
// fails here. How many adds share a group depends on the disk's fdatasync,
// so the bound is per add and per group.
func TestAddAllocationBound(t *testing.T) {
	alloctest.SkipUnderRace(t)
	// Measured: 1.0 allocation per add (its op) and 2.2 per group (its
	// index batch, the budget's channel that wakes waiters): 1.08 per add
	// with ~180 adds per group, 1.29 with ~8. A quarter more is allowed.
	const perAdd, perGroup = 1.25, 2.75
	for _, window := range []int{32, 1} {
		t.Run(fmt.Sprintf("inflight=%d", 16*window), func(t *testing.T) {
			s := openDiskStorage(t)
			defer s.Close()
			load := newAddLoad(s, 16, window, 1<<10)
			if err := load.run(2000); err != nil {
				t.Fatal(err)
			}
			const adds = 5000
			var err error
			groups := s.groups.Load()
			allocs := alloctest.MallocsPer(1, func() { err = load.run(adds) })
			groups = s.groups.Load() - groups
			if err != nil {
				t.Fatal(err)
			}
			bound := perAdd*adds + perGroup*float64(groups)
			t.Logf("%.0f allocations for %d adds in %d groups (%.2f per add); bound %.0f", allocs, adds, groups, allocs/adds, bound)
			if allocs > bound {
				t.Errorf("%.0f allocations for %d adds in %d groups, want at most %.0f (%.2f per add and %.2f per group)",
					allocs, adds, groups, bound, perAdd, perGroup)
			}
		})
	}
}
