// Package ledger is the client half of Strata's replication protocol
// (BookKeeper's): creating ledgers, writing them with quorum acknowledgement
// and ensemble changes, reading them, fencing and recovering them, and
// closing them exactly once. The bookie, the server half, lives in
// ledger/bookie over ledger/storage, ledger/journal and ledger/vfs.
//
// See DESIGN.md §3 for the invariants; every one of them comes from a
// data-loss bug in BookKeeper's history.
package ledger
