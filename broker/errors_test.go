package broker

import (
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/strata-log/strata/broker/partlog"
	"github.com/strata-log/strata/internal/rpcerror"
)

// What a client is told decides whether its retry can duplicate a record:
// NOT_OWNER (retryable) only when nothing was written.
func TestClassifyAppendOutcomes(t *testing.T) {
	for _, tc := range []struct {
		name      string
		err       error
		code      codes.Code
		reason    string
		retryable bool
	}{
		{"refused by a fenced log", fmt.Errorf("%w: ledger fenced", partlog.ErrFenced), codes.Unavailable, rpcerror.ReasonNotOwner, true},
		{"refused by a closed log", partlog.ErrClosed, codes.Unavailable, rpcerror.ReasonNotOwner, true},
		// M1: in flight when the log was fenced: may be stored.
		{"in flight when fenced", fmt.Errorf("%w: in flight: %w", partlog.ErrUnknownOutcome, partlog.ErrFenced), codes.Unavailable, rpcerror.ReasonUnknownOutcome, false},
		{"in flight when the CAS was lost", fmt.Errorf("%w: in flight: %w", partlog.ErrUnknownOutcome, partlog.ErrConflict), codes.Unavailable, rpcerror.ReasonUnknownOutcome, false},
	} {
		code, info := classify(tc.err)
		if code != tc.code || info.GetReason() != tc.reason || info.GetRetryable() != tc.retryable {
			t.Errorf("%s: %v %s retryable=%v, want %v %s retryable=%v", tc.name, code, info.GetReason(), info.GetRetryable(), tc.code, tc.reason, tc.retryable)
		}
	}
}
