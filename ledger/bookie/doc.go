// Package bookie is the bookie's server: the gRPC service over the storage
// engine (ledger/storage), the bookie's identity (its cookie) and its
// registration in metad.
//
// # Identity
//
// A bookie id is bound to one data directory by a cookie: a random instance
// id stored both in DATA_DIR/COOKIE and in metad at CookiePrefix+id. A
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
// instance id) at RegistryPrefix+id, attached to a metad lease, and refreshes
// it when its state or free space changes. When the bookie dies, the lease
// expires and the registration vanishes; the cookie stays. While an operator
// has decommissioned the bookie (ledger/replication's record at
// replication.DecommissionKey(id)), it registers as READ_ONLY so that no new
// ledger or ensemble change chooses it; it still serves reads and recovery.
//
// # Autorecovery
//
// With Config.Autorecovery (the default) the bookie also runs a
// re-replication candidate (replication.Replicator): one candidate in the
// cluster is elected on a metad lease and copies the ledgers of missing or
// decommissioned bookies to others (see package ledger/replication).
package bookie
