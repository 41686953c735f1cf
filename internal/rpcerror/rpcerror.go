package rpcerror

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/strata-log/strata/proto/commonpb"
)

// Reasons: stable words in ErrorInfo.reason. Clients match on these.
const (
	ReasonNotLeader       = "NOT_LEADER"       // sent to a follower that could not forward; redirect names the leader
	ReasonNoLeader        = "NO_LEADER"        // no leader is known; the request was not applied
	ReasonNoQuorum        = "NO_QUORUM"        // a write was not committed within its deadline; outcome unknown
	ReasonLeadershipLost  = "LEADERSHIP_LOST"  // the leader stepped down while the write was in flight; outcome unknown
	ReasonVersionConflict = "VERSION_CONFLICT" // a compare-and-set found another version
	ReasonCompacted       = "COMPACTED"        // a watch asked for history that is gone; re-list
	ReasonNotFound        = "NOT_FOUND"
	ReasonInvalid         = "INVALID_ARGUMENT"
	ReasonUnavailable     = "UNAVAILABLE" // the node cannot serve now (starting, shutting down)
	ReasonInternal        = "INTERNAL"
	ReasonFenced          = "FENCED"            // a ledger was fenced by a newer writer
	ReasonReadOnly        = "READ_ONLY"         // a bookie is read-only (disk nearly full); retry elsewhere
	ReasonCorrupt         = "CORRUPT"           // stored data failed its checksum; never served
	ReasonLimbo           = "LIMBO"             // a bookie that may have lost data cannot answer "absent"
	ReasonDiskError       = "DISK_ERROR"        // a bookie's disk failed the read (EIO); retry on another copy
	ReasonDenied          = "PERMISSION_DENIED" // the caller's certificate role may not make this call

	// Broker reasons.
	ReasonNotOwner           = "NOT_OWNER"             // this broker does not own the partition; redirect names the owner when known
	ReasonNotCoordinator     = "NOT_COORDINATOR"       // this broker is not the group's coordinator; redirect names it when known
	ReasonCoordinatorLoading = "COORDINATOR_LOADING"   // the coordinator is replaying its offsets partition
	ReasonOutOfRange         = "OUT_OF_RANGE"          // a fetch offset outside [log start, high watermark]
	ReasonCorruptBatch       = "CORRUPT_BATCH"         // a produced batch failed its CRC or is malformed
	ReasonTooLarge           = "TOO_LARGE"             // a produced batch exceeds max.message.bytes
	ReasonOutOfOrderSequence = "OUT_OF_ORDER_SEQUENCE" // an idempotent batch skipped a sequence number
	ReasonProducerFenced     = "PRODUCER_FENCED"       // a newer epoch of the producer id exists
	ReasonUnknownProducerID  = "UNKNOWN_PRODUCER_ID"   // the partition knows no batch of the producer id and the batch does not start at sequence 0
	ReasonUnknownOutcome     = "UNKNOWN_OUTCOME"       // the write may or may not have been stored
	ReasonFencedMemberEpoch  = "FENCED_MEMBER_EPOCH"   // the group member must rejoin with epoch 0
	ReasonStaleMemberEpoch   = "STALE_MEMBER_EPOCH"    // the member's epoch is behind; heartbeat, then retry
	ReasonUnknownMemberID    = "UNKNOWN_MEMBER_ID"     // the group has no such member
	ReasonTopicExists        = "TOPIC_EXISTS"          // a topic with that name exists
	ReasonGroupNotEmpty      = "GROUP_NOT_EMPTY"       // the group still has members
	ReasonThrottled          = "THROTTLED"             // too many failed logins from the caller's address lately; retry after the delay the message names
)

// LeaderHeader is a response header a follower sets when it forwarded a
// request to the leader: the leader's client address, so the client can go
// there directly next time and save a hop.
const LeaderHeader = "strata-leader"

// Error builds a status error with an ErrorInfo detail.
func Error(code codes.Code, info *commonpb.ErrorInfo, msg string) error {
	st := status.New(code, msg)
	if withDetails, err := st.WithDetails(info); err == nil {
		st = withDetails
	}
	return st.Err()
}

// New is Error with the common fields spelled out.
func New(code codes.Code, reason string, retryable bool, msg string) error {
	return Error(code, &commonpb.ErrorInfo{Reason: reason, Retryable: retryable}, msg)
}

// Info returns the ErrorInfo carried by err, or nil when err is not a status
// error with one.
func Info(err error) *commonpb.ErrorInfo {
	st, ok := status.FromError(err)
	if !ok {
		return nil
	}
	for _, d := range st.Details() {
		if info, ok := d.(*commonpb.ErrorInfo); ok {
			return info
		}
	}
	return nil
}

// Reason returns the reason word of err's ErrorInfo, or "".
func Reason(err error) string {
	if info := Info(err); info != nil {
		return info.Reason
	}
	return ""
}

// Retryable reports whether err says the request may be repeated unchanged.
func Retryable(err error) bool {
	info := Info(err)
	return info != nil && info.Retryable
}

// FromContext maps a context error to a status: the caller's own deadline
// or cancellation, not the server's fault.
func FromContext(err error) error {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	}
	return nil
}
