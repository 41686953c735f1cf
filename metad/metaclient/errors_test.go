package metaclient

import (
	"errors"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/strata-log/strata/internal/rpcerror"
)

// TestQuotaExceededIsItsOwnError: metad's RESOURCE_EXHAUSTED with reason
// QUOTA_EXCEEDED reaches the caller as ErrQuotaExceeded, not as an unknown
// outcome: the write was refused.
func TestQuotaExceededIsItsOwnError(t *testing.T) {
	status := rpcerror.New(codes.ResourceExhausted, reasonQuotaExceeded, false, "metad: quota exceeded: 10 keys")
	err := translate(&op{name: "put", key: "k", kind: kindWrite}, status, true)
	if !errors.Is(err, ErrQuotaExceeded) || errors.Is(err, ErrUnknownOutcome) || errors.Is(err, ErrUnavailable) {
		t.Fatalf("translate = %v", err)
	}
}
