package metaclient

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/strata-log/strata/internal/rpcerror"
)

// Sentinel errors. Calls wrap them together with the server's status error,
// so errors.Is matches the sentinel and status.Code / rpcerror.Info still see
// the original status. doc.go lists which call returns which.
var (
	// ErrNotFound: Get of a missing key; MemberRemove of an unknown member.
	ErrNotFound = errors.New("metaclient: not found")
	// ErrVersionConflict: a compare-and-set (WithExpectedVersion) found
	// another version. The write was not applied.
	ErrVersionConflict = errors.New("metaclient: version conflict")
	// ErrCompacted: a watch asked for revisions that are gone. The error is a
	// *CompactedError carrying the oldest revision still available.
	ErrCompacted = errors.New("metaclient: revision compacted")
	// ErrLeaseNotFound: the lease does not exist (expired or revoked).
	ErrLeaseNotFound = errors.New("metaclient: lease not found")
	// ErrNoQuorum: a write was not committed within its deadline: the
	// server said NO_QUORUM, or the attempt's deadline passed after the
	// request was sent. The outcome is unknown, so such errors also match
	// ErrUnknownOutcome.
	ErrNoQuorum = errors.New("metaclient: no quorum")
	// ErrUnavailable: no endpoint could serve the call (no leader, endpoints
	// down or shutting down) before the caller's context ended, or a write
	// was refused by a member that could not serve it. The request was not
	// applied, except that a write refused by a member that is shutting down
	// (reason UNAVAILABLE) is reported here too: metad refuses those before
	// proposing.
	ErrUnavailable = errors.New("metaclient: unavailable")
	// ErrUnknownOutcome: a write may or may not have been applied: the
	// server reported NO_QUORUM or LEADERSHIP_LOST (also when the member
	// that forwarded it lost the leader's answer, or the leader shut down
	// with it proposed), or the connection broke or the deadline passed
	// after the request was sent. Read back before
	// deciding what to do.
	ErrUnknownOutcome = errors.New("metaclient: write outcome unknown")
	// ErrClosed: the Client was closed.
	ErrClosed = errors.New("metaclient: client closed")
	// ErrQuotaExceeded: the write would grow metad past a quota (keys,
	// bytes of keys and values, leases). It was not applied; only deletes,
	// or a higher quota, make room.
	ErrQuotaExceeded = errors.New("metaclient: quota exceeded")
)

// reasonQuotaExceeded is metad.ReasonQuotaExceeded (code
// RESOURCE_EXHAUSTED).
const reasonQuotaExceeded = "QUOTA_EXCEEDED"

// CompactedError is returned (as a watch's final WatchResult.Err) when a
// watch starts from, or has to resume from, a revision that was compacted
// away. errors.Is(err, ErrCompacted) holds. The caller must re-list and watch
// again from the list's revision+1.
type CompactedError struct {
	// CompactRevision is the oldest revision a watch may start from.
	CompactRevision int64
	// err is the server's status error.
	err error
}

func (e *CompactedError) Error() string {
	msg := fmt.Sprintf("%v (oldest available revision %d)", ErrCompacted, e.CompactRevision)
	if e.err != nil {
		msg += ": " + e.err.Error()
	}
	return msg
}

// Is makes errors.Is(err, ErrCompacted) hold.
func (e *CompactedError) Is(target error) bool { return target == ErrCompacted }

// Unwrap returns the server's status error.
func (e *CompactedError) Unwrap() error { return e.err }

// callError is the error every failed call returns: the operation, the
// sentinels that describe the failure, and the last error the server or
// transport reported.
type callError struct {
	op       string  // "put", "get", ...
	key      string  // the key, prefix or id the call was about; may be empty
	endpoint string  // where the last attempt went; may be empty
	kinds    []error // sentinels and context errors, matched by errors.Is
	err      error   // the last status error; may be nil
}

func (e *callError) Error() string {
	var b strings.Builder
	b.WriteString("metaclient: ")
	b.WriteString(e.op)
	if e.key != "" {
		fmt.Fprintf(&b, " %q", e.key)
	}
	if e.endpoint != "" {
		b.WriteString(" at ")
		b.WriteString(e.endpoint)
	}
	for _, k := range e.kinds {
		b.WriteString(": ")
		b.WriteString(strings.TrimPrefix(k.Error(), "metaclient: "))
	}
	if e.err != nil {
		b.WriteString(": ")
		b.WriteString(e.err.Error())
	}
	return b.String()
}

func (e *callError) Unwrap() []error {
	out := make([]error, 0, len(e.kinds)+1)
	out = append(out, e.kinds...)
	if e.err != nil {
		out = append(out, e.err)
	}
	return out
}

// at records in err (a *callError) the endpoint of the last attempt.
func at(err error, endpoint string) error {
	var ce *callError
	if errors.As(err, &ce) {
		ce.endpoint = endpoint
	}
	return err
}

// translate turns the final error of a call into the error the caller sees.
// sent reports whether the request may have reached a server.
func translate(o *op, err error, sent bool) error {
	if errors.Is(err, ErrClosed) {
		kinds := []error{ErrClosed}
		if o.kind == kindWrite && sent {
			kinds = append(kinds, ErrUnknownOutcome)
		}
		return &callError{op: o.name, key: o.key, kinds: kinds}
	}
	info := rpcerror.Info(err)
	reason := ""
	if info != nil {
		reason = info.Reason
	}
	var kinds []error
	switch reason {
	case rpcerror.ReasonNotFound:
		kinds = []error{o.notFound()}
	case rpcerror.ReasonVersionConflict:
		kinds = []error{ErrVersionConflict}
	case reasonQuotaExceeded:
		kinds = []error{ErrQuotaExceeded}
	case rpcerror.ReasonCompacted:
		return &CompactedError{CompactRevision: info.CompactRevision, err: err}
	case rpcerror.ReasonNoQuorum:
		kinds = []error{ErrNoQuorum, ErrUnknownOutcome}
	case rpcerror.ReasonLeadershipLost:
		kinds = []error{ErrUnknownOutcome}
	case rpcerror.ReasonNoLeader, rpcerror.ReasonNotLeader, rpcerror.ReasonUnavailable:
		kinds = []error{ErrUnavailable}
	default:
		switch status.Code(err) {
		case codes.NotFound:
			kinds = []error{o.notFound()}
		case codes.DeadlineExceeded:
			if o.kind == kindWrite && sent {
				// Sent but not confirmed within its deadline: what the
				// server reports as NO_QUORUM when it answers in time.
				kinds = []error{ErrNoQuorum, ErrUnknownOutcome}
			} else {
				kinds = []error{ErrUnavailable}
			}
		case codes.Unavailable, codes.Canceled:
			if o.kind == kindWrite && sent {
				kinds = []error{ErrUnknownOutcome}
			} else {
				kinds = []error{ErrUnavailable}
			}
		}
	}
	return &callError{op: o.name, key: o.key, kinds: kinds, err: err}
}

// attempt is the error of one attempt and the endpoint it went to.
type attempt struct {
	err      error
	endpoint string
}

// giveUp builds the error for a call whose context ended. last is the
// attempt that was cut short or could not be retried in time (zero if
// none), retried the last attempt that made the call retry (zero if none
// did). mayHaveApplied reports whether last's request may have been applied.
func giveUp(ctx context.Context, o *op, last, retried attempt, mayHaveApplied bool) error {
	var kinds []error
	switch {
	case o.kind == kindWrite && mayHaveApplied:
		kinds = append(kinds, ErrUnknownOutcome)
	case retried.err != nil || (last.err != nil && !isContextStatus(last.err)):
		// The cluster answered, just not usefully, before time ran out.
		kinds = append(kinds, ErrUnavailable)
	}
	kinds = append(kinds, context.Cause(ctx))
	// Report what the cluster said, not the echo of our own deadline.
	reported := last
	if (reported.err == nil || isContextStatus(reported.err)) && retried.err != nil {
		reported = retried
	}
	return &callError{op: o.name, key: o.key, endpoint: reported.endpoint, kinds: kinds, err: reported.err}
}

// isContextStatus reports whether err is only the echo of the caller's own
// cancellation or deadline, which says nothing about the cluster.
func isContextStatus(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	if rpcerror.Info(err) != nil {
		return false
	}
	c := status.Code(err)
	return c == codes.Canceled || c == codes.DeadlineExceeded
}
