// Package ledger is the client half of Strata's replication protocol
// (BookKeeper's): creating ledgers, writing them with quorum acknowledgement
// and ensemble changes, reading them, fencing and recovering them, and
// closing them exactly once. The bookie, the server half, lives in
// ledger/bookie over ledger/storage, ledger/journal, ledger/index and
// ledger/vfs.
//
// The protocol runs against an Env of three small interfaces and imports
// neither gRPC nor metad's client: BookieClient (real one:
// ledger/ledgergrpc), MetadataStore and BookieRegistry (real ones:
// ledger/ledgermetad, over the metad key layout of MetadataKey, NextIDKey
// and MetadataPrefix); ledger/ledgertest holds the in-memory twins.
//
// See DESIGN.md §3 for the invariants (W1–W6 in writer.go, R1–R7 in
// recovery_machine.go); every one of them comes from a data-loss bug in
// BookKeeper's history.
package ledger
