package kv

import (
	"errors"
	"fmt"
)

// Sentinel errors. Apply wraps them with detail; match with errors.Is. See
// doc.go for which call returns which.
var (
	// ErrLeaseNotFound: a put names a lease that does not exist, or a
	// revoke names an unknown lease.
	ErrLeaseNotFound = errors.New("metad: lease not found")
	// ErrInvalidKey: a key is empty, longer than MaxKeyBytes, or not valid
	// UTF-8.
	ErrInvalidKey = errors.New("metad: invalid key")
	// ErrValueTooLarge: a put's value is longer than MaxValueBytes.
	ErrValueTooLarge = errors.New("metad: value too large")
	// ErrInvalidCommand: a command is malformed (nil or empty oneof, a
	// negative compare version, a lease TTL <= 0, an existing lease id, a
	// member with no id, ...).
	ErrInvalidCommand = errors.New("metad: invalid command")
	// ErrQuotaExceeded: a command would grow the store past the limits
	// its proposer stamped on it (keys, key and value bytes, leases). The
	// command changes nothing; deleting frees room. Not retryable as is.
	ErrQuotaExceeded = errors.New("metad: quota exceeded")
	// ErrCompacted: the watch history no longer reaches back to the asked
	// revision; the caller must re-list and watch from the list's revision.
	// Events returns it as a *CompactedError.
	ErrCompacted = errors.New("metad: compacted: re-list")
)

// CompactedError is returned by Events when the requested revision is at or
// below the compact revision. errors.Is(err, ErrCompacted) holds.
type CompactedError struct {
	// CompactRevision is the store's compact revision: a watch may resume
	// from CompactRevision+1 or later.
	CompactRevision int64
}

func (e *CompactedError) Error() string {
	return fmt.Sprintf("%v: history starts after revision %d", ErrCompacted, e.CompactRevision)
}

// Is makes errors.Is(err, ErrCompacted) hold.
func (e *CompactedError) Is(target error) bool { return target == ErrCompacted }
