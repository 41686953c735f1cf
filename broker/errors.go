package broker

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/strata-log/strata/broker/group"
	"github.com/strata-log/strata/broker/partlog"
	"github.com/strata-log/strata/internal/corruption"
	"github.com/strata-log/strata/internal/rpcerror"
	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/proto/commonpb"
)

// Errors of the broker's service layer (partlog and group have their
// own; the adapters translate all of them, each in one place: classify for
// gRPC, package broker/kafka's table for Kafka).
var (
	// ErrUnknownTopic, ErrUnknownPartition: no such topic (or it is being
	// deleted), no such partition of it.
	ErrUnknownTopic     = errors.New("unknown topic")
	ErrUnknownPartition = errors.New("unknown partition")
	// ErrNotOwner: another broker serves the partition, or none does yet
	// (a *RedirectError, with the owner's address when known).
	ErrNotOwner = errors.New("this broker does not own the partition")
	// ErrNotCoordinator: the group's coordinator is another broker (or
	// none yet); a *RedirectError.
	ErrNotCoordinator = errors.New("this broker is not the group's coordinator")
	ErrTopicExists    = errors.New("topic already exists")
	// ErrInvalid: the request breaks a rule; the message says which.
	// The next three say which kind of rule, and come wrapped with it.
	ErrInvalid           = errors.New("invalid request")
	ErrInvalidTopicName  = errors.New("invalid topic name")
	ErrInvalidPartitions = errors.New("invalid partition count")
	ErrInvalidConfig     = errors.New("invalid topic configuration")
	// ErrBusy: a budget stayed full, or state is still loading; retry.
	ErrBusy = errors.New("broker busy")
	// ErrLimit: a cluster limit (topics, partitions) would be passed.
	ErrLimit = errors.New("cluster limit reached")
	// ErrFencedLeaderEpoch, ErrUnknownLeaderEpoch: the client's owner
	// epoch is older / newer than the serving owner's (Kafka's KIP-320
	// checks; the client refreshes its metadata, or retries).
	ErrFencedLeaderEpoch  = errors.New("the client's leader epoch is older than the owner's")
	ErrUnknownLeaderEpoch = errors.New("the client's leader epoch is newer than the owner's")
)

// RedirectError is a not-owner or not-coordinator error that knows where to
// go: Address is the serving broker's gRPC address, BrokerID its id (both
// empty when there is none yet).
type RedirectError struct {
	err      error
	Address  string
	BrokerID string
	detail   string
}

func (e *RedirectError) Error() string {
	if e.Address != "" {
		return fmt.Sprintf("%s: %v (owner: %s)", e.detail, e.err, e.Address)
	}
	return fmt.Sprintf("%s: %v (no owner yet; retry shortly)", e.detail, e.err)
}

func (e *RedirectError) Unwrap() error { return e.err }

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// invalidKindf is an ErrInvalid that is also kind (ErrInvalidTopicName,
// ErrInvalidPartitions, ErrInvalidConfig).
func invalidKindf(kind error, format string, args ...any) error {
	return fmt.Errorf("%w: %w: %s", ErrInvalid, kind, fmt.Sprintf(format, args...))
}

// classify maps an error to a gRPC code and an ErrorInfo: the broker's one
// translation table, for whole calls (rpcError) and per-partition results
// (partitionError) alike, the group coordinator's included (its
// per-partition commit refusals reach it through
// group.Config.PartitionError).
func classify(err error) (codes.Code, *commonpb.ErrorInfo) {
	info := func(reason string, retryable bool) *commonpb.ErrorInfo {
		return &commonpb.ErrorInfo{Reason: reason, Retryable: retryable}
	}
	var redirect *RedirectError
	var oor *partlog.OutOfRangeError
	switch {
	case errors.Is(err, ErrDenied):
		return codes.PermissionDenied, info(rpcerror.ReasonDenied, false)
	case errors.As(err, &redirect) && errors.Is(err, ErrNotCoordinator):
		return codes.FailedPrecondition, &commonpb.ErrorInfo{Reason: rpcerror.ReasonNotCoordinator, Retryable: true, Redirect: redirect.Address}
	case errors.As(err, &redirect):
		return codes.FailedPrecondition, &commonpb.ErrorInfo{Reason: rpcerror.ReasonNotOwner, Retryable: true, Redirect: redirect.Address}
	case errors.Is(err, ErrUnknownTopic), errors.Is(err, ErrUnknownPartition), errors.Is(err, group.ErrNotFound), errors.Is(err, group.ErrUnknownPartition):
		return codes.NotFound, info(rpcerror.ReasonNotFound, false)
	case errors.Is(err, ErrTopicExists):
		return codes.AlreadyExists, info(rpcerror.ReasonTopicExists, false)
	case errors.Is(err, ErrBusy):
		return codes.Unavailable, info(rpcerror.ReasonUnavailable, true)
	case errors.Is(err, ErrLimit):
		return codes.ResourceExhausted, info(rpcerror.ReasonInvalid, false)
	case errors.Is(err, ErrFencedLeaderEpoch), errors.Is(err, ErrUnknownLeaderEpoch):
		return codes.FailedPrecondition, info(rpcerror.ReasonNotOwner, true)
	case errors.Is(err, ErrInvalid), errors.Is(err, group.ErrInvalid):
		return codes.InvalidArgument, info(rpcerror.ReasonInvalid, false)
	case errors.As(err, &oor):
		return codes.OutOfRange, info(rpcerror.ReasonOutOfRange, false)
	case errors.Is(err, partlog.ErrCorruptBatch):
		return codes.InvalidArgument, info(rpcerror.ReasonCorruptBatch, false)
	case errors.Is(err, partlog.ErrTooLarge):
		return codes.InvalidArgument, info(rpcerror.ReasonTooLarge, false)
	case errors.Is(err, partlog.ErrInvalidTimestamp):
		return codes.InvalidArgument, info(rpcerror.ReasonInvalid, false)
	case errors.Is(err, partlog.ErrOutOfOrderSequence):
		return codes.FailedPrecondition, info(rpcerror.ReasonOutOfOrderSequence, false)
	case errors.Is(err, partlog.ErrUnknownProducer):
		return codes.FailedPrecondition, info(rpcerror.ReasonUnknownProducerID, false)
	case errors.Is(err, partlog.ErrProducerFenced):
		return codes.FailedPrecondition, info(rpcerror.ReasonProducerFenced, false)
	case errors.Is(err, partlog.ErrListFull):
		// Retention frees the list in time; the client retries within its
		// delivery timeout.
		return codes.ResourceExhausted, info(rpcerror.ReasonUnavailable, true)
	case errors.Is(err, partlog.ErrTierUnavailable):
		// Before DeadlineExceeded: a read from the object store that
		// timed out wraps both, and a read can simply be retried.
		return codes.Unavailable, info(rpcerror.ReasonUnavailable, true)
	case errors.Is(err, partlog.ErrNoLedger), errors.Is(err, partlog.ErrNotEnoughBookies):
		// Before DeadlineExceeded: nothing was written (a ledger create
		// that timed out wraps both); the client retries.
		return codes.Unavailable, info(rpcerror.ReasonUnavailable, true)
	case errors.Is(err, partlog.ErrUnknownOutcome), errors.Is(err, context.DeadlineExceeded):
		// Before ErrFenced: an append in flight when its log was fenced
		// wraps both, and may be stored (M1).
		return codes.Unavailable, info(rpcerror.ReasonUnknownOutcome, false)
	case errors.Is(err, partlog.ErrClosed), errors.Is(err, partlog.ErrFenced), errors.Is(err, partlog.ErrConflict):
		// The partition is moving (released, or taken by another broker):
		// nothing was written; ask again where it lives.
		return codes.Unavailable, info(rpcerror.ReasonNotOwner, true)
	case errors.Is(err, context.Canceled):
		return codes.Canceled, info(rpcerror.ReasonUnavailable, true)
	case errors.Is(err, group.ErrClosed):
		return codes.FailedPrecondition, info(rpcerror.ReasonNotCoordinator, true)
	case errors.Is(err, group.ErrLoading):
		return codes.Unavailable, info(rpcerror.ReasonCoordinatorLoading, true)
	case errors.Is(err, group.ErrUnknownMember):
		return codes.FailedPrecondition, info(rpcerror.ReasonUnknownMemberID, false)
	case errors.Is(err, group.ErrFencedMemberEpoch):
		return codes.FailedPrecondition, info(rpcerror.ReasonFencedMemberEpoch, false)
	case errors.Is(err, group.ErrStaleMemberEpoch):
		return codes.FailedPrecondition, info(rpcerror.ReasonStaleMemberEpoch, true)
	case errors.Is(err, group.ErrPartitionNotHeld):
		// One partition of a commit: heartbeating does not give it back.
		return codes.FailedPrecondition, info(rpcerror.ReasonStaleMemberEpoch, false)
	case errors.Is(err, group.ErrGroupNotEmpty):
		return codes.FailedPrecondition, info(rpcerror.ReasonGroupNotEmpty, false)
	case errors.Is(err, group.ErrGroupMaxSize), errors.Is(err, group.ErrLimitExceeded):
		return codes.ResourceExhausted, info(rpcerror.ReasonInvalid, false)
	case corruption.Is(err):
		// Last: stored data failed its checks (a segment object, an entry
		// with a corrupt copy and no good one read) and no case above says
		// more. Never served; asking again reads the same bytes.
		return codes.DataLoss, info(rpcerror.ReasonCorrupt, false)
	}
	return codes.Internal, info(rpcerror.ReasonInternal, false)
}

// rpcError turns an error into the status a whole RPC returns.
func rpcError(err error) error {
	if err == nil {
		return nil
	}
	code, info := classify(err)
	return rpcerror.Error(code, info, err.Error())
}

// partitionError turns an error into a per-partition error.
func partitionError(err error) *brokerpb.PartitionError {
	if err == nil {
		return nil
	}
	code, info := classify(err)
	return &brokerpb.PartitionError{Code: int32(code), Info: info, Message: err.Error()}
}

// unmarshalled decodes a metad value, for records the broker itself wrote.
func unmarshalled[T any, P interface {
	*T
	proto.Message
}](value []byte) (P, error) {
	m := P(new(T))
	return m, proto.Unmarshal(value, m)
}
