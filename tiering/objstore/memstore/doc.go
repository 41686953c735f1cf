// Package memstore is the in-memory twin of objstore.Store, for unit tests
// of the tiering code: it passes the same conformance suite as the S3 and
// local-directory stores, and adds what a test needs to reach the failure
// paths.
//
// # Fault hooks
//
// SetHook installs a Hook called before every operation with a Call (the
// operation, the key or, for listings, the prefix, and GetRange's range).
// The Fault it returns can delay the call, block it until a channel closes
// (a hung request; the call still ends with its ctx), fail it with no
// effect (an unclassified error becomes ErrTransient, so a hook returning
// errors.New("boom") simulates a 503), or rewrite the bytes a GetRange
// serves: a shorter body makes the reader fail after it, as a cut
// connection does, while a same-length change is silent corruption (S3
// does not checksum ranged reads either). Delete consults the hook once
// per key, so one key of a batch can fail.
//
// # Test helpers
//
// Wipe empties the store (the bucket was wiped). AddIncompleteUpload
// leaves an upload behind as a crash in the middle of a multipart Put
// does. Options.Now injects the clock that stamps LastModified and upload
// initiation times, for age-based decisions such as the orphan grace.
//
// # Model
//
// Objects are byte slices that are never changed after Put. A Put is listed
// as an incomplete upload from its start until it completes, and fails if
// the upload is aborted meanwhile, as on S3. Listings are snapshots taken
// at the call. Readers check their ctx on every Read.
package memstore
