// Package s3 is the objstore.Store of an S3 bucket, on minio-go v7. It
// works with AWS S3, MinIO and other S3-compatible services: requests are
// path-style (no wildcard DNS needed), signed with static credentials
// (Config), over HTTPS unless Config.Insecure.
//
// # Calls and requests
//
//   - Put: one PUT when the size is known and at most PartSize, or when
//     a streamed Put (size -1) ends within its first PartSize bytes (read
//     into a pooled buffer first), else a multipart upload of PartSize
//     parts (default 16 MiB, at least 5 MiB), PartConcurrency at a time (a
//     streamed Put buffers that many parts).
//     Every Put and PutIfAbsent carries If-None-Match: *, which MinIO and
//     AWS honour on PUT and CompleteMultipartUpload, so an existing key
//     fails with ErrPreconditionFailed. A failed multipart Put is aborted
//     by minio-go; a crash leaves the upload for ListIncompleteUploads.
//   - GetRange: one GET with a Range header (minio.Core.GetObject; the
//     lazy Client.GetObject may issue several). The answer's Content-Range
//     must be the range asked for (else ErrPermanent), and the body must
//     hold all of it: a body cut short, even cleanly by a proxy, is
//     ErrTransient wrapping io.ErrUnexpectedEOF. A 416 answer at offset 0
//     means an empty object and reads as empty.
//   - Stat: HEAD (metadata names lower-cased: S3 returns them as
//     capitalised headers). List: ListObjectsV2 pages. Delete: multi-object
//     DELETE, 1000 keys per request. ListIncompleteUploads:
//     ListMultipartUploads pages. AbortIncompleteUpload:
//     AbortMultipartUpload (NoSuchUpload counts as done).
//
// # Retries and deadlines
//
// minio-go retries a failed request (5xx, throttling, network errors) with
// jittered exponential backoff of 200 ms doubling to 1 s, up to its
// MaxRetries attempts, which default to 10. Config.MaxAttempts (default 3)
// lowers that so an outage surfaces as ErrTransient within about a second
// instead of hiding inside the call; the caller's ctx deadline bounds the
// rest (a hung request ends at the deadline, and is not retried). Bodies
// that cannot be rewound (the single PUT of a stream) are sent once.
//
// # MinIO differences
//
// MinIO lists incomplete uploads only under an exact object key (the
// prefix must be the whole key), so a prefix sweep finds none there;
// MinIO instead expires stale uploads itself (api stale_uploads_expiry,
// 24 h by default). MinIO names the error of a HEAD answer in a header
// (x-minio-error-code), so Stat on a missing bucket is ErrPermanent there;
// AWS answers a bare 404, which Stat reports as ErrNotFound.
//
// Classification of errors is in classify.go, the one place that maps S3
// codes and statuses to the objstore classes.
package s3
