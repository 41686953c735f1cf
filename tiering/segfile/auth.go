package segfile

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
)

// KeySize is the size of a tier key's secret.
const KeySize = 32

// MaxNameBytes bounds the object name a MAC binds (S3 keys are at most
// 1,024 bytes).
const MaxNameBytes = 1024

// Labels that keep the uses of a key apart (doc.go, Authentication).
const (
	macLabel    = "STRATSEG-MAC-v2\n"
	objectLabel = "STRATSEG-OBJ-v2\n"
	keyIDLabel  = "STRATSEG-KEY-ID\n"
)

// Tag is a block's AES-GMAC tag.
type Tag [TagSize]byte

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

// hmac is HMAC-SHA256 under the key of label, the length-prefixed name
// and parts.
func (k *Key) hmac(label, name string, parts ...[]byte) [MACSize]byte {
	m := hmac.New(sha256.New, k.secret)
	m.Write([]byte(label))
	var n [2]byte
	be.PutUint16(n[:], uint16(len(name)))
	m.Write(n[:])
	m.Write([]byte(name))
	for _, p := range parts {
		m.Write(p)
	}
	var out [MACSize]byte
	m.Sum(out[:0])
	return out
}

// mac is the MAC of an object named name whose tail up to the MAC is
// meta followed by trailer.
func (k *Key) mac(name string, meta, trailer []byte) [MACSize]byte {
	return k.hmac(macLabel, name, meta, trailer)
}

// blocks is the object named name's block tagger: AES-256-GCM under the
// object's own key, used only to authenticate (GMAC).
func (k *Key) blocks(name string) blockTagger {
	objKey := k.hmac(objectLabel, name)
	c, err := aes.NewCipher(objKey[:])
	if err != nil {
		panic(err) // a 32-byte key is always valid
	}
	g, err := cipher.NewGCM(c)
	if err != nil {
		panic(err)
	}
	return blockTagger{g}
}

// blockTagger computes block tags: GMAC under the object's key, with the
// block's number as the nonce.
type blockTagger struct{ gcm cipher.AEAD }

// tag is block i's tag of b.
func (bt blockTagger) tag(i int64, b []byte) Tag {
	var nonce [12]byte
	be.PutUint64(nonce[4:], uint64(i))
	var out Tag
	bt.gcm.Seal(out[:0], nonce[:], nil, b)
	return out
}

// Auth is how one object is authenticated when its tail is read.
type Auth struct {
	// Key is the cluster's tier key. Nil: an authenticated object
	// (version 2) cannot be read (ErrNoKey).
	Key *Key
	// Name is the object's key in the store: the MAC and the block tags
	// bind it, so that an object copied or moved to another name does not
	// authenticate.
	Name string
	// Required refuses an object without a MAC (version 1) as corrupt
	// (ErrUnauthenticated): metad records that this one was written with
	// one, so a copy without is a downgrade, not an old object.
	Required bool
}

// authenticate checks the MAC of a tail whose trailer is t; meta is the
// tail from IndexPos to the end of the object.
func (t *Trailer) authenticate(meta []byte, auth Auth) error {
	switch {
	case t.Version != VersionAuthenticated && auth.Required:
		return corruptWrap(t.Size-trEndLen+trEndVersion, "trailer", ErrUnauthenticated,
			"version %d carries no MAC, and %s was recorded as authenticated", t.Version, auth.Name)
	case t.Version != VersionAuthenticated:
		return nil
	case auth.Key == nil:
		return fmt.Errorf("%w: %s is authenticated with tier key %016x", ErrNoKey, auth.Name, t.KeyID)
	case auth.Key.id != t.KeyID:
		return corruptWrap(t.Size-TrailerSizeV2+trKeyID, "trailer", ErrMACMismatch,
			"MAC under tier key %016x, this cluster's is %016x", t.KeyID, auth.Key.id)
	}
	macPos := int64(len(meta)) - TrailerSizeV2 + trMAC
	want := auth.Key.mac(auth.Name, meta[:macPos], nil)
	if !hmac.Equal(want[:], t.MAC[:]) {
		return corruptWrap(t.Size-TrailerSizeV2+trMAC, "trailer", ErrMACMismatch,
			"the tail was not written by this cluster under the name %q", auth.Name)
	}
	return nil
}

// Authenticated reports whether the object carries a MAC (version 2),
// which ParseTail verified: every byte a read of it returns is then
// checked against its block's tag.
func (t *Tail) Authenticated() bool { return t.Trailer.Version == VersionAuthenticated }

// checkBlock checks b, the whole block i, against its tag.
func (t *Tail) checkBlock(i int64, b []byte) error {
	if got := t.tagger.tag(i, b); subtle.ConstantTimeCompare(got[:], t.Tags[i][:]) != 1 {
		return corruptWrap(i*t.Trailer.BlockBytes, "data", ErrMACMismatch,
			"block %d [%d, %d) does not match its tag", i, i*t.Trailer.BlockBytes, i*t.Trailer.BlockBytes+int64(len(b)))
	}
	return nil
}

// BlockFloor is the start of the block that holds pos, or the end of the
// data section for a pos at or past it: feeding a BlockChecker up to
// BlockFloor(end) gives it whole blocks only. Over a version 1 object it
// is pos.
func (t *Tail) BlockFloor(pos int64) int64 {
	if !t.Authenticated() {
		return pos
	}
	if pos >= t.DataEnd() {
		return t.DataEnd()
	}
	return pos / t.Trailer.BlockBytes * t.Trailer.BlockBytes
}

// blockEnd is the end of the block that starts at pos.
func (t *Tail) blockEnd(pos int64) int64 { return min(pos+t.Trailer.BlockBytes, t.DataEnd()) }

// An AuthenticatedReader is a RangeReader that knows which blocks of the
// bytes its last ReadAt returned were already checked against their tags
// (by a BlockChecker over those very bytes), so that a read through it
// checks them once, not on every read. Only the last ReadAt counts: a
// chunk read again may be other bytes.
type AuthenticatedReader interface {
	RangeReader
	// Authenticated reports whether [pos, pos+size), a whole block, lies
	// in what the last ReadAt returned and was checked.
	Authenticated(pos, size int64) bool
}

// readData reads [off, off+n) of the header and data section: exactly
// those bytes from a version 1 object; from a version 2 one, the whole
// blocks holding them, each checked against its tag unless r says it was
// (AuthenticatedReader), and returns the part asked for. Nothing
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
// section against the block tags of its tail as they are given to it,
// for readers that stream (compaction, the tier reader's downloads,
// Verify). Blocks are checked from the first block boundary at or after
// where it starts, except that one starting at HeaderSize checks the
// first block too, with the header the footer implies (the header holds
// nothing the footer does not say). A block given whole in one Write is
// checked in place; one given in pieces is gathered first (BlockFloor
// tells where to cut to avoid that). Over a version 1 object it checks
// nothing, and every byte given counts as verified. Not safe for
// concurrent use.
type BlockChecker struct {
	t       *Tail
	pos     int64  // position of the next byte Write expects
	from    int64  // where checking starts (a block boundary, or the start for version 1)
	to      int64  // the end of the verified bytes
	pending []byte // the current block's bytes so far, when given in pieces
	err     error  // sticky
}

// NewBlockChecker returns a BlockChecker for the bytes from pos on.
func (t *Tail) NewBlockChecker(pos int64) *BlockChecker {
	c := &BlockChecker{t: t, pos: pos, from: pos, to: pos}
	if !t.Authenticated() {
		return c
	}
	if pos == HeaderSize {
		c.from, c.to, c.pos = 0, 0, 0
		_ = c.Write(appendHeader(nil, t.Trailer.Version, t.Footer.GetBaseOffset(), t.Footer.GetCompacted()))
		return c
	}
	bs := t.Trailer.BlockBytes
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
	if !c.t.Authenticated() {
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
		start := c.pos / bs * bs
		blockEnd := c.t.blockEnd(start)
		n := min(int64(len(p)), blockEnd-c.pos)
		block := p[:n]
		if len(c.pending) > 0 || c.pos+n < blockEnd {
			c.pending = append(c.pending, block...)
			block = c.pending
		}
		p, c.pos = p[n:], c.pos+n
		if c.pos < blockEnd {
			break
		}
		if err := c.t.checkBlock(start/bs, block); err != nil {
			c.err = err
			return err
		}
		c.pending = c.pending[:0]
		c.to = blockEnd
	}
	return nil
}

// Verified is the range of the bytes given that are verified: [from, to)
// holds whole blocks that matched their tags (to is a block boundary or
// the end of data), or, over a version 1 object, every byte given.
func (c *BlockChecker) Verified() (from, to int64) { return c.from, c.to }
