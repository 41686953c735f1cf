package bookie

import (
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
