package ledger

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"sync"

	"github.com/strata-log/strata/internal/corruption"
	"github.com/strata-log/strata/proto/ledgerpb"
)

// Entry digests (BookKeeper's digest type and password).
//
// A ledger created with a digest key stores every entry as
//
//	payload | tag
//
// where tag (DigestSize bytes) depends on the ledger's digest type:
//
//   - DIGEST_AES_GMAC: the AES-256-GCM tag of an empty plaintext with
//     payload as additional data, nonce entry id (8 bytes) | low 32 bits
//     of the ledger id, ids big-endian;
//   - DIGEST_HMAC_SHA256: the first DigestSize bytes of
//     HMAC-SHA256(key, ledger id | entry id | payload).
//
// The key is 32 random bytes in the ledger's metad record.
//
//	D1. Every reader (Reader, recovery, re-replication) checks the tag
//	    and strips it: a copy with a wrong tag (written by someone else,
//	    moved from another entry or ledger, or damaged) is treated as a
//	    bad copy and the entry is read from another bookie of its write
//	    set; the mismatch is counted in
//	    strata_ledger_digest_mismatches_total. Bookies store and serve
//	    the tagged bytes as they are and never need the key.
//
// The entry sizes bookies see include the tag; a ledger's length and the
// payloads Reader returns do not. Ledgers without a key (created before
// digests) are read as they are.
//
//	D2. GMAC's nonce never tags two payloads under one key: keys are per
//	    ledger, and an entry id is written with one payload only (retries,
//	    ensemble changes and recovery re-send the stored bytes; bookies
//	    refuse other bytes for a stored entry, ADD_ENTRY_CONFLICT). A
//	    repeated nonce would give away the ledger's GHASH key, so that
//	    whoever saw both tags could forge entries of that one ledger.

// DigestSize is the tag's size in bytes.
const DigestSize = 16

// digestKeySize is the size of a ledger's key.
const digestKeySize = 32

// ErrDigestMismatch is a stored entry whose tag does not match its payload.
// Marked (internal/corruption): corruption.Is holds for it and for every
// error that wraps it.
var ErrDigestMismatch = corruption.Mark(errors.New("ledger: entry digest mismatch"))

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
	typ      ledgerpb.DigestType
	pool     *sync.Pool // of *tagger, or the error of an unknown digest type
}

func newDigester(md *ledgerpb.LedgerMetadata) digester {
	key := md.GetDigestKey()
	if len(key) == 0 {
		return digester{ledgerID: md.GetId()}
	}
	d := digester{ledgerID: md.GetId(), key: key, typ: md.GetDigestType()}
	switch d.typ {
	case ledgerpb.DigestType_DIGEST_AES_GMAC:
		d.pool = &sync.Pool{New: func() any {
			aead, err := newGMAC(key)
			if err != nil {
				return err
			}
			return &tagger{gmac: aead}
		}}
	case ledgerpb.DigestType_DIGEST_HMAC_SHA256:
		d.pool = &sync.Pool{New: func() any { return &tagger{hmac: hmac.New(sha256.New, key)} }}
	default:
		// Written by a newer version: no copy can be checked, so none is
		// returned as good.
		err := fmt.Errorf("%w: ledger %d: unknown digest type %d (written by a newer version?)", ErrDigestMismatch, d.ledgerID, d.typ)
		d.pool = &sync.Pool{New: func() any { return err }}
	}
	return d
}

// newGMAC returns AES-GCM under key, used only to authenticate (GMAC).
func newGMAC(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("ledger: digest key: %w", err)
	}
	return cipher.NewGCM(block)
}

// tagger computes tags with one of the pool's MACs. Its input and sum
// are its own: passed to the MAC (an interface) as locals they would
// escape to the heap, an allocation per entry tagged or checked.
type tagger struct {
	gmac  cipher.AEAD // DIGEST_AES_GMAC
	hmac  hash.Hash   // DIGEST_HMAC_SHA256
	input [16]byte    // GMAC's nonce, or HMAC's ledger and entry ids
	sum   [sha256.Size]byte
}

// tag returns entry entryID's tag of payload, in t's memory: valid until
// t goes back to its pool.
func (t *tagger) tag(ledgerID uint64, entryID int64, payload []byte) []byte {
	if t.hmac != nil {
		t.hmac.Reset()
		binary.BigEndian.PutUint64(t.input[:8], ledgerID)
		binary.BigEndian.PutUint64(t.input[8:], uint64(entryID))
		t.hmac.Write(t.input[:])
		t.hmac.Write(payload)
		return t.hmac.Sum(t.sum[:0])[:DigestSize]
	}
	// D2: the nonce is unique per (key, entry id), and an entry id is
	// never tagged with two payloads.
	binary.BigEndian.PutUint64(t.input[:8], uint64(entryID))
	binary.BigEndian.PutUint32(t.input[8:12], uint32(ledgerID))
	return t.gmac.Seal(t.sum[:0], t.input[:12], nil, payload)
}

// tagger takes a tagger from the pool; the caller puts it back.
func (d digester) tagger() (*tagger, error) {
	switch x := d.pool.Get().(type) {
	case *tagger:
		return x, nil
	case error:
		return nil, x
	}
	panic("unreachable")
}

// seal returns what a bookie stores for entry entryID: payload and its
// tag, in a new slice (payload is not modified).
func (d digester) seal(entryID int64, payload []byte) ([]byte, error) {
	tag, err := d.appendTag(nil, entryID, payload)
	if err != nil || tag == nil {
		return payload, err
	}
	// bytes.Join copies without zeroing the memory first.
	return bytes.Join([][]byte{payload, tag}, nil), nil
}

// appendTag appends to dst the tag a bookie stores after payload for
// entry entryID, and returns nil for a ledger without digests. A writer
// sends the two as one entry without joining them
// (bookiepb.AddRequest.PayloadTail), which saves a copy of every
// payload.
func (d digester) appendTag(dst []byte, entryID int64, payload []byte) ([]byte, error) {
	if d.key == nil {
		return nil, nil
	}
	t, err := d.tagger()
	if err != nil {
		return nil, err
	}
	dst = append(dst, t.tag(d.ledgerID, entryID, payload)...)
	d.pool.Put(t)
	return dst, nil
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
	t, err := d.tagger()
	if err != nil {
		return nil, err
	}
	ok := hmac.Equal(t.tag(d.ledgerID, entryID, payload), tag)
	d.pool.Put(t)
	if !ok {
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
func SealEntry(md *ledgerpb.LedgerMetadata, entryID int64, payload []byte) ([]byte, error) {
	return newDigester(md).seal(entryID, payload)
}

// OpenEntry checks and strips the digest of entry entryID of the ledger md
// describes, as a bookie stored it (for callers reading bookies directly:
// re-replication, inspection).
func OpenEntry(md *ledgerpb.LedgerMetadata, entryID int64, stored []byte) ([]byte, error) {
	return newDigester(md).open(entryID, stored)
}

// EntryChecker checks the digests of one ledger's entries, keeping what
// the check needs (the ledger's key, its ciphers) between calls: a bookie
// checks the entries written to it with one (V1 in doc.go). Safe for
// concurrent use.
type EntryChecker struct{ d digester }

// NewEntryChecker returns the checker of the ledger md describes.
func NewEntryChecker(md *ledgerpb.LedgerMetadata) *EntryChecker {
	return &EntryChecker{d: newDigester(md)}
}

// Keyed reports whether the ledger has a digest key. Entries of a ledger
// without one (created before digests) carry no tag: every copy passes.
func (c *EntryChecker) Keyed() bool { return c.d.key != nil }

// Check returns nil when stored, entry entryID as a bookie stores it, has
// the tag the ledger's key gives it, and ErrDigestMismatch otherwise.
func (c *EntryChecker) Check(entryID int64, stored []byte) error {
	_, err := c.d.open(entryID, stored)
	return err
}
