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
// expires and the registration vanishes; the cookie stays.
package bookie
