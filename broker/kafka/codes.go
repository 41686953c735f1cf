package kafka

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/strata-log/strata/broker"
	"github.com/strata-log/strata/broker/group"
	"github.com/strata-log/strata/broker/partlog"
	"github.com/strata-log/strata/internal/acl"
)

// codeOf is the Kafka error code of a service-layer error: the adapter's
// one translation table (the gRPC adapter's is broker's classify). nil is
// 0. The order matters where errors wrap others (see each case).
func codeOf(err error) int16 {
	if err == nil {
		return 0
	}
	var denied *broker.DeniedError
	var oor *partlog.OutOfRangeError
	switch {
	case errors.Is(err, errLeaderNotAvailable):
		return kerr.LeaderNotAvailable.Code
	case errors.As(err, &denied):
		switch denied.Resource.Type {
		case acl.Group:
			return kerr.GroupAuthorizationFailed.Code
		case acl.Cluster:
			return kerr.ClusterAuthorizationFailed.Code
		}
		return kerr.TopicAuthorizationFailed.Code
	case errors.Is(err, broker.ErrNotCoordinator), errors.Is(err, group.ErrClosed):
		return kerr.NotCoordinator.Code
	case errors.Is(err, broker.ErrNotOwner):
		return kerr.NotLeaderForPartition.Code
	case errors.Is(err, broker.ErrUnknownTopic), errors.Is(err, broker.ErrUnknownPartition):
		return kerr.UnknownTopicOrPartition.Code
	case errors.Is(err, broker.ErrTopicExists):
		return kerr.TopicAlreadyExists.Code
	case errors.Is(err, broker.ErrFencedLeaderEpoch):
		return kerr.FencedLeaderEpoch.Code
	case errors.Is(err, broker.ErrUnknownLeaderEpoch):
		return kerr.UnknownLeaderEpoch.Code
	case errors.As(err, &oor):
		return kerr.OffsetOutOfRange.Code
	}
	if code, ok := logCodeOf(err); ok {
		return code
	}
	switch {
	case errors.Is(err, broker.ErrBusy):
		// A budget stayed full: nothing was done, retry later.
		return kerr.RequestTimedOut.Code
	case errors.Is(err, broker.ErrLimit):
		return kerr.PolicyViolation.Code
	case errors.Is(err, group.ErrLoading):
		return kerr.CoordinatorLoadInProgress.Code
	case errors.Is(err, broker.ErrInvalid), errors.Is(err, group.ErrInvalid):
		return kerr.InvalidRequest.Code
	case errors.Is(err, context.Canceled):
		return kerr.RequestTimedOut.Code
	}
	return kerr.UnknownServerError.Code
}

// logCodeOf is codeOf for the errors of a partition's log (appends,
// reads, producer state), and whether err is one.
func logCodeOf(err error) (int16, bool) {
	switch {
	case errors.Is(err, partlog.ErrTooLarge):
		return kerr.MessageTooLarge.Code, true
	case errors.Is(err, partlog.ErrInflated):
		// Kafka's error for a batch its validator refuses on its
		// records' contents.
		return kerr.InvalidRecord.Code, true
	case errors.Is(err, partlog.ErrCorruptBatch):
		return kerr.CorruptMessage.Code, true
	case errors.Is(err, partlog.ErrInvalidTimestamp):
		return kerr.InvalidTimestamp.Code, true
	case errors.Is(err, partlog.ErrOutOfOrderSequence):
		return kerr.OutOfOrderSequenceNumber.Code, true
	case errors.Is(err, partlog.ErrUnknownProducer):
		return kerr.UnknownProducerID.Code, true
	case errors.Is(err, partlog.ErrProducerFenced):
		return kerr.InvalidProducerEpoch.Code, true
	case errors.Is(err, partlog.ErrTierUnavailable):
		// Before DeadlineExceeded: a store read that timed out wraps
		// both, and a read can be retried.
		return kerr.KafkaStorageError.Code, true
	case errors.Is(err, partlog.ErrNotEnoughBookiesAfterAppend):
		// Handed to a ledger writer that then stalled: the batch may be
		// written once the bookies come back. Kafka's "written, but to
		// too few replicas" (retriable; idempotence keeps a retry single).
		return kerr.NotEnoughReplicasAfterAppend.Code, true
	case errors.Is(err, partlog.ErrNoLedger), errors.Is(err, partlog.ErrNotEnoughBookies), errors.Is(err, partlog.ErrListFull):
		// Nothing was written; retriable.
		return kerr.NotEnoughReplicas.Code, true
	case errors.Is(err, partlog.ErrUnknownOutcome), errors.Is(err, context.DeadlineExceeded):
		// Before ErrFenced: an append in flight when its log was fenced
		// wraps both, and may be stored. REQUEST_TIMED_OUT is Kafka's
		// "outcome unknown".
		return kerr.RequestTimedOut.Code, true
	case errors.Is(err, partlog.ErrClosed), errors.Is(err, partlog.ErrFenced), errors.Is(err, partlog.ErrConflict):
		// The partition is moving: nothing written; ask again where.
		return kerr.NotLeaderForPartition.Code, true
	}
	return 0, false
}

// messageOf is an error's text for a response's ErrorMessage (nil for
// none).
func messageOf(err error) *string {
	if err == nil {
		return nil
	}
	s := err.Error()
	return &s
}
