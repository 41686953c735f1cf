// Package scrub checks the segment objects that metad names against the
// object store: for each committed TieredSegment, that its object exists,
// has the recorded size, passes every checksum of the STRATSEG format and
// its MAC under the cluster's tier key (segfile.Verify reads every byte)
// and holds what the record says. It is the offline half of tiering
// invariants T8, T10 and T11: the uploader verifies an object once before
// committing it; scrub finds what happened to it since (a deleted or
// truncated object, a bit flipped at rest, an object replaced or moved by
// whoever can write the bucket, a record that does not match its object).
//
// # Contract
//
//   - Run is a pure function of the store and the list of segments it is
//     given: it reads (Stat, GetRange) and never writes or deletes, and it
//     does not read metad (the caller lists the PartitionLogs). Segments
//     are checked Config.Parallel at a time; every goroutine Run starts
//     has ended when it returns.
//   - Every segment yields at most one Problem, of exactly one Kind (see
//     Problems), so a damaged object is reported once: a truncated object
//     is not also a size mismatch and a corruption.
//   - Transient store errors (objstore.ErrTransient, including a body cut
//     short) are retried, Config.Attempts tries in all; they never count
//     as corruption. A range past the end of the object
//     (objstore.ErrInvalidRange) or a body that ends cleanly but short is
//     a truncated object, as segfile requires of a RangeReader.
//   - Progress and Problem callbacks are called one at a time (never
//     concurrently), after each segment, from Run's goroutines.
//   - Run returns an error only for an invalid Config or when ctx ends;
//     the Report then covers the segments checked so far.
//
// # Problems
//
// Check takes Stat's size, runs segfile.Verify over the object at that
// size, then compares; the first of these that applies is the problem:
//
//	missing            Stat says there is no object under the key.
//	truncated          the object is shorter than size_bytes and is not a
//	                   whole segment at its own size: bytes were cut off.
//	size-mismatch      the size differs otherwise: the object is a whole
//	                   segment of another size (the record is wrong, or
//	                   another object sits under the key), or it is longer
//	                   and does not verify.
//	corrupt            the size matches but Verify fails (a checksum, a
//	                   length, the index, the footer, the MAC or a block
//	                   tag: segfile.ErrMACMismatch, or an object
//	                   without a MAC where the record says it was written
//	                   with one: segfile.ErrUnauthenticated); the detail
//	                   is segfile's message, which says where.
//	metadata-mismatch  the object verifies but its summary disagrees with
//	                   the record (base or last offset, records, data
//	                   bytes, index position, max timestamp), or the
//	                   recorded key is not a valid key.
//	unreadable         the store failed otherwise (access denied, a
//	                   server error that persisted over Config.Attempts
//	                   tries), or the object is authenticated and
//	                   Config.Key is nil: the object was not checked,
//	                   which says nothing about its data (Kind.Damage is
//	                   false).
//	unauthenticated    the object is sound and as recorded, but was
//	                   written before authentication (format version 1,
//	                   and the record does not say authenticated): its
//	                   CRCs cannot tell a forgery (Kind.Damage is false;
//	                   such objects go with retention, or are rewritten,
//	                   authenticated, by compaction on compacted topics).
package scrub
