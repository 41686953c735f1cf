// Package bookie is the bookie's server: the gRPC service over the storage
// engine (ledger/storage), the bookie's identity (its cookie) and its
// registration in metad.
//
// # Identity
//
// A bookie id is bound to one data directory by a cookie: a random instance
// id stored both in DATA_DIR/COOKIE and in metad at bookies.CookiePrefix+id. A
// bookie whose disk was wiped or swapped must never serve under its old id:
// it would answer "no such entry" for entries it once acknowledged, and
// ledger recovery would truncate acknowledged data (BookKeeper #2908).
// Start-up therefore compares the two:
//
//	data dir cookie | metad cookie | result
//	----------------+--------------+---------------------------------------
//	none, dir empty | none         | new bookie: write COOKIE.pending, CAS the
//	                |              | metad cookie (create-only), rename
//	                |              | COOKIE.pending to COOKIE, fsync the dir
//	same instance   | same         | start
//	none            | present      | refuse: disk wiped or replaced
//	present         | none         | refuse: metad forgot it (or another cluster's disk)
//	different       | present      | refuse: another bookie's disk
//	none, data dir  | any          | refuse: data without a cookie
//	holds data      |              |
//
// COOKIE.pending with a matching metad cookie finishes an interrupted
// creation.
//
// # Registration
//
// A running bookie keeps BookieInfo (address, state, disk space, rack,
// instance id) at bookies.RegistryPrefix+id, attached to a metad lease, and refreshes
// it when its state or free space changes. When the bookie dies, the lease
// expires and the registration vanishes; the cookie stays. While an operator
// has decommissioned the bookie (ledger/replication's record at
// replication.DecommissionKey(id)), it registers as READ_ONLY so that no new
// ledger or ensemble change chooses it; it still serves reads and recovery.
//
// # Shutdown
//
// Drain (on SIGTERM, while the gRPC server still serves) ends the calls
// that would otherwise hold the server's graceful stop: each add stream
// answers the adds it took and ends at its next add (UNAVAILABLE,
// retryable: the writer replaces the bookie), and long-polled LAC reads
// return the state they have; cmd/bookie then gives the rest StopTimeout.
// Close stops the replicator (which resigns its leadership) beside the
// registration, so their two lease revocations overlap, then closes the
// storage (syncing what the journal holds).
//
// # Autorecovery
//
// With Config.Autorecovery (the default) the bookie also runs a
// re-replication candidate (replication.Replicator): one candidate in the
// cluster is elected on a metad lease and copies the ledgers of missing or
// decommissioned bookies to others (see package ledger/replication).
//
// # Buggy and hostile requests
//
// Without TLS the API has no authentication; with TLS, LACs and deletes
// come only from broker and admin certificates, adds and fences from
// broker, admin and bookie certificates (internal/authz A1;
// docs/security.md), and:
//
//   - G1 a bookie's certificate adds entries, fences a ledger or reads
//     with fence only while it names the elected replicator (the bookie
//     id in replication.LeaderKey equals the certificate's name): the
//     replicator copies entries and recovers the open ledgers of lost
//     bookies; no other bookie has a reason to write to or fence a ledger
//     on another. ServerOptions installs the check (replicatorGate) after
//     internal/authz's. It trusts the leader it read for leaderTrust when
//     the caller is that leader, and reads it again for another caller
//     once its last read is leaderRecheck old, so a refused caller costs
//     metad at most one read per leaderRecheck. Refusals are
//     PERMISSION_DENIED naming the replicator and the caller; a leader it
//     cannot read is UNAVAILABLE (retryable).
//
// Either way two storage rules
// bound what one request can do to entries other writers stored
// (ledger/storage/doc.go, "Hostile and buggy writers"): an add that would
// replace a stored entry with other bytes is answered ADD_ENTRY_CONFLICT
// (C2; recovery adds of the same bytes succeed), and a LAC, explicit or
// piggybacked, is kept only up to the highest entry held (H1), below the
// entry it came with, and up to the highest entry whose digest this
// bookie checked (H2). Adds for a ledger metad does not know are accepted
// and collected by the orphan sweep below.
//
// # Digest checks
//
// For H2 the bookie checks each add's entry against its ledger's digest
// key (digestKeys, storage.Options.Verify; what that proves is V1 in
// ledger/doc.go). The key comes from the ledger's metadata in metad, read
// in the background the first time an entry of the ledger arrives (at
// most 4 reads in flight, each ledger read once and remembered, up to
// 65,536 ledgers): an add never waits for metad, and until the key is
// known the ledger's LAC waits here, which only makes a recovery start
// lower. A ledger metad does not know is remembered as such, so adds for
// made-up ledger ids cost metad one read each, at most 4 at a time. An
// entry whose digest does not match is stored as before (readers ignore
// it, ledger D1) and counted in strata_bookie_add_digest_mismatches_total,
// with a warning at most every 10s. A ledger without a key (created
// before digests) has nothing to check: its entries all count. The service maps storage.ErrEntryConflict to
// ADD_ENTRY_CONFLICT (addStatus) and, for unary calls, to AlreadyExists
// with reason ENTRY_CONFLICT (toStatus). FuzzRequests checks both rules
// against arbitrary requests.
//
// # Orphan sweep
//
// ledger.Delete removes a ledger's metadata first and then asks each
// bookie to delete its copy; a bookie that is down then, or a replaced
// bookie that comes back, keeps a copy nothing refers to. Every
// Config.LedgerGCInterval (--ledger-gc-interval, default 5m; 0 turns it
// off) the bookie lists the ledgers it holds (storage.Storage.Ledgers),
// then every ledger id metad knows (one keys-only listing of
// ledger.MetadataPrefix), and deletes what metad has stopped listing. The
// decision is decideOrphans, a pure function; orphanSweeper does the I/O.
//
//   - O1 A ledger held here that metad does not list is deleted once it has
//     been seen absent for longer than Config.LedgerGCGrace
//     (--ledger-gc-grace, default 1h, at least 1s). When each was first
//     seen absent is kept in memory only: a restart starts the clocks
//     again, which only delays deletion. Absence is final: ledger ids are
//     never reused (the counter at ledger.NextIDKey only advances and
//     metadata is created create-only), so a ledger metad stopped listing
//     never comes back.
//   - O2 The local listing is taken before the metad listing. A ledger's
//     metadata exists before any of its records reaches a bookie:
//     ledger.Create learns the id only from MetadataStore.Create, which
//     has stored the metadata, and returns the writer only then;
//     recovery and re-replication only touch ledgers they read from
//     metad. So every ledger in the local listing had its metadata when
//     the metad listing began, and that listing (linearizable reads; a
//     paged listing still returns every key that exists from its start to
//     its end) includes it unless it was deleted. A ledger being created
//     is never seen absent.
//   - O3 The sweep acts only on a complete listing: metad's List returns
//     every page or an error, and a key under the prefix that is not a
//     ledger key is an error. On any error nothing is deleted and the
//     first-seen times are kept.
//   - O4 The sweep trusts only a metad that holds this bookie's cookie with
//     the instance id it runs under; any other (another cluster's metad,
//     one restored from a backup older than this bookie) cannot say which
//     ledgers exist, so the sweep does nothing (ErrUntrustedMetad).
//   - O5 A ledger that metad lists is never deleted here, in any state (open,
//     in recovery, fenced, closed), even when no fragment names this
//     bookie any more. Such a copy (left behind by re-replication or an
//     ensemble change) cannot be told apart safely from a copy being
//     made: writers and the replicator write entries to a bookie before
//     the compare-and-set that names it in the metadata (DESIGN.md §3,
//     ledger/replication rule 4), and a writer may pick this bookie again
//     for a later fragment right after the sweep read the metadata; no
//     local check orders a local delete against that remote
//     compare-and-set, and a grace period only narrows the race. Fragments
//     also name bookies by address, which changes when a bookie moves.
//     Such copies are reclaimed when their ledger is deleted (retention):
//     metad then stops listing it and O1 applies.
//   - O6 Deletion is storage.Storage.Delete (journaled, so replay does not
//     bring the ledger back; journal GC then frees the space), one ledger
//     at a time, each logged with its id. A fenced ledger leaves a fenced
//     tombstone (storage F1) that Ledgers does not list, so the next sweep
//     does not delete it again. An error stops the sweep until
//     the next one. The sweep runs on the Bookie's WaitGroup; Close
//     cancels it and waits for it before closing the storage.
//
// Metrics: strata_bookie_ledger_gc_orphaned_ledgers (held here, absent
// from metad at the last sweep, not yet deleted),
// strata_bookie_ledger_gc_deleted_ledgers_total,
// strata_bookie_ledger_gc_errors_total and
// strata_bookie_ledger_gc_last_sweep_timestamp_seconds (last sweep that
// completed without error).
package bookie
