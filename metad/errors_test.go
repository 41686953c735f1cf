package metad

import (
	"context"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hashicorp/raft"

	"github.com/strata-log/strata/internal/rpcerror"
	"github.com/strata-log/strata/metad/kv"
)

// TestToStatus: the one translation place gives each error its standard
// code, its reason and whether the client may retry; in particular the
// limits against hostile clients (quota, transaction size, in-flight
// writes) are distinct and clear.
func TestToStatus(t *testing.T) {
	for _, tc := range []struct {
		err       error
		code      codes.Code
		reason    string
		retryable bool
	}{
		{fmt.Errorf("apply: %w: 1000 keys", kv.ErrQuotaExceeded), codes.ResourceExhausted, ReasonQuotaExceeded, false},
		{fmt.Errorf("%w: 200 ops", errTooManyOps), codes.InvalidArgument, rpcerror.ReasonInvalid, false},
		{fmt.Errorf("%w: 32 MiB in flight", ErrBusy), codes.Unavailable, rpcerror.ReasonUnavailable, true},
		{kv.ErrValueTooLarge, codes.InvalidArgument, rpcerror.ReasonInvalid, false},
		{kv.ErrLeaseNotFound, codes.NotFound, rpcerror.ReasonNotFound, false},
		{ErrNoQuorum, codes.Unavailable, rpcerror.ReasonNoQuorum, false},
		// Outcome unknown (the request was proposed, or the leader had it):
		// LEADERSHIP_LOST, never UNAVAILABLE, which says "not applied".
		{fmt.Errorf("%w: forwarded to leader x: EOF", errForwardLost), codes.Unavailable, rpcerror.ReasonLeadershipLost, false},
		{fmt.Errorf("%w: %w", ErrLeadershipLost, ErrShutdown), codes.Unavailable, rpcerror.ReasonLeadershipLost, false},
		{fmt.Errorf("%w: %w", ErrLeadershipLost, raft.ErrRaftShutdown), codes.Unavailable, rpcerror.ReasonLeadershipLost, false},
		{ErrShutdown, codes.Unavailable, rpcerror.ReasonUnavailable, false}, // refused before proposing
		{&versionConflictError{key: "k", current: 3}, codes.FailedPrecondition, rpcerror.ReasonVersionConflict, false},
		{context.DeadlineExceeded, codes.DeadlineExceeded, "", false},
	} {
		err := toStatus(tc.err)
		if status.Code(err) != tc.code || rpcerror.Reason(err) != tc.reason || rpcerror.Retryable(err) != tc.retryable {
			t.Errorf("toStatus(%v) = %v (reason %q, retryable %v); want %v, %q, %v", tc.err, err,
				rpcerror.Reason(err), rpcerror.Retryable(err), tc.code, tc.reason, tc.retryable)
		}
	}
}
