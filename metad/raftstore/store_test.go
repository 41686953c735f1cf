package raftstore

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/vfs"
	"github.com/hashicorp/raft"

	"github.com/strata-log/strata/internal/corruption"
	"github.com/strata-log/strata/internal/testwait"
)

func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// openStore opens a store in dir with fsync on and closes it when the test
// ends (Close is idempotent, so tests may close it earlier).
func openStore(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := Open(dir, Options{Logger: quietLogger()})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// reopen closes s and opens its directory again.
func reopen(t *testing.T, s *Store, dir string) *Store {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	return openStore(t, dir)
}

// testLog is the entry storeIndexes writes at index.
func testLog(index uint64) *raft.Log {
	return &raft.Log{
		Index:      index,
		Term:       index/10 + 1,
		Type:       raft.LogCommand,
		Data:       fmt.Appendf(nil, "entry-%d", index),
		AppendedAt: time.Unix(1700000000, int64(index)).UTC(),
	}
}

func storeIndexes(t testing.TB, s *Store, indexes ...uint64) {
	t.Helper()
	logs := make([]*raft.Log, len(indexes))
	for i, index := range indexes {
		logs[i] = testLog(index)
	}
	if err := s.StoreLogs(logs); err != nil {
		t.Fatalf("StoreLogs(%v): %v", indexes, err)
	}
}

func span(from, to uint64) []uint64 {
	var out []uint64
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}

func requireBounds(t *testing.T, s *Store, wantFirst, wantLast uint64) {
	t.Helper()
	first, err := s.FirstIndex()
	if err != nil {
		t.Fatalf("FirstIndex: %v", err)
	}
	last, err := s.LastIndex()
	if err != nil {
		t.Fatalf("LastIndex: %v", err)
	}
	if first != wantFirst || last != wantLast {
		t.Fatalf("bounds = [%d, %d], want [%d, %d]", first, last, wantFirst, wantLast)
	}
}

// requireLogs checks that exactly the indexes in want, out of 0..upTo, hold
// their testLog.
func requireLogs(t *testing.T, s *Store, upTo uint64, want ...uint64) {
	t.Helper()
	present := map[uint64]bool{}
	for _, index := range want {
		present[index] = true
	}
	for index := uint64(0); index <= upTo; index++ {
		var got raft.Log
		err := s.GetLog(index, &got)
		switch {
		case present[index] && err != nil:
			t.Fatalf("GetLog(%d): %v", index, err)
		case present[index]:
			requireSameLog(t, &got, testLog(index))
		case !errors.Is(err, raft.ErrLogNotFound):
			t.Fatalf("GetLog(%d) = %v, want raft.ErrLogNotFound", index, err)
		}
	}
}

func TestEmptyStore(t *testing.T) {
	s := openStore(t, t.TempDir())
	requireBounds(t, s, 0, 0)
	requireLogs(t, s, 3)
	if err := s.DeleteRange(1, 10); err != nil {
		t.Fatalf("DeleteRange on empty store: %v", err)
	}
	if err := s.StoreLogs(nil); err != nil {
		t.Fatalf("StoreLogs(nil): %v", err)
	}
	requireBounds(t, s, 0, 0)
}

func TestOpenCreatesDirectory(t *testing.T) {
	for name, dir := range map[string]string{
		"nested":   t.TempDir() + "/a/b/raft",
		"relative": "raft",
	} {
		t.Run(name, func(t *testing.T) {
			t.Chdir(t.TempDir())
			s := openStore(t, dir)
			storeIndexes(t, s, 1)
			s = reopen(t, s, dir)
			requireBounds(t, s, 1, 1)
		})
	}
}

func TestGetLogRoundTrip(t *testing.T) {
	s := openStore(t, t.TempDir())
	for name, want := range sampleLogs() {
		t.Run(name, func(t *testing.T) {
			if err := s.StoreLog(want); err != nil {
				t.Fatalf("StoreLog: %v", err)
			}
			var got raft.Log
			if err := s.GetLog(want.Index, &got); err != nil {
				t.Fatalf("GetLog: %v", err)
			}
			requireSameLog(t, &got, want)
		})
	}
}

func TestStoreLogOverwrites(t *testing.T) {
	s := openStore(t, t.TempDir())
	storeIndexes(t, s, 1, 2, 3)
	replacement := &raft.Log{Index: 2, Term: 99, Data: []byte("new")}
	if err := s.StoreLog(replacement); err != nil {
		t.Fatalf("StoreLog: %v", err)
	}
	var got raft.Log
	if err := s.GetLog(2, &got); err != nil {
		t.Fatalf("GetLog: %v", err)
	}
	requireSameLog(t, &got, replacement)
	requireBounds(t, s, 1, 3)
}

func TestStoreLogsRejectsIndexZero(t *testing.T) {
	s := openStore(t, t.TempDir())
	err := s.StoreLogs([]*raft.Log{testLog(1), {Index: 0}})
	if !errors.Is(err, errZeroIndex) {
		t.Fatalf("StoreLogs with index 0 = %v, want errZeroIndex", err)
	}
	// Nothing of the batch is stored.
	requireBounds(t, s, 0, 0)
	requireLogs(t, s, 2)
}

func TestStoreLogsBounds(t *testing.T) {
	cases := []struct {
		name      string
		batches   [][]uint64
		wantFirst uint64
		wantLast  uint64
		wantLogs  []uint64
	}{
		{"one batch", [][]uint64{span(1, 100)}, 1, 100, span(1, 100)},
		{"appends", [][]uint64{{1, 2}, {3}, {4, 5, 6}}, 1, 6, span(1, 6)},
		{"unordered batch", [][]uint64{{5, 3, 4}}, 3, 5, span(3, 5)},
		{"gap after snapshot", [][]uint64{span(1, 5), span(50, 52)}, 1, 52, append(span(1, 5), span(50, 52)...)},
		{"lower batch later", [][]uint64{span(10, 12), span(7, 8)}, 7, 12, append(span(7, 8), span(10, 12)...)},
		{"max index", [][]uint64{{math.MaxUint64}}, math.MaxUint64, math.MaxUint64, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s := openStore(t, dir)
			for _, batch := range tc.batches {
				storeIndexes(t, s, batch...)
			}
			requireBounds(t, s, tc.wantFirst, tc.wantLast)
			requireLogs(t, s, 120, tc.wantLogs...)
			s = reopen(t, s, dir)
			requireBounds(t, s, tc.wantFirst, tc.wantLast)
			requireLogs(t, s, 120, tc.wantLogs...)
		})
	}
}

func TestDeleteRange(t *testing.T) {
	type deletion struct{ min, max uint64 }
	cases := []struct {
		name      string
		stored    []uint64
		deletions []deletion
		wantFirst uint64
		wantLast  uint64
		wantLogs  []uint64
	}{
		{"prefix", span(1, 10), []deletion{{1, 3}}, 4, 10, span(4, 10)},
		{"prefix from below first", span(1, 10), []deletion{{0, 3}}, 4, 10, span(4, 10)},
		{"first only", span(1, 10), []deletion{{1, 1}}, 2, 10, span(2, 10)},
		{"suffix", span(1, 10), []deletion{{8, 10}}, 1, 7, span(1, 7)},
		{"suffix to max uint64", span(1, 10), []deletion{{8, math.MaxUint64}}, 1, 7, span(1, 7)},
		{"middle", span(1, 10), []deletion{{4, 6}}, 1, 10, append(span(1, 3), span(7, 10)...)},
		{"everything", span(1, 10), []deletion{{1, 10}}, 0, 0, nil},
		{"everything and more", span(1, 10), []deletion{{0, math.MaxUint64}}, 0, 0, nil},
		{"outside", span(1, 10), []deletion{{11, 20}}, 1, 10, span(1, 10)},
		{"min above max", span(1, 10), []deletion{{5, 4}}, 1, 10, span(1, 10)},
		{"prefix up to a gap", append(span(1, 3), span(7, 10)...), []deletion{{1, 4}}, 7, 10, span(7, 10)},
		{"suffix down to a gap", append(span(1, 3), span(7, 10)...), []deletion{{5, 10}}, 1, 3, span(1, 3)},
		{"hole then prefix", span(1, 10), []deletion{{3, 6}, {1, 2}}, 7, 10, span(7, 10)},
		{"successive trims", span(1, 10), []deletion{{1, 2}, {3, 5}, {9, 10}}, 6, 8, span(6, 8)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s := openStore(t, dir)
			storeIndexes(t, s, tc.stored...)
			for _, d := range tc.deletions {
				if err := s.DeleteRange(d.min, d.max); err != nil {
					t.Fatalf("DeleteRange(%d, %d): %v", d.min, d.max, err)
				}
			}
			requireBounds(t, s, tc.wantFirst, tc.wantLast)
			requireLogs(t, s, 12, tc.wantLogs...)
			// The cache matches what is on disk.
			s = reopen(t, s, dir)
			requireBounds(t, s, tc.wantFirst, tc.wantLast)
			requireLogs(t, s, 12, tc.wantLogs...)
		})
	}
}

func TestDeleteRangeThenStore(t *testing.T) {
	// Raft on a follower: truncate a conflicting suffix, append the
	// leader's entries.
	s := openStore(t, t.TempDir())
	storeIndexes(t, s, span(1, 10)...)
	if err := s.DeleteRange(6, 10); err != nil {
		t.Fatal(err)
	}
	storeIndexes(t, s, 6, 7)
	requireBounds(t, s, 1, 7)
	// Raft after a snapshot: trim everything, append after the gap.
	if err := s.DeleteRange(1, 7); err != nil {
		t.Fatal(err)
	}
	storeIndexes(t, s, 100)
	requireBounds(t, s, 100, 100)
}

func TestDeleteRangeCompactsPeriodically(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir)
	s.compactAfterDeletedLogs = 100
	storeIndexes(t, s, span(1, 500)...)

	steps := []struct {
		min, max        uint64
		wantCompactions uint64
	}{
		{1, 50, 0},    // 50 deleted
		{51, 120, 1},  // 120 deleted: compact, reset
		{121, 130, 1}, // 10
		{490, 500, 1}, // a suffix does not count
		{300, 310, 1}, // nor a hole
		{0, 230, 2},   // 100 more (121..230 less 121..130 already gone)
	}
	for _, step := range steps {
		if err := s.DeleteRange(step.min, step.max); err != nil {
			t.Fatalf("DeleteRange(%d, %d): %v", step.min, step.max, err)
		}
		// Compaction is asynchronous; a wrong extra one shows up by the
		// next step's check or the final one.
		testwait.Until(t, waitTimeout, fmt.Sprintf("%d compactions after DeleteRange(%d, %d)", step.wantCompactions, step.min, step.max), func() bool {
			return s.compactions.Load() == step.wantCompactions
		})
	}
	requireBounds(t, s, 231, 489)
	compactions := &s.compactions
	s = reopen(t, s, dir)
	if got := compactions.Load(); got != 2 {
		t.Fatalf("%d compactions by Close, want 2", got)
	}
	requireBounds(t, s, 231, 489)
	var got raft.Log
	if err := s.GetLog(231, &got); err != nil {
		t.Fatalf("GetLog(231) after compaction: %v", err)
	}
}

func TestStableStore(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir)

	for _, key := range [][]byte{[]byte("missing"), nil, logKey(1)} {
		if _, err := s.Get(key); err != ErrKeyNotFound || err.Error() != "not found" {
			t.Fatalf("Get(%q) = %v, want ErrKeyNotFound (\"not found\")", key, err)
		}
		// raft-boltdb returns the error here too; raft treats it as 0.
		if v, err := s.GetUint64(key); v != 0 || err != ErrKeyNotFound {
			t.Fatalf("GetUint64(%q) = %d, %v, want 0, ErrKeyNotFound", key, v, err)
		}
	}

	values := []struct {
		key, value []byte
	}{
		{[]byte("LastVoteCand"), []byte("node-1")},
		{[]byte("empty"), []byte{}},
		{nil, []byte("empty key")},
		{[]byte{0x00, 0xff}, []byte{0x00}},
		// A stable key that looks like a log key stays a stable key.
		{logKey(5), []byte("not a log")},
	}
	for _, v := range values {
		if err := s.Set(v.key, v.value); err != nil {
			t.Fatalf("Set(%q): %v", v.key, err)
		}
	}
	if err := s.Set([]byte("LastVoteCand"), []byte("node-2")); err != nil {
		t.Fatal(err)
	}
	values[0].value = []byte("node-2")

	uints := map[string]uint64{"CurrentTerm": 7, "LastVoteTerm": 0, "max": math.MaxUint64}
	for key, value := range uints {
		if err := s.SetUint64([]byte(key), value); err != nil {
			t.Fatalf("SetUint64(%q): %v", key, err)
		}
	}

	check := func(s *Store) {
		t.Helper()
		for _, v := range values {
			got, err := s.Get(v.key)
			if err != nil || !bytes.Equal(got, v.value) || got == nil {
				t.Fatalf("Get(%q) = %q, %v, want %q", v.key, got, err, v.value)
			}
		}
		for key, want := range uints {
			got, err := s.GetUint64([]byte(key))
			if err != nil || got != want {
				t.Fatalf("GetUint64(%q) = %d, %v, want %d", key, got, err, want)
			}
		}
		// Stable keys never show up in the log.
		requireBounds(t, s, 0, 0)
	}
	check(s)
	s = reopen(t, s, dir)
	check(s)
}

func TestGetReturnsCopy(t *testing.T) {
	s := openStore(t, t.TempDir())
	if err := s.Set([]byte("k"), []byte("value")); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get([]byte("k"))
	if err != nil {
		t.Fatal(err)
	}
	copy(got, "XXXXX")
	again, err := s.Get([]byte("k"))
	if err != nil || string(again) != "value" {
		t.Fatalf("Get after mutating a returned value = %q, %v", again, err)
	}
}

func TestCorruptRecords(t *testing.T) {
	s := openStore(t, t.TempDir())
	storeIndexes(t, s, 1)
	// Write past the Store, as a disk fault or a bug would.
	raw := map[string][]byte{
		string(logKey(2)):                  {0x01, 0x02, 0x01, 0x00, 0x09, 'x'},
		string(logKey(3)):                  appendLog(nil, testLog(4)),
		string(logKey(5)):                  {0x07},
		string(stableKey([]byte("short"))): {0x01, 0x02, 0x03},
	}
	for key, value := range raw {
		if err := s.db.Set([]byte(key), value, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, index := range []uint64{2, 3, 5} {
		got := *testLog(1)
		if err := s.GetLog(index, &got); !errors.Is(err, ErrCorrupt) || !corruption.Is(err) {
			t.Errorf("GetLog(%d) = %v, want ErrCorrupt, marked as corruption", index, err)
		}
		requireSameLog(t, &got, testLog(1))
	}
	if _, err := s.GetUint64([]byte("short")); !errors.Is(err, ErrCorrupt) {
		t.Errorf("GetUint64 of a 3-byte value = %v, want ErrCorrupt", err)
	}
	var ok raft.Log
	if err := s.GetLog(1, &ok); err != nil {
		t.Errorf("GetLog(1) beside corrupt entries: %v", err)
	}
}

func TestOpenRejectsMalformedLogKey(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir)
	if err := s.db.Set([]byte{logPrefix, 0x01}, []byte("x"), nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err := Open(dir, Options{Logger: quietLogger()}); !errors.Is(err, ErrCorrupt) {
		if s != nil {
			_ = s.Close()
		}
		t.Fatalf("Open with a malformed log key = %v, want ErrCorrupt", err)
	}
	// The failed Open released the directory: pebble can take it, and once
	// the bad key is gone the store opens.
	db, err := pebble.Open(dir, &pebble.Options{Logger: pebbleLogger{quietLogger()}})
	if err != nil {
		t.Fatalf("pebble.Open after a failed Open: %v", err)
	}
	if err := db.Delete([]byte{logPrefix, 0x01}, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	openStore(t, dir)
}

func TestClosed(t *testing.T) {
	s := openStore(t, t.TempDir())
	storeIndexes(t, s, 1)
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	var l raft.Log
	calls := map[string]error{
		"StoreLogs":   s.StoreLogs([]*raft.Log{testLog(2)}),
		"StoreLog":    s.StoreLog(testLog(2)),
		"GetLog":      s.GetLog(1, &l),
		"DeleteRange": s.DeleteRange(1, 1),
		"Set":         s.Set([]byte("k"), nil),
		"SetUint64":   s.SetUint64([]byte("k"), 1),
	}
	_, calls["FirstIndex"] = s.FirstIndex()
	_, calls["LastIndex"] = s.LastIndex()
	_, calls["Get"] = s.Get([]byte("k"))
	_, calls["GetUint64"] = s.GetUint64([]byte("k"))
	for name, err := range calls {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close = %v, want ErrClosed", name, err)
		}
	}
	if got := s.DiskUsageBytes(); got != 0 {
		t.Errorf("DiskUsageBytes after Close = %d", got)
	}
}

// TestBlockCacheHoldsReads guards blockCacheBytes: with a cache no bigger
// than the memtable reservation, pebble caches nothing and every read of a
// flushed entry decompresses its block again.
func TestBlockCacheHoldsReads(t *testing.T) {
	s, err := Open(t.TempDir(), Options{NoSync: true, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// Enough to grow the memtable to 8 MiB (it doubles on every rotation).
	const count = 10000
	storeIndexes(t, s, span(1, count)...)
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	var l raft.Log
	for range 2 {
		for index := uint64(1); index <= count; index++ {
			if err := s.GetLog(index, &l); err != nil {
				t.Fatal(err)
			}
		}
	}
	if m := s.db.Metrics().BlockCache; m.Hits == 0 || m.Count == 0 {
		t.Fatalf("block cache after reading flushed entries twice: %d hits, %d entries", m.Hits, m.Count)
	}
}

func TestDiskUsageBytes(t *testing.T) {
	s := openStore(t, t.TempDir())
	storeIndexes(t, s, span(1, 100)...)
	if got := s.DiskUsageBytes(); got == 0 {
		t.Fatal("DiskUsageBytes = 0 with data stored")
	}
}

// TestConcurrentUse runs raft's access pattern under -race: one appender,
// a snapshot goroutine trimming the prefix, replication goroutines reading.
func TestConcurrentUse(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{NoSync: true, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	s.compactAfterDeletedLogs = 200

	const total = 2000
	var wg sync.WaitGroup
	var appended atomic.Uint64
	var appenderDone atomic.Bool
	errs := make(chan error, 8)
	wg.Go(func() {
		defer appenderDone.Store(true)
		for index := uint64(1); index <= total; index += 4 {
			logs := []*raft.Log{testLog(index), testLog(index + 1), testLog(index + 2), testLog(index + 3)}
			if err := s.StoreLogs(logs); err != nil {
				errs <- err
				return
			}
			appended.Store(index + 3)
		}
	})
	wg.Go(func() {
		// Keep the last 100 entries, like raft's TrailingLogs.
		var trimmed uint64
		for {
			// Read done first: once it is set, appended is final and this
			// pass trims up to it.
			done := appenderDone.Load()
			if next := appended.Load(); next > trimmed+100 {
				if err := s.DeleteRange(trimmed+1, next-100); err != nil {
					errs <- err
					return
				}
				trimmed = next - 100
			}
			if done {
				return
			}
		}
	})
	for range 4 {
		wg.Go(func() {
			for !appenderDone.Load() {
				first, _ := s.FirstIndex()
				last, _ := s.LastIndex()
				if first > last {
					continue // read between two updates
				}
				var l raft.Log
				for index := last; index >= first && index > 0 && index+50 > last; index-- {
					err := s.GetLog(index, &l)
					if errors.Is(err, raft.ErrLogNotFound) {
						continue // trimmed meanwhile
					}
					if err != nil {
						errs <- err
						return
					}
					if l.Index != index {
						errs <- fmt.Errorf("GetLog(%d) returned index %d", index, l.Index)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	first, _ := s.FirstIndex()
	last, _ := s.LastIndex()
	if first != total-99 || last != total {
		t.Fatalf("bounds = [%d, %d] after trimming to the last ~100 of %d", first, last, total)
	}
	testwait.Until(t, waitTimeout, "a compaction", func() bool { return s.compactions.Load() > 0 })
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, dir)
	requireBounds(t, s, first, last)
}

// TestCrashKeepsSyncedWrites crashes a store on a filesystem that drops
// whatever was not fsynced, and checks what survives.
func TestCrashKeepsSyncedWrites(t *testing.T) {
	for _, noSync := range []bool{false, true} {
		t.Run(fmt.Sprintf("NoSync=%v", noSync), func(t *testing.T) {
			fs := vfs.NewStrictMem()
			opts := Options{NoSync: noSync, Logger: quietLogger()}
			s, err := open("/data/raft", opts, fs)
			if err != nil {
				t.Fatal(err)
			}
			storeIndexes(t, s, span(1, 20)...)
			if err := s.DeleteRange(1, 5); err != nil {
				t.Fatal(err)
			}
			if err := s.SetUint64([]byte("CurrentTerm"), 3); err != nil {
				t.Fatal(err)
			}

			// Crash: nothing written from here on reaches the disk, and
			// the unsynced state is lost.
			fs.SetIgnoreSyncs(true)
			_ = s.Close()
			fs.ResetToSyncedState()
			fs.SetIgnoreSyncs(false)

			s, err = open("/data/raft", opts, fs)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			term, termErr := s.GetUint64([]byte("CurrentTerm"))
			if noSync {
				// Proves the test can see a missing fsync.
				requireBounds(t, s, 0, 0)
				if termErr != ErrKeyNotFound {
					t.Fatalf("GetUint64 after crash without fsync = %d, %v; want it lost", term, termErr)
				}
				return
			}
			requireBounds(t, s, 6, 20)
			requireLogs(t, s, 21, span(6, 20)...)
			if termErr != nil || term != 3 {
				t.Fatalf("GetUint64 after crash = %d, %v, want 3", term, termErr)
			}
		})
	}
}

// syncFailFS fails WAL syncs while failing is set. pebble's errorfs cannot
// do this in v1.1: it does not inject into SyncData, which the WAL uses.
type syncFailFS struct {
	vfs.FS
	failing *atomic.Bool
}

var errInjectedSync = errors.New("injected sync failure")

func (fs syncFailFS) Create(name string) (vfs.File, error) {
	f, err := fs.FS.Create(name)
	return fs.wrap(name, f), err
}

func (fs syncFailFS) ReuseForWrite(oldname, newname string) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(oldname, newname)
	return fs.wrap(newname, f), err
}

func (fs syncFailFS) wrap(name string, f vfs.File) vfs.File {
	if f == nil || !strings.HasSuffix(name, ".log") {
		return f
	}
	return syncFailFile{File: f, failing: fs.failing}
}

type syncFailFile struct {
	vfs.File
	failing *atomic.Bool
}

func (f syncFailFile) Sync() error {
	if f.failing.Load() {
		return errInjectedSync
	}
	return f.File.Sync()
}

func (f syncFailFile) SyncData() error {
	if f.failing.Load() {
		return errInjectedSync
	}
	return f.File.SyncData()
}

func (f syncFailFile) SyncTo(length int64) (bool, error) {
	if f.failing.Load() {
		return false, errInjectedSync
	}
	return f.File.SyncTo(length)
}

// TestFailedSyncIsFatal: pebble cannot tell what of a batch reached the
// disk when its WAL write or fsync fails, so it calls Logger.Fatalf, which
// panics in the writing goroutine. The write is never acknowledged and the
// cached bounds do not move; the process restarts and recovers from disk.
func TestFailedSyncIsFatal(t *testing.T) {
	failing := &atomic.Bool{}
	fs := syncFailFS{FS: vfs.NewMem(), failing: failing}
	s, err := open("/raft", Options{Logger: quietLogger()}, fs)
	if err != nil {
		t.Fatal(err)
	}
	storeIndexes(t, s, span(1, 10)...)

	failing.Store(true)
	recovered := func() (recovered any) {
		defer func() { recovered = recover() }()
		err := s.StoreLogs([]*raft.Log{testLog(11)})
		t.Errorf("StoreLogs with a failing fsync returned %v, want a panic", err)
		return nil
	}()
	if msg, _ := recovered.(string); !strings.Contains(msg, "pebble fatal error") || !strings.Contains(msg, errInjectedSync.Error()) {
		t.Fatalf("panic = %v, want pebble's fatal commit error", recovered)
	}
	requireBounds(t, s, 1, 10)
	if err := s.Close(); !errors.Is(err, errInjectedSync) {
		t.Fatalf("Close after the fatal error = %v, want the WAL failure", err)
	}
}
