// Package corruption marks errors that mean "stored or received bytes are
// not what their writer produced" so that any caller can ask one question,
// Is, whichever package found the damage.
//
// Strata's packages each keep their own corruption sentinel, with their own
// prefix and their own documented meaning (journal.ErrCorrupt,
// segfile.ErrCorrupt, recordbatch.ErrCorrupt, ...), and callers that care
// which layer failed keep matching those. Each such sentinel is declared
// through Mark:
//
//	ErrCorrupt = corruption.Mark(errors.New("journal: corrupt"))
//
// so that every error wrapping it, at any depth and through errors.Join,
// also matches ErrCorruption. Metrics, scrubbers, operator commands and the
// translation to gRPC statuses count and report corruption with Is instead
// of listing every package's sentinel. The model is cockroachdb/pebble's
// base.MarkCorruptionError and base.IsCorruptionError.
//
// Contract:
//
//   - C1. Mark(nil) is nil. For any other err, Is(Mark(err)) holds.
//   - C2. Marking adds and hides nothing: Mark(err).Error() == err.Error(),
//     and errors.Is and errors.As find through Mark(err) whatever they find
//     through err.
//   - C3. A marked sentinel still matches itself and only itself:
//     errors.Is(x, S) for a marked S holds exactly when it held before
//     marking. Two marked sentinels never match each other.
//   - C4. Is(err) holds when err, or any error in its tree (%w wrapping,
//     multi-error Unwrap, errors.Join), is marked or is ErrCorruption.
//
// What counts as corruption: bytes that fail a checksum, a length, a magic
// number or a structural check where the writer was a Strata component (a
// journal record, an index value, a segment object, a cached chunk, a
// record batch, a Raft log record, a metad snapshot). Transient failures
// (a read cut short by the network, a timeout) are never marked, so that a
// retry is never mistaken for lost data. The package imports nothing of
// Strata.
package corruption
