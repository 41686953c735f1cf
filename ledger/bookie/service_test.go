package bookie

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"syscall"
	"testing"

	pebblevfs "github.com/cockroachdb/pebble/vfs"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/strata-log/strata/internal/rpcerror"
	"github.com/strata-log/strata/ledger/index"
	"github.com/strata-log/strata/ledger/journal"
	"github.com/strata-log/strata/ledger/storage"
	"github.com/strata-log/strata/proto/bookiepb"
	"github.com/strata-log/strata/vfs"
)

// TestAddStatus: every storage outcome of an add maps to the status a
// writer acts on; a refused overwrite (C2) is its own, non-retryable one.
func TestAddStatus(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bookiepb.AddStatus
	}{
		{nil, bookiepb.AddStatus_ADD_OK},
		{fmt.Errorf("x: %w", storage.ErrFenced), bookiepb.AddStatus_ADD_FENCED},
		{storage.ErrReadOnly, bookiepb.AddStatus_ADD_READ_ONLY},
		{storage.ErrInvalid, bookiepb.AddStatus_ADD_INVALID},
		{fmt.Errorf("ledger 1 entry 0: %w", storage.ErrEntryConflict), bookiepb.AddStatus_ADD_ENTRY_CONFLICT},
		{storage.ErrFailed, bookiepb.AddStatus_ADD_FAILED},
		{storage.ErrClosed, bookiepb.AddStatus_ADD_FAILED},
		{errors.New("read: i/o error"), bookiepb.AddStatus_ADD_FAILED},
	} {
		if got := addStatus(tc.err); got != tc.want {
			t.Errorf("addStatus(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
	err := toStatus(storage.ErrEntryConflict)
	if status.Code(err) != codes.AlreadyExists || rpcerror.Retryable(err) || rpcerror.Reason(err) != reasonEntryConflict {
		t.Errorf("toStatus(ErrEntryConflict) = %v", err)
	}
}

// TestCorruptStatus: a read that found corruption answers DATA_LOSS /
// CORRUPT, not retryable, whichever layer found it (corruption.Is), so
// that the reader tries another copy and never takes it for an absence.
func TestCorruptStatus(t *testing.T) {
	for _, err := range []error{
		fmt.Errorf("%w: ledger 1 entry 0: %w", storage.ErrCorrupt, journal.ErrCorrupt),
		fmt.Errorf("%w: ledger 1 entry 0: index: %w", storage.ErrCorrupt, index.ErrCorrupt),
		fmt.Errorf("reading: %w", journal.ErrCorrupt),
	} {
		st := toStatus(err)
		if status.Code(st) != codes.DataLoss || rpcerror.Reason(st) != rpcerror.ReasonCorrupt || rpcerror.Retryable(st) {
			t.Errorf("toStatus(%v) = %v, want DataLoss CORRUPT not retryable", err, st)
		}
	}
}

// TestDiskErrorStatus: a read the disk failed answers UNAVAILABLE /
// DISK_ERROR, retryable, so the reader goes to another copy and never takes
// it for an absence or for corruption.
func TestDiskErrorStatus(t *testing.T) {
	err := fmt.Errorf("%w: ledger 1 entry 0: %w", storage.ErrIO, &fs.PathError{Op: "read", Path: "j", Err: syscall.EIO})
	st := toStatus(err)
	if status.Code(st) != codes.Unavailable || rpcerror.Reason(st) != rpcerror.ReasonDiskError || !rpcerror.Retryable(st) {
		t.Errorf("toStatus(%v) = %v, want Unavailable DISK_ERROR retryable", err, st)
	}
}

// TestFenceAnswerIsComplete: a bookie not in limbo answers a fence with
// its last entry and complete set, which recovery counts as a negative for
// every entry above it (ledger R9). (In limbo, complete is false: the
// storage's Limbo, set on replaying a corrupt journal record, is tested in
// ledger/storage.)
func TestFenceAnswerIsComplete(t *testing.T) {
	ctx := context.Background()
	st := memStorage(t)
	for entry := range uint64(2) {
		done := make(chan error, 1)
		if err := st.Add(ctx, 9, entry, int64(entry)-1, []byte("x"), false, func(err error) { done <- err }); err != nil || <-done != nil {
			t.Fatalf("add %d: %v", entry, err)
		}
	}
	s := &service{store: st, info: func() *bookiepb.BookieInfo { return &bookiepb.BookieInfo{} }, draining: context.Background()}
	resp, err := s.Fence(ctx, &bookiepb.FenceRequest{LedgerId: 9})
	if err != nil || resp.LastEntryId != 1 || !resp.Complete {
		t.Fatalf("Fence: %v, %v; want last entry 1, complete", resp, err)
	}
}

// A bookie in limbo (its journal replay met a damaged record: entries it
// acknowledged may be gone) answers a fence as not complete, so recovery
// does not count its last_entry_id as proof of absence (R9): here the
// lost entry is above the last entry it still reports.
func TestFenceInLimboIsNotComplete(t *testing.T) {
	ctx := context.Background()
	mem, index := vfs.NewMem(), pebblevfs.NewStrictMem()
	opts := storage.Options{
		FS: mem, IndexFS: index, Dir: "/bookie",
		JournalMaxFileBytes: 1 << 20, JournalPreallocateBytes: -1, MaxEntryBytes: 64 << 10,
		DiskCheckInterval: -1, CheckpointInterval: -1, GCInterval: -1,
		OnFatal: func(err error) { t.Errorf("fatal: %v", err) },
	}
	st, err := storage.Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	add := func(ledgerID, entry uint64, payload string) {
		t.Helper()
		done := make(chan error, 1)
		if err := st.Add(ctx, ledgerID, entry, int64(entry)-1, []byte(payload), false, func(err error) { done <- err }); err != nil || <-done != nil {
			t.Fatalf("add %d/%d: %v", ledgerID, entry, err)
		}
	}
	add(9, 0, "entry zero")
	add(9, 1, "entry one, damaged later")
	add(10, 0, "a later record")
	// Crash (no checkpoint was taken: replay reads every record), and
	// damage ledger 9's entry 1 in the middle of the journal.
	index.SetIgnoreSyncs(true)
	crashed := mem.Crash(vfs.CrashOptions{})
	st.Close()
	index.ResetToSyncedState()
	index.SetIgnoreSyncs(false)
	damageJournal(t, crashed, "/bookie/journal", []byte("entry one, damaged later"))
	opts.FS = crashed
	if st, err = storage.Open(ctx, opts); err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if !st.Limbo() {
		t.Fatal("storage not in limbo after replaying a damaged record")
	}
	s := &service{store: st, info: func() *bookiepb.BookieInfo { return &bookiepb.BookieInfo{} }, draining: context.Background()}
	resp, err := s.Fence(ctx, &bookiepb.FenceRequest{LedgerId: 9})
	if err != nil || resp.Complete {
		t.Fatalf("Fence in limbo: %v, %v; want an answer that is not complete", resp, err)
	}
}

// damageJournal flips a byte of the first occurrence of marker in the
// journal files under dir.
func damageJournal(t *testing.T, mem *vfs.MemFS, dir string, marker []byte) {
	t.Helper()
	names, err := mem.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		path := dir + "/" + name
		f, err := mem.OpenReadWrite(path)
		if err != nil {
			t.Fatal(err)
		}
		info, err := f.Stat()
		if err != nil {
			t.Fatal(err)
		}
		data := make([]byte, info.Size())
		if _, err := f.ReadAt(data, 0); err != nil {
			t.Fatal(err)
		}
		if i := bytes.Index(data, marker); i >= 0 {
			data[i] ^= 0x5a // rewritten from there: the files append only
			if err := f.Truncate(int64(i)); err != nil {
				t.Fatal(err)
			}
			if _, err := f.Write(data[i:]); err != nil {
				t.Fatal(err)
			}
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
			f.Close()
			return
		}
		f.Close()
	}
	t.Fatalf("%q is in no journal file under %s", marker, dir)
}
