package objstore

import (
	"context"
	"errors"
	"io"
	"strings"
	"time"
)

// Store is a bucket of immutable objects (or a prefix of one). Every method
// is safe for concurrent use, honours ctx (its deadline and cancellation)
// and returns errors classified as described in doc.go. An implementation
// holding resources (the s3 store's idle connections) is also an
// io.Closer, which whoever opened it closes.
type Store interface {
	// Put stores the bytes of r under key with the given user metadata.
	// size is the exact length of r, or -1 when unknown (the object is
	// then streamed in parts). With size >= 0 exactly size bytes are read
	// and a shorter r fails the Put (ErrPermanent). Put never overwrites:
	// an existing key fails with ErrPreconditionFailed, and callers use
	// unique keys. On any error no object is visible under key (an
	// incomplete upload may be left behind; see ListIncompleteUploads).
	Put(ctx context.Context, key string, r io.Reader, size int64, meta map[string]string) (PutInfo, error)
	// PutIfAbsent creates key holding b, or fails with
	// ErrPreconditionFailed when key exists. It is the create-only write
	// of the bucket cookie.
	PutIfAbsent(ctx context.Context, key string, b []byte) error
	// GetRange reads n bytes of key from offset off (n < 0: to the end)
	// in one request. A range past the end is cut at the end. off must be
	// less than the object's size, or 0 (so an empty object reads whole);
	// n must not be 0; otherwise ErrInvalidRange. The reader reads under
	// ctx and fails (never returns a short clean EOF) when the body is cut
	// short; the caller closes it.
	GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error)
	// Stat returns key's size, modification time and user metadata.
	Stat(ctx context.Context, key string) (ObjectInfo, error)
	// List calls fn for every key that starts with prefix and sorts after
	// startAfter ("" for no bound), in byte-wise lexicographic order,
	// until fn returns false. ObjectInfo.Metadata is nil in listings.
	List(ctx context.Context, prefix, startAfter string, fn func(ObjectInfo) bool) error
	// Delete removes keys. A missing key counts as deleted. The returned
	// slice names the keys that could not be deleted; the error is non-nil
	// only when the call failed as a whole (an invalid key, ctx ended).
	Delete(ctx context.Context, keys []string) ([]DeleteError, error)
	// ListIncompleteUploads calls fn for every upload begun under a key
	// that starts with prefix and neither completed nor aborted, ordered by
	// key then initiation time, until fn returns false. Uploads in
	// progress are listed too: callers abort only old ones.
	ListIncompleteUploads(ctx context.Context, prefix string, fn func(UploadInfo) bool) error
	// AbortIncompleteUpload discards an incomplete upload and its parts. An
	// upload that no longer exists counts as aborted. A Put still writing
	// to it then fails.
	AbortIncompleteUpload(ctx context.Context, key, uploadID string) error
}

// PutInfo describes a completed Put.
type PutInfo struct {
	// Size is the number of bytes stored.
	Size int64
}

// ObjectInfo describes a stored object.
type ObjectInfo struct {
	Key          string
	Size         int64
	LastModified time.Time
	// Metadata is the user metadata given to Put (keys in lower case);
	// Stat fills it, List leaves it nil.
	Metadata map[string]string
}

// DeleteError is a key Delete could not remove, and why.
type DeleteError struct {
	Key string
	Err error
}

// UploadInfo describes an incomplete upload.
type UploadInfo struct {
	Key       string
	UploadID  string
	Initiated time.Time
}

// Op names a Store operation, in errors and fault hooks.
type Op string

// The operations, one per Store method.
const (
	OpPut                   Op = "put"
	OpPutIfAbsent           Op = "put-if-absent"
	OpGetRange              Op = "get-range"
	OpStat                  Op = "stat"
	OpList                  Op = "list"
	OpDelete                Op = "delete"
	OpListIncompleteUploads Op = "list-incomplete-uploads"
	OpAbortIncompleteUpload Op = "abort-incomplete-upload"
)

// The classes of errors. Every error a Store returns matches exactly one
// of ErrNotFound, ErrPreconditionFailed, ErrTransient and ErrPermanent
// (ErrInvalidKey and ErrInvalidRange are kinds of ErrPermanent). See
// doc.go for which call returns which.
var (
	// ErrNotFound: the key (or upload) does not exist.
	ErrNotFound = errors.New("objstore: not found")
	// ErrPreconditionFailed: a create-only write found the key present.
	ErrPreconditionFailed = errors.New("objstore: precondition failed")
	// ErrTransient: the call may succeed if retried later (throttling,
	// server errors, timeouts, connection failures, ctx ended).
	ErrTransient = errors.New("objstore: transient error")
	// ErrPermanent: retrying will not help until an operator acts (access
	// denied, no such bucket, a malformed request, a broken disk).
	ErrPermanent = errors.New("objstore: permanent error")

	// ErrInvalidKey: the key breaks the key rules (see ValidateKey).
	ErrInvalidKey error = &kindError{msg: "objstore: invalid key", class: ErrPermanent}
	// ErrInvalidRange: GetRange's off or n is out of bounds.
	ErrInvalidRange error = &kindError{msg: "objstore: invalid range", class: ErrPermanent}
)

// kindError is a sentinel that is also one of the four classes, so
// errors.Is matches both the kind and its class.
type kindError struct {
	msg   string
	class error
}

func (e *kindError) Error() string { return e.msg }
func (e *kindError) Unwrap() error { return e.class }

// Error is the error every Store returns: the operation, the key (the
// store's own, with any prefix), the class or kind sentinel and the cause.
// errors.Is matches both Kind and Err, so a call ended by its ctx matches
// ErrTransient and context.DeadlineExceeded (or context.Canceled).
type Error struct {
	Op   Op
	Key  string
	Kind error // a sentinel of this package
	Err  error // the cause; may be nil
}

// NewError returns an *Error. Implementations call it from their one
// classifying function.
func NewError(op Op, key string, kind, cause error) *Error {
	return &Error{Op: op, Key: key, Kind: kind, Err: cause}
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("objstore: ")
	b.WriteString(string(e.Op))
	if e.Key != "" {
		b.WriteString(" ")
		b.WriteString(e.Key)
	}
	b.WriteString(": ")
	// A cause that already names the kind (a Validate error, a hook's
	// classified error) is not prefixed with it a second time.
	if e.Err == nil || !errors.Is(e.Err, e.Kind) {
		b.WriteString(strings.TrimPrefix(e.Kind.Error(), "objstore: "))
		if e.Err == nil {
			return b.String()
		}
		b.WriteString(": ")
	}
	b.WriteString(strings.TrimPrefix(e.Err.Error(), "objstore: "))
	return b.String()
}

// Unwrap returns the kind and the cause.
func (e *Error) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Err}
}

// Classified reports whether err already carries one of the four classes,
// so wrappers and fault hooks pass it on unchanged.
func Classified(err error) bool {
	return errors.Is(err, ErrNotFound) || errors.Is(err, ErrPreconditionFailed) ||
		errors.Is(err, ErrTransient) || errors.Is(err, ErrPermanent)
}

// ContextError returns the classified error of a call ended by its ctx, or
// nil when ctx is still live.
func ContextError(ctx context.Context, op Op, key string) error {
	if err := ctx.Err(); err != nil {
		return NewError(op, key, ErrTransient, err)
	}
	return nil
}
