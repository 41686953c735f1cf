// Package kv is the state machine of metad: a deterministic, in-memory,
// versioned key-value store with a global revision, watch history, leases
// and member records. The Raft wiring feeds it committed commands
// (metadpb.Command) through Apply; the gRPC server reads it. There is no
// Raft, network, clock or goroutine in this package: expiring leases is the
// leader's job (it proposes a LeaseRevokeCommand), and waiting for changes is
// the caller's (Changed).
//
// # Determinism
//
// Apply is a function of the state and the command (and, for a lease grant
// with id 0, the log index): the same commands in the same order give the
// same state and the same responses on every replica. Nothing depends on map
// iteration order, time, randomness or a member's configuration: quotas
// travel in the command (Limits), and random lease ids are drawn by the
// proposer and written in the command. Snapshot followed by Restore on
// another Store gives a store that answers every further command exactly as
// the original would.
//
// # Keys, values and revisions
//
// A key is a non-empty string of valid UTF-8 of at most MaxKeyBytes (4096)
// bytes; a value is at most MaxValueBytes (1 MiB). Keys are ordered by their
// bytes.
//
// The global revision starts at 0 and counts changes to the key space. A txn
// that changes at least one key takes the next revision, once: every key it
// writes or deletes carries that revision. A txn that changes nothing (no
// ops, or only deletes of absent keys), a txn whose compares fail, leases
// and member records do not move the revision. A lease revoke that deletes
// keys takes one revision for all of them.
//
// Each key has:
//   - version: 1 after the put that created it, +1 for every later put;
//     0 means absent.
//   - create_revision: the revision of the put that created it (kept across
//     later puts; a key deleted and put again is created anew).
//   - mod_revision: the revision of its last put.
//   - lease: the lease it is attached to, 0 for none.
//
// # Txn semantics
//
// A TxnRequest is validated as a whole first; if anything is invalid Apply
// returns an error and nothing changes. Then its compares are checked: a
// Compare{key, version} holds iff the key's version equals version (0: the
// key is absent). If any fails, Apply returns TxnResponse{Succeeded: false,
// Revision: current, Current: the present KeyValue of every compared key, in
// compare order, KeyValue{Key: k} with version 0 for an absent one} and
// changes nothing. Otherwise the ops apply in order, a later op seeing the
// effect of earlier ones, and the response has Succeeded, the revision after
// the txn and one OpResult per op:
//   - PutOp: writes the key (see versions above) and returns a copy of the
//     new KeyValue in OpResult.Kv. A non-zero lease attaches the key to that
//     lease, which must exist; lease 0 detaches the key from any lease.
//   - DeleteOp: removes the key, or with prefix every key starting with Key,
//     in key order, and returns the count in OpResult.Deleted. Deleted keys
//     leave their lease. An empty Key is invalid even with prefix: deleting
//     the whole key space takes an explicit list of prefixes.
//
// # Leases
//
// LeaseGrantCommand{id, ttl_ms} creates a lease; id 0 means "use the log
// index as the id" (commands from before random ids; the server now draws
// a random id in [1, 2^63-1] before proposing, so ids cannot be enumerated,
// and draws again if the grant is refused because the id exists). The TTL
// is stored and reported, never timed here.
// LeaseRevokeCommand{id} deletes every key attached to the lease, in key
// order at one new revision (none if it has no keys), and removes the lease.
// Granting and revoking leases fire Changed but do not move the revision.
//
// # Members
//
// MemberInfo upserts the member record with that id; a MemberInfo whose
// client_address is empty deletes the record. Member records are not part of
// the revision or the watch history.
//
// # Watch history
//
// Every revision is recorded as one WatchResponse holding all its events in
// the order they happened: a PUT event carries the new KeyValue, a DELETE
// event carries KeyValue{Key, ModRevision: the delete's revision}. The
// store keeps the last Options.HistoryRevisions revisions, and drops older
// ones while the history's events hold more than Options.HistoryBytes
// (each event is charged its key and value bytes plus a fixed 96), except
// the newest revision, which always stays; when it drops the oldest, the
// compact revision becomes that revision. Events serves from > compact
// revision; it starts at 0, so a fresh store serves every revision from 1.
// The bounds are a member's own: they change which revisions a watch can
// resume from on that member, never the state or a response of Apply.
//
// # Limits
//
// Every member holds the whole store in memory, so whatever a client can
// make it hold, it can make every member hold at once.
// Besides the key and value sizes above:
//   - L1 Quotas. A command may carry Limits (max_keys, max_data_bytes,
//     max_leases; 0 is no bound), stamped by the proposer. A txn whose
//     compares hold and whose ops would leave more live keys than
//     max_keys while adding keys, or more key and value bytes than
//     max_data_bytes while adding bytes, is refused with ErrQuotaExceeded
//     and changes nothing. What it adds is computed exactly, op by op,
//     deletes credited. A write that does not grow an exceeded quantity
//     (a delete, a smaller value) always goes through, so a store over a
//     lowered quota can be cleaned up. A lease grant when max_leases are
//     granted is refused the same way. A store from before Limits
//     ignores them, so every member must run a version that knows them
//     before a write can reach a quota (docs/metad.md).
//   - L2 History by bytes (above).
//   - L3 List pages: at most MaxListLimit keys whatever the limit asked,
//     and no more key and value bytes than MaxListBytes beyond the first
//     key; more says whether to go on.
//
// # Errors
//
// Apply wraps a sentinel error with detail (match with errors.Is); the
// applied index still advances, and nothing else changes:
//   - ErrInvalidCommand: a nil command or empty oneof; a nil txn, compare,
//     op or empty op oneof; a compare version < 0; a lease grant with
//     ttl_ms <= 0, a negative id, an id that already exists, or id 0 at log
//     index 0; a member record with an empty id.
//   - ErrInvalidKey: a compare, put or delete key that is empty, longer
//     than MaxKeyBytes or not valid UTF-8.
//   - ErrValueTooLarge: a put value longer than MaxValueBytes.
//   - ErrLeaseNotFound: a put naming a lease that does not exist (the whole
//     txn is rejected, whatever its compares), or a revoke of an unknown
//     lease.
//   - ErrQuotaExceeded: a txn or lease grant over the command's Limits
//     (L1).
//
// A txn whose compares fail is not an error (Succeeded is false).
//
// Events returns a *CompactedError, for which errors.Is(err, ErrCompacted)
// holds, when from <= CompactRevision(). No other call returns an error.
//
// # Concurrency and ownership
//
// A Store is safe for concurrent use. Apply and Restore are meant for one
// goroutine (the apply loop); reads may run from many and see the state
// between two commands, never in the middle of one. Changed returns a channel
// closed by the next Apply or Restore that changes the revision, the leases
// or the members (a rejected command or a no-op txn does not).
//
// Messages returned by Get, List, Leases, Members, Member and Apply are new
// and belong to the caller, but byte slices (values) inside them are shared
// with the store and must not be modified. The Events and KeyValues inside
// the responses of Events are shared with the store and other watchers and
// must be treated as read-only. The store never modifies anything it has
// handed out. Snapshot returns a full deep copy; Restore and Apply copy what
// they keep.
//
// # Snapshot format
//
// Snapshot returns the whole state as a metadpb.Snapshot: revision, compact
// revision, kvs sorted by key, leases sorted by id, members sorted by id and
// the history oldest first, one WatchResponse per revision. The data-bytes
// total is not stored: Restore sums it from the kvs. Which keys a
// lease holds is not stored: it is derived from the kvs' lease fields. Two
// stores in the same state give proto.Equal snapshots. The applied index is
// not part of the snapshot; Restore takes it separately (Raft keeps it in
// the snapshot's metadata).
package kv
