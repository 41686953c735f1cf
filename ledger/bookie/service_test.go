package bookie

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/strata-log/strata/internal/rpcerror"
	"github.com/strata-log/strata/ledger/storage"
	"github.com/strata-log/strata/proto/bookiepb"
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
	s := &service{store: st, info: func() *bookiepb.BookieInfo { return &bookiepb.BookieInfo{} }}
	resp, err := s.Fence(ctx, &bookiepb.FenceRequest{LedgerId: 9})
	if err != nil || resp.LastEntryId != 1 || !resp.Complete {
		t.Fatalf("Fence: %v, %v; want last entry 1, complete", resp, err)
	}
}
