package ledger

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"sync"

	"github.com/strata-log/strata/proto/ledgerpb"
)

// Entry digests (D1 in doc.go; BookKeeper's digest type and password).
//
// A ledger created with a digest key stores every entry as
//
//	payload | tag
//
// where tag is the first DigestSize bytes of
// HMAC-SHA256(key, ledger id | entry id | payload), ids big-endian. The
// key is 32 random bytes in the ledger's metad record. Every reader
// (Reader, recovery, re-replication) checks the tag and strips it: a copy
// with a wrong tag (written by someone else, moved from another entry or
// ledger, or damaged) is treated as a bad copy and the entry is read from
// another bookie of its write set; the mismatch is counted in
// strata_ledger_digest_mismatches_total. Bookies store and serve the
// tagged bytes as they are and never need the key.
//
// The entry sizes bookies see include the tag; a ledger's length and the
// payloads Reader returns do not. Ledgers without a key (created before
// digests) are read as they are.

// DigestSize is the tag's size in bytes.
const DigestSize = 16

// digestKeySize is the size of a ledger's key.
const digestKeySize = 32

// ErrDigestMismatch is a stored entry whose tag does not match its payload.
var ErrDigestMismatch = errors.New("ledger: entry digest mismatch")

// newDigestKey returns a fresh random key.
func newDigestKey() ([]byte, error) {
	key := make([]byte, digestKeySize)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("ledger: digest key: %w", err)
	}
	return key, nil
}

// digester tags and checks the entries of one ledger. The zero value (no
// key) passes entries through unchanged.
type digester struct {
	ledgerID uint64
	key      []byte
	pool     *sync.Pool // of hash.Hash
}

func newDigester(md *ledgerpb.LedgerMetadata) digester {
	key := md.GetDigestKey()
	if len(key) == 0 {
		return digester{ledgerID: md.GetId()}
	}
	return digester{ledgerID: md.GetId(), key: key, pool: &sync.Pool{New: func() any { return hmac.New(sha256.New, key) }}}
}

func (d digester) tag(entryID int64, payload []byte, dst []byte) []byte {
	h := d.pool.Get().(hash.Hash)
	h.Reset()
	var ids [16]byte
	binary.BigEndian.PutUint64(ids[:8], d.ledgerID)
	binary.BigEndian.PutUint64(ids[8:], uint64(entryID))
	h.Write(ids[:])
	h.Write(payload)
	var sum [sha256.Size]byte
	out := h.Sum(sum[:0])
	d.pool.Put(h)
	return append(dst, out[:DigestSize]...)
}

// seal returns what a bookie stores for entry entryID: payload and its
// tag, in a new slice (payload is not modified).
func (d digester) seal(entryID int64, payload []byte) []byte {
	if d.key == nil {
		return payload
	}
	stored := make([]byte, len(payload), len(payload)+DigestSize)
	copy(stored, payload)
	return d.tag(entryID, payload, stored)
}

// open checks stored, entry entryID as a bookie served it, and returns
// its payload (a subslice of stored), or ErrDigestMismatch.
func (d digester) open(entryID int64, stored []byte) ([]byte, error) {
	if d.key == nil {
		return stored, nil
	}
	if len(stored) < DigestSize {
		return nil, fmt.Errorf("%w: ledger %d entry %d: %d bytes, shorter than a tag", ErrDigestMismatch, d.ledgerID, entryID, len(stored))
	}
	payload, tag := stored[:len(stored)-DigestSize], stored[len(stored)-DigestSize:]
	var want [DigestSize]byte
	if !hmac.Equal(d.tag(entryID, payload, want[:0]), tag) {
		return nil, fmt.Errorf("%w: ledger %d entry %d", ErrDigestMismatch, d.ledgerID, entryID)
	}
	return payload, nil
}

// payloadLen is the payload size of an entry stored as stored bytes: a
// ledger's length counts payloads, not tags.
func (d digester) payloadLen(stored []byte) int64 {
	if d.key == nil {
		return int64(len(stored))
	}
	return int64(max(len(stored)-DigestSize, 0))
}

// SealEntry returns entry entryID of the ledger md describes as a writer
// stores it (payload and tag), for tools and tests that write bookies
// directly.
func SealEntry(md *ledgerpb.LedgerMetadata, entryID int64, payload []byte) []byte {
	return newDigester(md).seal(entryID, payload)
}

// OpenEntry checks and strips the digest of entry entryID of the ledger md
// describes, as a bookie stored it (for callers reading bookies directly:
// re-replication, inspection).
func OpenEntry(md *ledgerpb.LedgerMetadata, entryID int64, stored []byte) ([]byte, error) {
	return newDigester(md).open(entryID, stored)
}
