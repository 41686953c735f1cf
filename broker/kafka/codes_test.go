package kafka

import (
	"context"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/strata-log/strata/broker/partlog"
)

// TestProduceCodesSayWhetherWritten: a produce refused before anything was
// written is NOT_ENOUGH_REPLICAS; one handed to a ledger writer that then
// stalled may still be written, which Kafka calls
// NOT_ENOUGH_REPLICAS_AFTER_APPEND; an outcome unknown for another reason
// is REQUEST_TIMED_OUT. All three are retriable for Kafka's clients.
func TestProduceCodesSayWhetherWritten(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want *kerr.Error
	}{
		{partlog.ErrNotEnoughBookies, kerr.NotEnoughReplicas},
		{fmt.Errorf("%w: creating: not enough bookies", partlog.ErrNoLedger), kerr.NotEnoughReplicas},
		{fmt.Errorf("%w: ledger 3", partlog.ErrNotEnoughBookiesAfterAppend), kerr.NotEnoughReplicasAfterAppend},
		{fmt.Errorf("%w: waiting: %w", partlog.ErrUnknownOutcome, context.DeadlineExceeded), kerr.RequestTimedOut},
	} {
		if got := codeOf(tc.err); got != tc.want.Code {
			t.Errorf("codeOf(%v) = %v, want %v", tc.err, kerr.ErrorForCode(got), tc.want)
		}
		if !tc.want.Retriable {
			t.Errorf("%v is not retriable for Kafka's clients", tc.want)
		}
	}
}
