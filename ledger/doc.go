// Package ledger is the client half of Strata's replication protocol
// (BookKeeper's): creating ledgers, writing them with quorum acknowledgement
// and ensemble changes, reading them, fencing and recovering them, and
// closing them exactly once. The bookie, the server half, lives in
// ledger/bookie over ledger/storage, ledger/journal and ledger/index,
// on the file-system seam vfs.
//
// The protocol runs against an Env of three small interfaces and imports
// neither gRPC nor metad's client: BookieClient (real one:
// ledger/ledgergrpc), MetadataStore and BookieRegistry (real ones:
// ledger/ledgermetad, over the metad key layout of MetadataKey, NextIDKey
// and MetadataPrefix); ledger/ledgertest holds the in-memory twins.
//
// See DESIGN.md §3 for the invariants (W1–W7 in writer.go, R1–R9 in
// recovery_machine.go); every one of them comes from a data-loss bug in
// BookKeeper's history.
//
// An OPEN ledger's metadata has one other writer besides its Writer: the
// replicator (ledger/replication) may swap bookies in the fragments before
// the last one, whose entries are all acknowledged and never change (W4).
// The Writer accepts exactly that change when one of its compare-and-sets
// conflicts, and builds on top of it (W7); any other change still stops it
// (W5, or ErrWriterFailed wrapping ErrMetadataConflict).
package ledger
