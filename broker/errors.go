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
	"github.com/strata-log/strata/internal/loginlimit"
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

// class is how one kind of error reaches gRPC clients.
type class struct {
	errs      []error
	code      codes.Code
	reason    string
	retryable bool
}

// classes is classify's table for sentinel errors, in the order they are
// tried: where errors wrap others, the first match decides (the comments
// say which).
var classes = []class{
	{[]error{ErrUnknownTopic, ErrUnknownPartition, group.ErrNotFound, group.ErrUnknownPartition}, codes.NotFound, rpcerror.ReasonNotFound, false},
	{[]error{ErrTopicExists}, codes.AlreadyExists, rpcerror.ReasonTopicExists, false},
	{[]error{ErrBusy, loginlimit.ErrBusy}, codes.Unavailable, rpcerror.ReasonUnavailable, true},
	{[]error{ErrUnauthenticated}, codes.Unauthenticated, rpcerror.ReasonDenied, false},
	{[]error{loginlimit.ErrThrottled}, codes.ResourceExhausted, rpcerror.ReasonThrottled, true},
	{[]error{ErrLimit}, codes.ResourceExhausted, rpcerror.ReasonInvalid, false},
	{[]error{ErrFencedLeaderEpoch, ErrUnknownLeaderEpoch}, codes.FailedPrecondition, rpcerror.ReasonNotOwner, true},
	// Before ErrInvalid: these wrap it.
	{[]error{group.ErrInvalidSessionTimeout, group.ErrInvalidRegularExpression, group.ErrOffsetMetadataTooLarge,
		group.ErrUnsupportedAssignor}, codes.InvalidArgument, rpcerror.ReasonInvalid, false},
	{[]error{ErrInvalid, group.ErrInvalid}, codes.InvalidArgument, rpcerror.ReasonInvalid, false},
	{[]error{partlog.ErrCorruptBatch}, codes.InvalidArgument, rpcerror.ReasonCorruptBatch, false},
	{[]error{partlog.ErrTooLarge}, codes.InvalidArgument, rpcerror.ReasonTooLarge, false},
	{[]error{partlog.ErrInflated}, codes.InvalidArgument, rpcerror.ReasonInvalid, false},
	{[]error{partlog.ErrInvalidTimestamp}, codes.InvalidArgument, rpcerror.ReasonInvalid, false},
	{[]error{partlog.ErrOutOfOrderSequence}, codes.FailedPrecondition, rpcerror.ReasonOutOfOrderSequence, false},
	{[]error{partlog.ErrUnknownProducer}, codes.FailedPrecondition, rpcerror.ReasonUnknownProducerID, false},
	{[]error{partlog.ErrProducerFenced}, codes.FailedPrecondition, rpcerror.ReasonProducerFenced, false},
	// Retention frees the list in time; the client retries within its
	// delivery timeout.
	{[]error{partlog.ErrListFull}, codes.ResourceExhausted, rpcerror.ReasonUnavailable, true},
	// Handed to a stalled ledger writer: unknown outcome (it wraps
	// ErrUnknownOutcome; named for the reader).
	{[]error{partlog.ErrNotEnoughBookiesAfterAppend}, codes.Unavailable, rpcerror.ReasonUnknownOutcome, false},
	// Before DeadlineExceeded: a read from the object store that timed out
	// wraps both, and a read can simply be retried; nothing was written by
	// a ledger create that timed out either.
	{[]error{partlog.ErrTierUnavailable, partlog.ErrNoLedger, partlog.ErrNotEnoughBookies}, codes.Unavailable, rpcerror.ReasonUnavailable, true},
	// Before ErrFenced: an append in flight when its log was fenced wraps
	// both, and may be stored.
	{[]error{partlog.ErrUnknownOutcome, context.DeadlineExceeded}, codes.Unavailable, rpcerror.ReasonUnknownOutcome, false},
	// The partition is moving (released, or taken by another broker):
	// nothing was written; ask again where it lives.
	{[]error{partlog.ErrClosed, partlog.ErrFenced, partlog.ErrConflict}, codes.Unavailable, rpcerror.ReasonNotOwner, true},
	{[]error{context.Canceled}, codes.Canceled, rpcerror.ReasonUnavailable, true},
	{[]error{group.ErrClosed}, codes.FailedPrecondition, rpcerror.ReasonNotCoordinator, true},
	{[]error{group.ErrLoading}, codes.Unavailable, rpcerror.ReasonCoordinatorLoading, true},
	{[]error{group.ErrUnknownMember}, codes.FailedPrecondition, rpcerror.ReasonUnknownMemberID, false},
	{[]error{group.ErrFencedMemberEpoch}, codes.FailedPrecondition, rpcerror.ReasonFencedMemberEpoch, false},
	{[]error{group.ErrStaleMemberEpoch}, codes.FailedPrecondition, rpcerror.ReasonStaleMemberEpoch, true},
	// One partition of a commit: heartbeating does not give it back.
	{[]error{group.ErrPartitionNotHeld}, codes.FailedPrecondition, rpcerror.ReasonStaleMemberEpoch, false},
	{[]error{group.ErrGroupNotEmpty}, codes.FailedPrecondition, rpcerror.ReasonGroupNotEmpty, false},
	{[]error{group.ErrGroupMaxSize, group.ErrLimitExceeded}, codes.ResourceExhausted, rpcerror.ReasonInvalid, false},
	// A group of the other protocol (classic or KIP-848), or a static
	// member's instance id held by another member: the request cannot
	// succeed as sent.
	{[]error{group.ErrInconsistentGroupProtocol, group.ErrFencedInstanceID, group.ErrUnreleasedInstanceID,
		group.ErrGroupSubscribedToTopic, group.ErrIllegalGeneration, group.ErrMemberIDRequired}, codes.FailedPrecondition, rpcerror.ReasonInvalid, false},
	{[]error{group.ErrRebalanceInProgress}, codes.FailedPrecondition, rpcerror.ReasonUnavailable, true},
}

// classify maps an error to a gRPC code and an ErrorInfo: the broker's one
// translation table for gRPC (the Kafka adapter has its own), for whole
// calls (rpcError) and per-partition results (partitionError) alike, the
// group coordinator's included (its per-partition commit refusals reach it
// through group.Config.PartitionError).
func classify(err error) (codes.Code, *commonpb.ErrorInfo) {
	var redirect *RedirectError
	var oor *partlog.OutOfRangeError
	switch {
	case errors.Is(err, ErrDenied):
		return codes.PermissionDenied, &commonpb.ErrorInfo{Reason: rpcerror.ReasonDenied}
	case errors.As(err, &redirect) && errors.Is(err, ErrNotCoordinator):
		return codes.FailedPrecondition, &commonpb.ErrorInfo{Reason: rpcerror.ReasonNotCoordinator, Retryable: true, Redirect: redirect.Address}
	case errors.As(err, &redirect):
		return codes.FailedPrecondition, &commonpb.ErrorInfo{Reason: rpcerror.ReasonNotOwner, Retryable: true, Redirect: redirect.Address}
	case errors.As(err, &oor):
		return codes.OutOfRange, &commonpb.ErrorInfo{Reason: rpcerror.ReasonOutOfRange}
	}
	for _, c := range classes {
		for _, e := range c.errs {
			if errors.Is(err, e) {
				return c.code, &commonpb.ErrorInfo{Reason: c.reason, Retryable: c.retryable}
			}
		}
	}
	if corruption.Is(err) {
		// Last: stored data failed its checks (a segment object, an entry
		// with a corrupt copy and no good one read) and no case above says
		// more. Never served; asking again reads the same bytes.
		return codes.DataLoss, &commonpb.ErrorInfo{Reason: rpcerror.ReasonCorrupt}
	}
	return codes.Internal, &commonpb.ErrorInfo{Reason: rpcerror.ReasonInternal}
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
