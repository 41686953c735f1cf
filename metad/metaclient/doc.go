// Package metaclient is the Go client of metad, the metadata service
// (proto/metad/v1/metad.proto). Brokers, bookies and the strata CLI use it
// for reads, compare-and-set writes, watches and leases.
//
// # Endpoints
//
// A Client holds one gRPC connection per endpoint, created by New and
// connected on first use. Every call first tries the preferred endpoint:
// initially the first configured one, afterwards the last one that served a
// call, or the leader's client address when a server's ErrorInfo.redirect
// named it (a redirect target that is not configured is dialled and joins
// the rotation, up to 8 such addresses). When an attempt fails in a way that
// may be retried, the next attempt goes to the next endpoint in the rotation
// (or straight to the redirect target), after a backoff that starts at 50ms
// and doubles up to 1s, with jitter. Any member serves any request: followers
// forward writes and linearizable reads to the leader themselves, so the
// leader is only preferred, never required.
//
// # Retry rules
//
// Every attempt is bounded by Config.RequestTimeout; a call as a whole is
// bounded only by its context, and every call returns promptly once the
// context is done.
//
//   - Reads (Get, List, Status, KeepAlive, and Watch subscriptions) retry on
//     any codes.Unavailable, on a per-attempt deadline, and on any error
//     whose ErrorInfo.retryable is true, across endpoints, until ctx is done.
//     KeepAlive is idempotent and so counts as a read.
//   - Writes (Put, Delete, Txn, Grant, Revoke, MemberAdd, MemberRemove)
//     retry only when the server marked the error retryable (NO_LEADER,
//     NOT_LEADER: the request was not applied) or when the request never
//     left the client: gRPC had no transport stream for it (connection
//     refused, endpoint unresolvable, still connecting when the attempt's
//     deadline passed). Anything else (NO_QUORUM, LEADERSHIP_LOST, a
//     connection that broke or a deadline that passed after the request was
//     sent) may have applied the write, so it is returned to the caller as
//     ErrUnknownOutcome, never repeated behind its back.
//   - StatusOf makes exactly one attempt at exactly the endpoint given.
//
// # Errors
//
// Every error wraps the last gRPC status error seen, so status.Code and
// rpcerror.Info work on it, and the sentinels below, so errors.Is works.
// When ctx ends first, the error also matches ctx's error
// (context.DeadlineExceeded or context.Canceled).
//
//	Get                 ErrNotFound (missing key), ErrUnavailable
//	List, Status        ErrUnavailable
//	Put                 ErrVersionConflict (WithExpectedVersion),
//	                    ErrLeaseNotFound (WithLease), ErrQuotaExceeded,
//	                    ErrNoQuorum, ErrUnknownOutcome, ErrUnavailable
//	Delete              ErrVersionConflict, ErrNoQuorum, ErrUnknownOutcome,
//	                    ErrUnavailable (a missing key is not an error)
//	Txn                 ErrLeaseNotFound, ErrQuotaExceeded, ErrNoQuorum,
//	                    ErrUnknownOutcome, ErrUnavailable (failed compares
//	                    are not an error)
//	Grant               ErrQuotaExceeded, ErrNoQuorum, ErrUnknownOutcome,
//	                    ErrUnavailable
//	KeepAlive           ErrLeaseNotFound, ErrUnavailable
//	Revoke              ErrLeaseNotFound, ErrNoQuorum, ErrUnknownOutcome,
//	                    ErrUnavailable
//	StatusOf            ErrUnavailable (that endpoint did not answer)
//	MemberAdd           ErrNoQuorum, ErrUnknownOutcome, ErrUnavailable
//	MemberRemove        ErrNotFound, ErrNoQuorum, ErrUnknownOutcome,
//	                    ErrUnavailable
//	Watch (final Err)   *CompactedError (errors.Is ErrCompacted), ErrClosed
//	every call          ErrClosed after Close; codes.InvalidArgument
//	                    statuses for bad input, without a sentinel
//
// Reasons map to sentinels as follows: NOT_FOUND → ErrNotFound, or
// ErrLeaseNotFound for lease calls and writes that attach a lease;
// VERSION_CONFLICT → ErrVersionConflict; COMPACTED → *CompactedError;
// NO_QUORUM → ErrNoQuorum and ErrUnknownOutcome; LEADERSHIP_LOST →
// ErrUnknownOutcome; NO_LEADER, NOT_LEADER, UNAVAILABLE → ErrUnavailable.
// Without a reason: codes.NotFound maps like NOT_FOUND; a write sent whose
// attempt ended in codes.DeadlineExceeded → ErrNoQuorum and
// ErrUnknownOutcome (not committed within its deadline); a write sent whose
// connection broke → ErrUnknownOutcome; anything else Unavailable →
// ErrUnavailable.
//
// # Watches
//
// Watch delivers every revision under a prefix exactly once, in order. It
// subscribes with progress_notify, tracks the highest revision delivered and,
// when the stream breaks (endpoint death, server error), resubscribes on the
// next endpoint from that revision+1, with backoff, dropping any event a
// server repeats. A watch from revision 0 first reads the current revision
// (linearizably), so "from now" is pinned before the first subscription and a
// resubscription cannot skip anything. A compacted start revision ends the
// watch with a *CompactedError; the caller re-lists and watches again.
//
// # Sessions
//
// A Session is a lease kept alive every TTL/3 by a goroutine that the
// session owns. The session is lost (Done closes) when a keep-alive reports
// the lease gone, or when no keep-alive has succeeded for a whole TTL
// measured from the sending of the last successful one, which is when the
// server may already have expired it. Session.Close revokes the lease (best
// effort) and waits for the goroutine.
//
// # Goroutines
//
// Watches and sessions run goroutines that the Client owns: Client.Close
// stops them and waits for them before closing the connections.
package metaclient
