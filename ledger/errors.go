package ledger

import "errors"

// Sentinel errors of the ledger client protocol. Match them with errors.Is:
// the package wraps them with %w to add the ledger id, the bookie or the
// cause.
//
// Which call returns which:
//
//	Create           ErrInvalid (options), ErrNotEnoughBookies, or the
//	                 registry's / metadata store's error, wrapped.
//	Append,          ErrFenced, ErrLedgerClosed, ErrWriterFailed, or ctx's
//	AppendSync       error (while waiting for in-flight bytes to drain;
//	                 AppendSync also while waiting for the acknowledgement:
//	                 unknown outcome).
//	Append callback  nil, ErrFenced, ErrWriterFailed or ErrLedgerClosed.
//	                 Every error is an UNKNOWN OUTCOME: the entry may or may
//	                 not be part of the ledger once it is recovered.
//	AppendAcks       as Append (and ErrInvalid for an unknown level); its
//	                 level callback: nil, the writer's terminal error
//	                 (unknown outcome), or ErrUnderReplicated (AckAll: the
//	                 entry IS acknowledged, but its write set is incomplete).
//	Close            nil, ErrFenced (a recovery closed or is closing the
//	                 ledger at another last entry), or the metadata store's
//	                 error / ctx's error (the ledger is then still OPEN in
//	                 metadata and must be recovered).
//	Recover          ErrNoSuchLedger, ErrInvalid (malformed metadata, or a
//	                 bookie rejected a recovery add as invalid),
//	                 ErrEntryConflict (bookies hold different bytes for
//	                 one entry), ErrMetadataConflict (the ledger went back
//	                 to OPEN, which only a bug can do), or ctx's error (not
//	                 enough bookies answered to decide, or an entry below
//	                 the LAC that no bookie holds: never a truncation).
//	Placement        ChooseEnsemble: ErrInvalid, ErrNotEnoughBookies;
//	                 ChooseReplacement: ErrNotEnoughBookies.
//
// A MetadataStore returns ErrNoSuchLedger and ErrMetadataConflict.
var (
	// ErrFenced: a newer writer (a recovery) fenced the ledger. The writer
	// gets no further acknowledgement; the outcome of its pending entries
	// is unknown (recovery may or may not include them).
	ErrFenced = errors.New("ledger: fenced")
	// ErrLedgerClosed: the writer is closed (or closing): no more appends.
	// Entries still pending when Close gave up also fail with it, with an
	// unknown outcome.
	ErrLedgerClosed = errors.New("ledger: closed")
	// ErrNoSuchLedger: no metadata for the ledger id.
	ErrNoSuchLedger = errors.New("ledger: no such ledger")
	// ErrMetadataConflict: a compare-and-set on the ledger's metadata found
	// another version.
	ErrMetadataConflict = errors.New("ledger: metadata version conflict")
	// ErrNotEnoughBookies: fewer writable bookies than needed for an
	// ensemble or a replacement.
	ErrNotEnoughBookies = errors.New("ledger: not enough bookies")
	// ErrWriterFailed: the writer stopped after an unrecoverable problem (a
	// bookie rejected an entry as invalid, or the metadata changed under
	// it in a way only another writer could cause). Pending entries have an
	// unknown outcome.
	ErrWriterFailed = errors.New("ledger: writer failed")
	// ErrInvalid: a malformed argument (options, metadata).
	ErrInvalid = errors.New("ledger: invalid argument")
	// ErrEntryConflict: a bookie answered ADD_ENTRY_CONFLICT to a recovery
	// add: it holds other bytes for the entry than the copy recovery read
	// elsewhere. Entries are immutable, so a copy was tampered with; the
	// ledger is left IN_RECOVERY for an operator (R7 in
	// recovery_machine.go). Not retryable.
	ErrEntryConflict = errors.New("ledger: bookies hold different bytes for one entry")
)
