package s3

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/strata-log/strata/tiering/objstore"
)

// contentType marks Strata's objects; S3 needs one and the data is opaque.
const contentType = "application/octet-stream"

// Store is the objstore.Store of one S3 bucket.
type Store struct {
	cfg    Config
	client *minio.Client
	core   minio.Core // the same client, for single-request calls
	// ownTransport is the transport New made (nil when Config gave one),
	// whose idle connections Close drops.
	ownTransport *http.Transport
}

var (
	_ objstore.Store = (*Store)(nil)
	_ io.Closer      = (*Store)(nil)
)

// New returns a Store for cfg. It does no I/O: a wrong endpoint, bucket or
// credential shows in the first call's error.
func New(cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	transport := cfg.Transport
	var own *http.Transport
	if transport == nil {
		t, err := minio.DefaultTransport(!cfg.Insecure)
		if err != nil {
			return nil, fmt.Errorf("s3: %w", err)
		}
		transport, own = t, t
	}
	client, err := minio.New(cfg.Endpoint, &minio.Options{
		Creds:     credentials.NewStaticV4(cfg.AccessKeyID, cfg.SecretAccessKey, cfg.SessionToken),
		Secure:    !cfg.Insecure,
		Transport: transport,
		Region:    cfg.Region,
		// Path style works with MinIO, AWS and every S3 look-alike, needs
		// no wildcard DNS, and keeps the bucket in the path where the
		// fault proxy can see it.
		BucketLookup: minio.BucketLookupPath,
		MaxRetries:   cfg.MaxAttempts,
	})
	if err != nil {
		return nil, fmt.Errorf("s3: %w", err)
	}
	return &Store{cfg: cfg, client: client, core: minio.Core{Client: client}, ownTransport: own}, nil
}

// String describes the store without secrets.
func (s *Store) String() string { return s.cfg.String() }

// Close drops the idle connections of the store's own transport (and with
// them their goroutines). Calls may still be made after it; they dial
// again.
func (s *Store) Close() error {
	if s.ownTransport != nil {
		s.ownTransport.CloseIdleConnections()
	}
	return nil
}

// Put implements objstore.Store. A Put of unknown size, or larger than
// PartSize, is a multipart upload of PartSize parts, PartConcurrency at a
// time; minio-go aborts it when it fails. Every Put carries
// If-None-Match: *, so S3 itself refuses to overwrite.
func (s *Store) Put(ctx context.Context, key string, r io.Reader, size int64, meta map[string]string) (objstore.PutInfo, error) {
	n, err := s.put(ctx, objstore.OpPut, key, r, size, meta)
	return objstore.PutInfo{Size: n}, err
}

// PutIfAbsent implements objstore.Store with a single conditional PUT.
// minio-go may retry it after a lost answer, which then fails with
// ErrPreconditionFailed although the first attempt created the object: the
// caller (the bucket cookie) reads the object to tell.
func (s *Store) PutIfAbsent(ctx context.Context, key string, b []byte) error {
	_, err := s.put(ctx, objstore.OpPutIfAbsent, key, bytes.NewReader(b), int64(len(b)), nil)
	return err
}

func (s *Store) put(ctx context.Context, op objstore.Op, key string, r io.Reader, size int64, meta map[string]string) (int64, error) {
	if err := objstore.ValidateKey(key); err != nil {
		return 0, classify(op, key, err)
	}
	if err := objstore.ValidateMetadata(meta); err != nil {
		return 0, classify(op, key, err)
	}
	if err := objstore.ContextError(ctx, op, key); err != nil {
		return 0, err
	}
	opts := minio.PutObjectOptions{
		UserMetadata:          meta,
		ContentType:           contentType,
		PartSize:              s.cfg.PartSize,
		NumThreads:            s.cfg.PartConcurrency,
		ConcurrentStreamParts: s.cfg.PartConcurrency > 1,
	}
	opts.SetMatchETagExcept("*")
	src := &source{r: r, size: size}
	if size >= 0 {
		src.r = io.LimitReader(r, size)
	}
	// A bytes.Reader is passed as is: it is seekable, so minio-go may
	// retry a single PUT with it.
	var body io.Reader = src
	if br, ok := r.(*bytes.Reader); ok && op == objstore.OpPutIfAbsent {
		body = br
	}
	stored := false
	if size < 0 {
		// A streamed Put: read up to one part first. An object that fits
		// (a segment or compaction output up to PartSize) goes in one PUT
		// of known size from a pooled buffer; minio-go's streamed
		// multipart upload would allocate PartConcurrency new parts for
		// it, zeroed, and send three requests.
		buf := getPartBuffer(s.cfg.PartSize)
		// Back to the pool only after a successful PUT: a request that
		// failed early (a 503 before the body was sent) may leave the
		// transport still reading the body on another goroutine.
		defer func() {
			if stored {
				partBuffers.Put(buf)
			}
		}()
		n, err := io.ReadFull(src, *buf)
		switch {
		case err == io.EOF || err == io.ErrUnexpectedEOF:
			body, size = bytes.NewReader((*buf)[:n]), int64(n)
		case err != nil:
			return 0, classify(op, key, err)
		default:
			body = io.MultiReader(bytes.NewReader(*buf), src)
		}
	}
	info, err := s.client.PutObject(ctx, s.cfg.Bucket, key, body, size, opts)
	if err != nil {
		if src.err != nil && ctx.Err() == nil {
			err = src.err
		}
		return 0, classify(op, key, err)
	}
	if size >= 0 && info.Size != size {
		return 0, classify(op, key, &sourceError{err: fmt.Errorf("stored %d of %d bytes", info.Size, size), short: true})
	}
	stored = true
	return info.Size, nil
}

// partBuffers holds part-sized buffers (*[]byte) for streamed Puts.
var partBuffers sync.Pool

// getPartBuffer returns a pooled buffer of partSize bytes (not zeroed).
func getPartBuffer(partSize uint64) *[]byte {
	if b, ok := partBuffers.Get().(*[]byte); ok && uint64(cap(*b)) >= partSize {
		*b = (*b)[:partSize]
		return b
	}
	b := make([]byte, partSize)
	return &b
}

// source reads a Put's data and remembers why it failed, so a failure of
// the caller's reader is not taken for a failure of S3.
type source struct {
	r    io.Reader
	size int64
	n    int64
	err  error
}

func (s *source) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	s.n += int64(n)
	switch {
	case err == io.EOF && s.size >= 0 && s.n < s.size:
		s.err = &sourceError{err: fmt.Errorf("the source ended after %d of %d bytes", s.n, s.size), short: true}
		return n, s.err
	case err != nil && err != io.EOF:
		s.err = &sourceError{err: err}
		return n, s.err
	}
	return n, err
}

// sourceError is a failure of a Put's source; short marks a source shorter
// than the size it was announced with.
type sourceError struct {
	err   error
	short bool
}

func (e *sourceError) Error() string { return "reading the source: " + e.err.Error() }
func (e *sourceError) Unwrap() error { return e.err }

// GetRange implements objstore.Store with one ranged GET (Core.GetObject;
// Client.GetObject is lazy and may issue several). The reader checks the
// body's length against Content-Range, so a cut body is an error even if
// a proxy ended it cleanly.
func (s *Store) GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	op := objstore.OpGetRange
	if err := objstore.ValidateKey(key); err != nil {
		return nil, classify(op, key, err)
	}
	if err := objstore.ValidateRangeArgs(off, n); err != nil {
		return nil, classify(op, key, err)
	}
	if err := objstore.ContextError(ctx, op, key); err != nil {
		return nil, err
	}
	var opts minio.GetObjectOptions
	if n < 0 {
		opts.Set("Range", fmt.Sprintf("bytes=%d-", off))
	} else {
		opts.Set("Range", fmt.Sprintf("bytes=%d-%d", off, off+n-1))
	}
	body, info, hdr, err := s.core.GetObject(ctx, s.cfg.Bucket, key, opts)
	if err != nil {
		err = classify(op, key, err)
		if off == 0 && errors.Is(err, objstore.ErrInvalidRange) {
			// No byte at offset 0: the object exists and is empty.
			return io.NopCloser(bytes.NewReader(nil)), nil
		}
		return nil, err
	}
	want, err := expectedLength(hdr.Get("Content-Range"), info.Size, off, n)
	if err != nil {
		body.Close()
		return nil, classify(op, key, err)
	}
	return &rangeReader{ctx: ctx, key: key, body: body, want: want}, nil
}

// errProtocol marks an answer that breaks the S3 protocol (a range not
// asked for): retrying will not fix the server.
var errProtocol = errors.New("s3: protocol violation")

// expectedLength returns how many bytes the body of a GET for [off, off+n)
// must have, from the response's Content-Range (or, for a plain 200 answer
// to a range from 0, its Content-Length).
func expectedLength(contentRange string, contentLength, off, n int64) (int64, error) {
	if contentRange == "" {
		if off != 0 || n >= 0 && contentLength > n {
			return 0, fmt.Errorf("%w: asked for bytes %d+%d, got the whole object", errProtocol, off, n)
		}
		return contentLength, nil
	}
	// bytes FIRST-LAST/TOTAL
	spec, ok := strings.CutPrefix(contentRange, "bytes ")
	first, rest, ok1 := strings.Cut(spec, "-")
	last, total, ok2 := strings.Cut(rest, "/")
	a, err1 := strconv.ParseInt(first, 10, 64)
	b, err2 := strconv.ParseInt(last, 10, 64)
	size, err3 := strconv.ParseInt(total, 10, 64)
	if !ok || !ok1 || !ok2 || errors.Join(err1, err2, err3) != nil || a != off || b < a {
		return 0, fmt.Errorf("%w: Content-Range %q for offset %d", errProtocol, contentRange, off)
	}
	if b+1 != objstore.RangeEnd(off, n, size) {
		return 0, fmt.Errorf("%w: Content-Range %q for %d bytes from %d", errProtocol, contentRange, n, off)
	}
	return b + 1 - a, nil
}

// rangeReader reads a GET body and fails when it ends before want bytes.
type rangeReader struct {
	ctx  context.Context
	key  string
	body io.ReadCloser
	want int64
	got  int64
}

func (r *rangeReader) Read(p []byte) (int, error) {
	// The transport may hold the rest of the body already; the contract
	// is that reading ends with ctx all the same.
	if err := objstore.ContextError(r.ctx, objstore.OpGetRange, r.key); err != nil {
		return 0, err
	}
	n, err := r.body.Read(p)
	r.got += int64(n)
	switch {
	case r.got > r.want:
		err = fmt.Errorf("%w: body longer than the %d bytes of its range", errProtocol, r.want)
	case err == nil:
		return n, nil
	case err == io.EOF && r.got == r.want:
		return n, io.EOF
	case err == io.EOF:
		err = fmt.Errorf("body cut after %d of %d bytes: %w", r.got, r.want, io.ErrUnexpectedEOF)
	}
	if ctxErr := objstore.ContextError(r.ctx, objstore.OpGetRange, r.key); ctxErr != nil {
		return n, ctxErr
	}
	return n, classify(objstore.OpGetRange, r.key, err)
}

func (r *rangeReader) Close() error { return r.body.Close() }

// Stat implements objstore.Store with a HEAD request.
func (s *Store) Stat(ctx context.Context, key string) (objstore.ObjectInfo, error) {
	op := objstore.OpStat
	if err := objstore.ValidateKey(key); err != nil {
		return objstore.ObjectInfo{}, classify(op, key, err)
	}
	if err := objstore.ContextError(ctx, op, key); err != nil {
		return objstore.ObjectInfo{}, err
	}
	oi, err := s.client.StatObject(ctx, s.cfg.Bucket, key, minio.StatObjectOptions{})
	if err != nil {
		return objstore.ObjectInfo{}, classify(op, key, err)
	}
	// S3 sends metadata as headers, whose names come back capitalised.
	meta := make(map[string]string, len(oi.UserMetadata))
	for k, v := range oi.UserMetadata {
		meta[strings.ToLower(k)] = v
	}
	return objstore.ObjectInfo{Key: key, Size: oi.Size, LastModified: oi.LastModified, Metadata: meta}, nil
}

// List implements objstore.Store with ListObjectsV2 pages.
func (s *Store) List(ctx context.Context, prefix, startAfter string, fn func(objstore.ObjectInfo) bool) error {
	op := objstore.OpList
	if err := objstore.ContextError(ctx, op, prefix); err != nil {
		return err
	}
	// Stopping early cancels the listing's own ctx, which is how minio-go's
	// iterator is told to stop fetching pages.
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	noOwner := false
	for oi := range s.client.ListObjectsIter(lctx, s.cfg.Bucket, minio.ListObjectsOptions{
		Prefix: prefix, StartAfter: startAfter, Recursive: true, FetchOwner: &noOwner,
	}) {
		if oi.Err != nil {
			return classify(op, prefix, oi.Err)
		}
		if !fn(objstore.ObjectInfo{Key: oi.Key, Size: oi.Size, LastModified: oi.LastModified}) {
			return nil
		}
	}
	// The iterator ends silently when ctx ends.
	return objstore.ContextError(ctx, op, prefix)
}

// Delete implements objstore.Store with multi-object DELETE requests (up to
// 1000 keys each).
func (s *Store) Delete(ctx context.Context, keys []string) ([]objstore.DeleteError, error) {
	op := objstore.OpDelete
	for _, k := range keys {
		if err := objstore.ValidateKey(k); err != nil {
			return nil, classify(op, k, err)
		}
	}
	if err := objstore.ContextError(ctx, op, ""); err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return nil, nil
	}
	objects := func(yield func(minio.ObjectInfo) bool) {
		for _, k := range keys {
			if !yield(minio.ObjectInfo{Key: k}) {
				return
			}
		}
	}
	results, err := s.client.RemoveObjectsWithIter(ctx, s.cfg.Bucket, iter.Seq[minio.ObjectInfo](objects), minio.RemoveObjectsOptions{})
	if err != nil {
		return nil, classify(op, "", err)
	}
	var failed []objstore.DeleteError
	for res := range results {
		if res.Err == nil {
			continue
		}
		err := classify(op, res.ObjectName, res.Err)
		if errors.Is(err, objstore.ErrNotFound) {
			continue // already gone: deleted
		}
		failed = append(failed, objstore.DeleteError{Key: res.ObjectName, Err: err})
	}
	// Keys not reached when ctx ended have no result at all.
	return failed, objstore.ContextError(ctx, op, "")
}

// ListIncompleteUploads implements objstore.Store with ListMultipartUploads
// pages.
func (s *Store) ListIncompleteUploads(ctx context.Context, prefix string, fn func(objstore.UploadInfo) bool) error {
	op := objstore.OpListIncompleteUploads
	keyMarker, uploadIDMarker := "", ""
	for {
		if err := objstore.ContextError(ctx, op, prefix); err != nil {
			return err
		}
		res, err := s.core.ListMultipartUploads(ctx, s.cfg.Bucket, prefix, keyMarker, uploadIDMarker, "", 1000)
		if err != nil {
			return classify(op, prefix, err)
		}
		for _, u := range res.Uploads {
			if !strings.HasPrefix(u.Key, prefix) {
				continue // a server that ignores the prefix
			}
			if !fn(objstore.UploadInfo{Key: u.Key, UploadID: u.UploadID, Initiated: u.Initiated}) {
				return nil
			}
		}
		if !res.IsTruncated || res.NextKeyMarker == "" && res.NextUploadIDMarker == "" {
			return nil
		}
		keyMarker, uploadIDMarker = res.NextKeyMarker, res.NextUploadIDMarker
	}
}

// AbortIncompleteUpload implements objstore.Store.
func (s *Store) AbortIncompleteUpload(ctx context.Context, key, uploadID string) error {
	op := objstore.OpAbortIncompleteUpload
	if err := objstore.ValidateKey(key); err != nil {
		return classify(op, key, err)
	}
	if err := objstore.ContextError(ctx, op, key); err != nil {
		return err
	}
	err := classify(op, key, s.core.AbortMultipartUpload(ctx, s.cfg.Bucket, key, uploadID))
	if errors.Is(err, objstore.ErrNotFound) {
		return nil // already completed or aborted
	}
	return err
}
