// Package metad is one member of Strata's metadata service: a hashicorp/raft
// node replicating the key-value state machine of package kv, its gRPC
// service (any member accepts any request: followers forward writes and
// linearizable reads to the leader), the leader's lease expiry, and the
// one place where its errors become gRPC statuses (errors.go). Operating
// it: docs/metad.md.
//
// # Limits
//
// Every member holds the whole store, its watch history and its recent
// Raft log in memory, so whatever one client can make metad hold, it can
// make every member hold at once (unbounded, 300 puts of 1 MiB to one key
// took every member to about 1 GB). The server bounds:
//
//   - the watch history by bytes as well as revisions (Config.HistoryBytes,
//     kv rule L2);
//   - live keys, their bytes and granted leases (Config.QuotaKeys,
//     QuotaBytes, QuotaLeases): the leader stamps them on every txn and
//     lease grant it proposes (metadpb.Limits) and the state machine
//     refuses what would grow past them (kv rule L1), so members with
//     different flags still agree; refusals are RESOURCE_EXHAUSTED with
//     reason QUOTA_EXCEEDED, not retryable;
//   - a transaction's compares and ops (Config.MaxTxnOps, checked before
//     proposing: INVALID_ARGUMENT) and a List page (kv rule L3);
//   - the in-memory Raft log cache (raftstore.LogCache: entries over
//     logCacheMaxEntryBytes are not cached) and the bytes proposed and not
//     yet applied (maxProposalBytes: beyond, a write waits, and fails with
//     ErrBusy, not applied, if its deadline passes first).
//
// Lease ids are drawn at random (crypto/rand) by the leader and written in
// the grant command, so they are unpredictable and still the same on every
// replica and every replay; an id already granted is refused by the state
// machine, alike everywhere, and the leader draws again. Members from
// before random ids apply such commands identically.
//
// None of this is authentication. Without TLS anyone who reaches a member
// can write or delete any key; with TLS, internal/authz admits only
// certificates of cluster roles and admins (rules A3, A4; docs/security.md),
// and the member that takes a key-value call checks every key it names
// against the caller's role (internal/authz's key table, K1-K9; access.go)
// before serving or forwarding it: a Get, List, Watch, each compare and
// op of a transaction (Put and Delete are transactions), and the keys of
// a lease renewed, revoked or attached to. Forwarded calls carry the
// forwarding member's certificate (role metad, unrestricted).
package metad
