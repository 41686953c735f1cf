package metad

import (
	"context"
	"errors"
	"fmt"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/strata-log/strata/internal/rpcerror"
	"github.com/strata-log/strata/metad/kv"
	"github.com/strata-log/strata/proto/commonpb"
)

// Errors the server's calls return before translation to gRPC statuses.
var (
	// ErrNoLeader: no leader was known within the request's deadline. The
	// request was not applied; retry.
	ErrNoLeader = errors.New("metad: no leader (is a quorum of members up?)")
	// ErrNotLeader: this member is not the leader and could not forward.
	// The request was not applied; retry at the leader.
	ErrNotLeader = errors.New("metad: not the leader")
	// ErrNoQuorum: a write was proposed but not committed within its
	// deadline. Its outcome is unknown.
	ErrNoQuorum = errors.New("metad: no quorum: write not committed within its deadline (outcome unknown)")
	// ErrLeadershipLost: the leader stepped down with the write in flight.
	// Its outcome is unknown.
	ErrLeadershipLost = errors.New("metad: leadership lost while the write was in flight (outcome unknown)")
	// ErrVersionConflict: a compare-and-set found a different version.
	ErrVersionConflict = errors.New("metad: version conflict")
	// ErrShutdown: the member is stopping.
	ErrShutdown = errors.New("metad: shutting down")
	// ErrBusy: the leader had too many bytes of writes in flight for the
	// request's deadline. The write was not proposed; retry.
	ErrBusy = errors.New("metad: busy: the write was not proposed")
	// errTooManyOps: a transaction has more compares or ops than
	// Config.MaxTxnOps (INVALID_ARGUMENT).
	errTooManyOps = errors.New("metad: too many operations in one transaction")
)

// ReasonQuotaExceeded is the ErrorInfo reason of a write refused by a
// quota (kv.ErrQuotaExceeded, code RESOURCE_EXHAUSTED). It belongs with
// the other reasons in internal/rpcerror; metaclient matches it.
const ReasonQuotaExceeded = "QUOTA_EXCEEDED"

// notLeaderError is ErrNotLeader with the leader's client address.
type notLeaderError struct{ leader string }

func (e *notLeaderError) Error() string {
	return fmt.Sprintf("%v: leader is at %s", ErrNotLeader, e.leader)
}

func (e *notLeaderError) Is(target error) bool { return target == ErrNotLeader }

// versionConflictError carries the version the key has now.
type versionConflictError struct {
	key     string
	current int64
}

func (e *versionConflictError) Error() string {
	return fmt.Sprintf("%v: key %q is at version %d", ErrVersionConflict, e.key, e.current)
}

func (e *versionConflictError) Is(target error) bool { return target == ErrVersionConflict }

// toStatus is the one place where the server's errors become gRPC statuses.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err // already translated (e.g. by the leader we forwarded to)
	}
	info := func(reason string, retryable bool) *commonpb.ErrorInfo {
		return &commonpb.ErrorInfo{Reason: reason, Retryable: retryable}
	}
	var compacted *kv.CompactedError
	var notLeader *notLeaderError
	switch {
	case errors.As(err, &compacted):
		return rpcerror.Error(codes.OutOfRange, &commonpb.ErrorInfo{
			Reason: rpcerror.ReasonCompacted, CompactRevision: compacted.CompactRevision,
		}, err.Error())
	case errors.As(err, &notLeader):
		return rpcerror.Error(codes.Unavailable, &commonpb.ErrorInfo{
			Reason: rpcerror.ReasonNotLeader, Retryable: true, Redirect: notLeader.leader,
		}, err.Error())
	case errors.Is(err, ErrNoLeader), errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrEnqueueTimeout):
		return rpcerror.Error(codes.Unavailable, info(rpcerror.ReasonNoLeader, true), err.Error())
	case errors.Is(err, ErrNoQuorum):
		return rpcerror.Error(codes.Unavailable, info(rpcerror.ReasonNoQuorum, false), err.Error())
	case errors.Is(err, errForwardLost):
		// The leader had the request: its outcome is unknown, which
		// clients learn from LEADERSHIP_LOST (UNAVAILABLE says "not
		// applied", and a caller may then delete what the write named).
		return rpcerror.Error(codes.Unavailable, info(rpcerror.ReasonLeadershipLost, false), err.Error())
	case errors.Is(err, ErrLeadershipLost), errors.Is(err, raft.ErrLeadershipLost):
		return rpcerror.Error(codes.Unavailable, info(rpcerror.ReasonLeadershipLost, false), err.Error())
	case errors.Is(err, ErrShutdown), errors.Is(err, raft.ErrRaftShutdown):
		return rpcerror.Error(codes.Unavailable, info(rpcerror.ReasonUnavailable, false), ErrShutdown.Error())
	case errors.Is(err, ErrVersionConflict):
		return rpcerror.Error(codes.FailedPrecondition, info(rpcerror.ReasonVersionConflict, false), err.Error())
	case errors.Is(err, kv.ErrLeaseNotFound):
		return rpcerror.Error(codes.NotFound, info(rpcerror.ReasonNotFound, false), err.Error())
	case errors.Is(err, kv.ErrQuotaExceeded):
		// Not retryable as is: only deletes (or a higher quota) make room.
		return rpcerror.Error(codes.ResourceExhausted, info(ReasonQuotaExceeded, false), err.Error())
	case errors.Is(err, ErrBusy):
		return rpcerror.Error(codes.Unavailable, info(rpcerror.ReasonUnavailable, true), err.Error())
	case errors.Is(err, kv.ErrInvalidKey), errors.Is(err, kv.ErrValueTooLarge), errors.Is(err, kv.ErrInvalidCommand),
		errors.Is(err, errInvalidArgument), errors.Is(err, errTooManyOps):
		return rpcerror.Error(codes.InvalidArgument, info(rpcerror.ReasonInvalid, false), err.Error())
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return rpcerror.FromContext(err)
	}
	return rpcerror.Error(codes.Internal, info(rpcerror.ReasonInternal, false), err.Error())
}

// errInvalidArgument marks request validation failures found by the server
// (the store reports its own).
var errInvalidArgument = errors.New("metad: invalid argument")

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errInvalidArgument}, args...)...)
}
