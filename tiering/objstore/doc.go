// Package objstore is tiering's seam to object storage: the Store
// interface, its error classes, the key rules every implementation
// enforces, and WithPrefix. The implementations live in sub-packages:
//
//   - s3: any S3-compatible service (AWS, MinIO) through minio-go;
//   - localdir: a local directory (single machine, `strata dev`);
//   - memstore: in memory, with fault hooks, for unit tests;
//
// and storeurl opens one of them from a URL. objstoretest is the
// conformance suite all three pass, so a test against memstore says
// something about S3.
//
// # Contract
//
// O1 Immutability. An object, once Put, never changes: Put and PutIfAbsent
// are create-only and fail with ErrPreconditionFailed when the key exists
// (S3: If-None-Match: * on the PUT and on CompleteMultipartUpload). Callers
// still give every upload a unique key (T2 in tiering's doc.go): never
// overwriting is the invariant, the check is a safety net.
//
// O2 All or nothing. A Put either makes the whole object visible under its
// key, with its metadata, or nothing. A failed or aborted Put may leave an
// incomplete upload (S3 multipart parts, a localdir temporary file), never
// a partial object. ListIncompleteUploads finds them (in progress ones
// too), AbortIncompleteUpload removes them.
//
// O3 Exact reads or errors. GetRange serves the bytes [off, off+n) of the
// object (n < 0: to its end; a range past the end is cut at the end) in one
// request, or fails. A body that ends early is a read error (ErrTransient
// wrapping io.ErrUnexpectedEOF), never a short clean EOF. Bounds: off must
// be below the size, or 0 (so an empty object reads whole); n must not be
// 0; else ErrInvalidRange. The reader reads under the call's ctx and must
// be closed.
//
// O4 Listing order. List yields keys that start with prefix and sort after
// startAfter in byte-wise lexicographic order (S3's order), with size and
// modification time (no metadata). Listings are not snapshots on S3: keys
// written or deleted meanwhile may or may not appear. Listings never decide
// what is readable (T1).
//
// O5 Idempotent removal. Delete and AbortIncompleteUpload treat a missing
// key or upload as done, so a retried or repeated cleanup succeeds.
//
// O6 Bounded calls. Every call honours its ctx: it returns when ctx ends
// (ErrTransient wrapping ctx.Err()), and the s3 store makes at most
// MaxAttempts requests per call (part uploads each), never retrying forever
// inside a call. Retry policy, backoff and alerting belong to the caller.
// A Put reads its source in the caller's goroutine: a source that blocks
// holds the Put, so sources must honour the same ctx.
//
// # Keys and metadata
//
// Keys are 1-1024 bytes of UTF-8, "/"-separated segments that are neither
// empty nor "." nor "..", with no control characters or backslashes
// (ValidateKey); every implementation refuses other keys with
// ErrInvalidKey, so a key accepted by memstore is accepted by S3 and is a
// safe relative path for localdir. User metadata keys are lower-case
// [a-z0-9-], values printable ASCII, at most 2 KiB in all
// (ValidateMetadata); Stat returns them exactly. localdir cannot hold both
// "k" and "k/..." (a file cannot be a directory); Strata's layout never
// does.
//
// # Errors
//
// Every error is an *Error naming the operation and key, and matches
// exactly one class with errors.Is:
//
//   - ErrNotFound: Stat and GetRange of a missing key.
//   - ErrPreconditionFailed: Put and PutIfAbsent of an existing key.
//   - ErrTransient: may succeed later. Throttling (503 SlowDown), server
//     errors (5xx, InternalError), timeouts (408, RequestTimeout, the ctx
//     deadline), connection refused or reset, a body cut short, a Put's
//     source failing, a Put whose upload was aborted under it, a full
//     local disk. Callers retry with backoff.
//   - ErrPermanent: needs an operator. Access denied (403, AccessDenied,
//     bad credentials), NoSuchBucket, other 4xx answers (400, malformed
//     requests), TLS failures, a Put whose source is shorter than its size,
//     a corrupt or unreadable local file. ErrInvalidKey and ErrInvalidRange
//     are kinds of ErrPermanent (errors.Is matches both). Callers stall and
//     alert rather than retry in a loop.
//
// Each implementation classifies in one function (s3: classify.go). Stat
// over AWS S3 is a HEAD, whose answers carry no error code, so a missing
// bucket reads as ErrNotFound there; a bucket cookie check should read the
// cookie with GetRange, which tells the two apart on every S3.
//
// # Prefixes
//
// WithPrefix(s, "p") keeps every key under "p/" in s while its callers use
// keys without it: a store URL's path, or one test's corner of a shared
// bucket.
package objstore
