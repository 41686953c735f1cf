package segfile

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"fmt"
	"hash"
)

// KeySize is the size of a tier key's secret.
const KeySize = 32

// MaxNameBytes bounds the object name a MAC binds (S3 keys are at most
// 1,024 bytes).
const MaxNameBytes = 1024

// Labels that separate the two uses of a key (doc.go, Authentication).
const (
	macLabel   = "STRATSEG-MAC-v2\n"
	keyIDLabel = "STRATSEG-KEY-ID\n"
)

// Digest is a block's SHA-256.
type Digest [DigestSize]byte

// Key is a cluster's tier key: the secret of the MACs of its segment
// objects, and its id (a PRF of the secret, so that a reader tells a
// wrong key from a forged MAC without the id revealing the secret). It
// is immutable and safe for concurrent use; String never shows the
// secret.
type Key struct {
	id     uint64
	secret []byte
}

// NewKey returns the key with this secret (KeySize bytes, copied).
func NewKey(secret []byte) (*Key, error) {
	if len(secret) != KeySize {
		return nil, fmt.Errorf("%w: a tier key is %d bytes, not %d", ErrInvalidOptions, KeySize, len(secret))
	}
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(keyIDLabel))
	return &Key{id: be.Uint64(m.Sum(nil)), secret: bytes.Clone(secret)}, nil
}

// ID is the key's id, as objects record it.
func (k *Key) ID() uint64 { return k.id }

func (k *Key) String() string { return fmt.Sprintf("tier key %016x", k.id) }

// mac is the MAC of an object named name whose tail up to the MAC is
// meta followed by trailer.
func (k *Key) mac(name string, meta, trailer []byte) [DigestSize]byte {
	m := hmac.New(sha256.New, k.secret)
	m.Write([]byte(macLabel))
	var n [2]byte
	be.PutUint16(n[:], uint16(len(name)))
	m.Write(n[:])
	m.Write([]byte(name))
	m.Write(meta)
	m.Write(trailer)
	var out [DigestSize]byte
	m.Sum(out[:0])
	return out
}

// Auth is how one object is authenticated when its tail is read.
type Auth struct {
	// Key is the cluster's tier key. Nil: an authenticated object
	// (version 2) cannot be read (ErrNoKey).
	Key *Key
	// Name is the object's key in the store: the MAC binds it, so that an
	// object copied or moved to another name does not authenticate.
	Name string
	// Required refuses an object without a MAC (version 1) as corrupt
	// (ErrUnauthenticated): metad records that this one was written with
	// one, so a copy without is a downgrade, not an old object.
	Required bool
}

// authenticate checks the MAC of a tail whose trailer is tr; meta is the
// tail from IndexPos to the end of the object.
func (tr *Trailer) authenticate(meta []byte, auth Auth) error {
	switch {
	case tr.Version != VersionAuthenticated && auth.Required:
		return corruptWrap(tr.Size-trEndLen+trEndVersion, "trailer", ErrUnauthenticated,
			"version %d carries no MAC, and %s was recorded as authenticated", tr.Version, auth.Name)
	case tr.Version != VersionAuthenticated:
		return nil
	case auth.Key == nil:
		return fmt.Errorf("%w: %s is authenticated with tier key %016x", ErrNoKey, auth.Name, tr.KeyID)
	case auth.Key.id != tr.KeyID:
		return corruptWrap(tr.Size-TrailerSizeV2+trKeyID, "trailer", ErrMACMismatch,
			"MAC under tier key %016x, this cluster's is %016x", tr.KeyID, auth.Key.id)
	}
	macPos := int64(len(meta)) - TrailerSizeV2 + trMAC
	want := auth.Key.mac(auth.Name, meta[:macPos], nil)
	if !hmac.Equal(want[:], tr.MAC[:]) {
		return corruptWrap(tr.Size-TrailerSizeV2+trMAC, "trailer", ErrMACMismatch,
			"the tail was not written by this cluster under the name %q", auth.Name)
	}
	return nil
}

// Authenticated reports whether the object carries a MAC (version 2),
// which ParseTail verified: every byte a read of it returns is then
// checked against its block's digest.
func (t *Tail) Authenticated() bool { return t.Trailer.Version == VersionAuthenticated }

// checkBlock checks b, the whole block i, against its digest.
func (t *Tail) checkBlock(i int64, b []byte) error {
	if sha256.Sum256(b) != t.Digests[i] {
		return corruptWrap(i*t.Trailer.BlockBytes, "data", ErrMACMismatch,
			"block %d [%d, %d) does not match its digest", i, i*t.Trailer.BlockBytes, i*t.Trailer.BlockBytes+int64(len(b)))
	}
	return nil
}

// blockEnd is the end of the block that starts at pos.
func (t *Tail) blockEnd(pos int64) int64 { return min(pos+t.Trailer.BlockBytes, t.DataEnd()) }

// An AuthenticatedReader is a RangeReader that knows which blocks of the
// bytes its last ReadAt returned were already checked against their
// digests (by a BlockChecker over those very bytes), so that a read
// through it hashes them once, not on every read. Only the last ReadAt
// counts: a chunk read again may be other bytes.
type AuthenticatedReader interface {
	RangeReader
	// Authenticated reports whether [pos, pos+size), a whole block, lies
	// in what the last ReadAt returned and was checked.
	Authenticated(pos, size int64) bool
}

// readData reads [off, off+n) of the header and data section: exactly
// those bytes from a version 1 object; from a version 2 one, the whole
// blocks holding them, each checked against its digest unless r says it
// was (AuthenticatedReader), and returns the part asked for. Nothing
// unchecked is returned.
func (t *Tail) readData(ctx context.Context, r RangeReader, off, n int64) ([]byte, error) {
	if !t.Authenticated() || n == 0 {
		return readExact(ctx, r, off, n, "data")
	}
	bs := t.Trailer.BlockBytes
	start, end := off/bs*bs, min((off+n+bs-1)/bs*bs, t.DataEnd())
	if off+n > end {
		return nil, fmt.Errorf("segfile: read of [%d, %d) past the data section's end %d", off, off+n, end)
	}
	buf, err := readExact(ctx, r, start, end-start, "data")
	if err != nil {
		return nil, err
	}
	ar, _ := r.(AuthenticatedReader)
	for pos := start; pos < end; pos += bs {
		blockEnd := t.blockEnd(pos)
		if ar != nil && ar.Authenticated(pos, blockEnd-pos) {
			continue
		}
		if err := t.checkBlock(pos/bs, buf[pos-start:blockEnd-start]); err != nil {
			return nil, err
		}
	}
	return buf[off-start : off-start+n : off-start+n], nil
}

// A BlockChecker checks consecutive bytes of an object's header and data
// section against the block digests of its tail as they are given to it,
// for readers that stream (compaction, the tier reader's downloads,
// Verify). Blocks are checked from the first block boundary at or after
// where it starts, except that one starting at HeaderSize checks the
// first block too, with the header the footer implies (the header holds
// nothing the footer does not say). Over a version 1 object it checks
// nothing, and every byte given counts as verified. Not safe for
// concurrent use.
type BlockChecker struct {
	t    *Tail
	pos  int64 // position of the next byte Write expects
	from int64 // where checking starts (a block boundary, or the start for version 1)
	to   int64 // the end of the verified bytes
	h    hash.Hash
	err  error // sticky
}

// NewBlockChecker returns a BlockChecker for the bytes from pos on.
func (t *Tail) NewBlockChecker(pos int64) *BlockChecker {
	c := &BlockChecker{t: t, pos: pos, from: pos, to: pos}
	if !t.Authenticated() {
		return c
	}
	c.h = sha256.New()
	bs := t.Trailer.BlockBytes
	if pos == HeaderSize {
		c.from, c.to, c.pos = 0, 0, 0
		_ = c.Write(appendHeader(nil, t.Trailer.Version, t.Footer.GetBaseOffset(), t.Footer.GetCompacted()))
		return c
	}
	c.from = min((pos+bs-1)/bs*bs, t.DataEnd())
	c.to = c.from
	return c
}

// Write checks p, the bytes at the checker's position, as far as they
// complete blocks (bytes past the data section are ignored). A mismatch
// is ErrCorrupt (cause ErrMACMismatch), sticky; the bytes verified before
// it stay verified.
func (c *BlockChecker) Write(p []byte) error {
	if c.err != nil {
		return c.err
	}
	if c.h == nil {
		c.pos += int64(len(p))
		c.to = c.pos
		return nil
	}
	end := c.t.DataEnd()
	if skip := min(c.from-c.pos, int64(len(p))); skip > 0 {
		p, c.pos = p[skip:], c.pos+skip
	}
	bs := c.t.Trailer.BlockBytes
	for len(p) > 0 && c.pos < end {
		blockEnd := c.t.blockEnd(c.pos / bs * bs)
		n := min(int64(len(p)), blockEnd-c.pos)
		c.h.Write(p[:n])
		p, c.pos = p[n:], c.pos+n
		if c.pos < blockEnd {
			break
		}
		var sum Digest
		c.h.Sum(sum[:0])
		c.h.Reset()
		if i := (blockEnd - 1) / bs; sum != c.t.Digests[i] {
			c.err = corruptWrap(i*bs, "data", ErrMACMismatch, "block %d [%d, %d) does not match its digest", i, i*bs, blockEnd)
			return c.err
		}
		c.to = blockEnd
	}
	return nil
}

// Verified is the range of the bytes given that are verified: [from, to)
// holds whole blocks that matched their digests (to is a block boundary
// or the end of data), or, over a version 1 object, every byte given.
func (c *BlockChecker) Verified() (from, to int64) { return c.from, c.to }
