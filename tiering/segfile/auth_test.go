package segfile_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math/rand"
	"testing"

	"github.com/strata-log/strata/internal/corruption"
	"github.com/strata-log/strata/recordbatch"
	"github.com/strata-log/strata/tiering/segfile"
)

// authSeg is a segment written twice, unauthenticated (v1) and
// authenticated (obj: under name, blockBytes-byte blocks, key testKey(1)),
// with how to read the authenticated one and its tail.
type authSeg struct {
	batches [][]byte
	v1, obj []byte
	auth    segfile.Auth
	tail    *segfile.Tail
}

// newAuthSeg makes n random batches from offset base (seeded) and writes
// them both ways.
func newAuthSeg(t *testing.T, seed, base int64, n int, name string, blockBytes int64) authSeg {
	t.Helper()
	s := authSeg{batches: genBatches(t, rand.New(rand.NewSource(seed)), base, genConfig{batches: n, maxRecords: 3, maxValue: 100})}
	opts := segfile.Options{BaseOffset: base, IndexIntervalBytes: 300, Footer: testFooter()}
	s.v1, _ = writeSegment(t, s.batches, opts)
	opts = authenticated(t, opts, name, blockBytes)
	s.obj, _ = writeSegment(t, s.batches, opts)
	s.auth = authOf(opts)
	var err error
	if s.tail, err = segfile.FindTail(ctx, segfile.Bytes(s.obj), int64(len(s.obj)), s.auth); err != nil {
		t.Fatal(err)
	}
	return s
}

// trailerStart is where obj's trailer starts (by the version at S-20).
func trailerStart(obj []byte) int {
	if binary.BigEndian.Uint16(obj[len(obj)-20:]) == segfile.VersionAuthenticated {
		return len(obj) - segfile.TrailerSizeV2
	}
	return len(obj) - segfile.TrailerSize
}

// fixCRCs is what a writer of the bucket without the key can do after
// changing an object: make every CRC right again (batches, data, meta).
func fixCRCs(obj []byte) []byte {
	tr := obj[trailerStart(obj):]
	indexPos := int(binary.BigEndian.Uint64(tr[0:]))
	repairBatchCRCs(obj, segfile.HeaderSize, indexPos)
	binary.BigEndian.PutUint32(tr[24:], crc32.Checksum(obj[:indexPos], crcTable))
	binary.BigEndian.PutUint32(obj[len(obj)-8-4:], crc32.Checksum(obj[indexPos:len(obj)-12], crcTable))
	return obj
}

// batchAt returns the position and bytes of batch i of obj's data.
func batchAt(t *testing.T, obj []byte, auth segfile.Auth, i int) (int64, []byte) {
	t.Helper()
	tail, err := segfile.FindTail(ctx, segfile.Bytes(obj), int64(len(obj)), auth)
	if err != nil {
		t.Fatal(err)
	}
	it := tail.Batches(obj[segfile.HeaderSize:tail.DataEnd()], segfile.HeaderSize)
	for n := 0; it.Next(); n++ {
		if n == i {
			return it.Batch().Pos, it.Batch().Bytes
		}
	}
	t.Fatalf("no batch %d: %v", i, it.Err())
	return 0, nil
}

// isForgery: the error says the bytes failed authentication, as
// corruption.
func isForgery(err error) bool {
	return errors.Is(err, segfile.ErrMACMismatch) && errors.Is(err, segfile.ErrCorrupt) && corruption.Is(err)
}

// The attack: whoever can write the bucket rewrites a batch's records,
// with a valid batch CRC; a fetch checks batch CRCs only, and Verify
// checks data_crc32c and meta_crc32c, which the attacker can fix too. A
// version 1 object cannot tell (checked, so that the test proves its
// premise). In a version 2 one, every read that touches the forged block
// fails as corrupt, and so does Verify, while reads of other blocks still
// succeed; fixing data_crc32c as well breaks the MAC of the tail, so
// then nothing reads.
func TestForgedBatchesWithValidCRCsRefused(t *testing.T) {
	seg := newAuthSeg(t, 40, 500, 30, "c/t/topic/3/forged.seg", 256)
	batches, v1, v2, auth := seg.batches, seg.v1, seg.obj, seg.auth
	forge := func(obj []byte, auth segfile.Auth) []byte {
		bad := bytes.Clone(obj)
		pos, b := batchAt(t, bad, auth, 20)
		bad[pos+int64(len(b))-1] ^= 0x55 // the last record's last byte
		reCRC(bad[pos : pos+int64(len(b))])
		return bad
	}
	h20, err := recordbatch.ParseHeader(batches[20])
	if err != nil {
		t.Fatal(err)
	}

	bad1 := forge(v1, segfile.Auth{})
	tail1, err := segfile.FindTail(ctx, segfile.Bytes(bad1), int64(len(bad1)), segfile.Auth{})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := tail1.ReadFetch(ctx, segfile.Bytes(bad1), h20.BaseOffset, 1); err != nil || bytes.Equal(got, batches[20]) {
		t.Fatalf("premise: a fetch of a version 1 object returns a batch forged with a valid CRC, but: %v", err)
	}
	if _, err := segfile.Verify(ctx, segfile.Bytes(fixCRCs(bad1)), int64(len(bad1)), segfile.Auth{}); err != nil {
		t.Fatalf("premise: a version 1 object forged with valid CRCs verifies, but: %v", err)
	}

	bad2 := forge(v2, auth)
	size := int64(len(bad2))
	if _, err := segfile.Verify(ctx, segfile.Bytes(bad2), size, auth); !isForgery(err) {
		t.Fatalf("Verify of a forged object: %v, want ErrMACMismatch", err)
	}
	tail, err := segfile.FindTail(ctx, segfile.Bytes(bad2), size, auth)
	if err != nil {
		t.Fatalf("the tail was not touched: %v", err)
	}
	for _, c := range []struct {
		offset, maxBytes int64
		forged           bool
	}{
		{h20.BaseOffset, 1, true},
		{500, 1 << 20, true}, // everything, through the forged block
		{500, 1, false},      // the first batch only, far from it
		{baseOf(t, batches[29]), 1 << 20, false},
	} {
		got, err := tail.ReadFetch(ctx, segfile.Bytes(bad2), c.offset, c.maxBytes)
		if c.forged && (!isForgery(err) || got != nil) {
			t.Errorf("ReadFetch(%d, %d) over the forged block: %d bytes, %v; want ErrMACMismatch", c.offset, c.maxBytes, len(got), err)
		}
		if !c.forged && (err != nil || !bytes.Equal(got, bruteFetch(t, batches, c.offset, c.maxBytes))) {
			t.Errorf("ReadFetch(%d, %d) away from the forged block: %d bytes, %v", c.offset, c.maxBytes, len(got), err)
		}
	}
	if _, _, _, err := tail.ReadOffsetForTime(ctx, segfile.Bytes(bad2), h20.MaxTimestamp, h20.BaseOffset, 0); !isForgery(err) {
		t.Errorf("ReadOffsetForTime into the forged block: %v, want ErrMACMismatch", err)
	}
	fixCRCs(bad2)
	if _, err := segfile.ReadTail(ctx, segfile.Bytes(bad2), tail.Trailer.IndexPos, size, auth); !isForgery(err) {
		t.Errorf("data_crc32c fixed too: ReadTail returned %v, want ErrMACMismatch", err)
	}
}

// The attack: the tail rewritten too (an index or footer that lies,
// block tags of the forged data), with valid CRCs, by someone without
// the key: the MAC does not match.
func TestForgedTailRefused(t *testing.T) {
	seg := newAuthSeg(t, 41, 0, 10, "c/t/topic/3/tail.seg", 128)
	obj, auth, tr := seg.obj, seg.auth, seg.tail.Trailer
	for name, at := range map[string]int64{
		"index entry": tr.IndexPos + 8,
		"block tag":   tr.IndexPos + int64(tr.IndexCount)*segfile.IndexEntrySize + 3,
		"footer":      tr.FooterPos + 2,
		"key id":      tr.Size - segfile.TrailerSizeV2 + 36,
		"mac":         tr.Size - segfile.TrailerSizeV2 + 50,
	} {
		bad := bytes.Clone(obj)
		bad[at] ^= 1
		fixCRCs(bad)
		if _, err := segfile.ReadTail(ctx, segfile.Bytes(bad), tr.IndexPos, tr.Size, auth); !isForgery(err) {
			t.Errorf("%s changed, CRCs fixed: ReadTail returned %v, want ErrMACMismatch", name, err)
		}
	}
}

// The attack: two of the cluster's authentic objects swapped in the
// bucket (or one copied over another's key, or an old copy put back
// under a new key): the MAC binds the name, so each read under the other
// one's name fails, though both are whole and authentic where they were.
func TestSwappedObjectsRefused(t *testing.T) {
	sa := newAuthSeg(t, 42, 0, 10, "c/t/topic/3/00-09-aaaa.seg", 256)
	sb := newAuthSeg(t, 42, 0, 10, "c/t/topic/3/00-09-bbbb.seg", 256)
	a, authA, b, authB := sa.obj, sa.auth, sb.obj, sb.auth
	if bytes.Equal(a, b) {
		t.Fatal("two names gave the same object")
	}
	for _, c := range []struct {
		obj  []byte
		auth segfile.Auth
	}{{a, authB}, {b, authA}} {
		if _, err := segfile.Verify(ctx, segfile.Bytes(c.obj), int64(len(c.obj)), c.auth); !isForgery(err) {
			t.Errorf("an object read as %s: %v, want ErrMACMismatch", c.auth.Name, err)
		}
	}
	if _, err := segfile.Verify(ctx, segfile.Bytes(a), int64(len(a)), authA); err != nil {
		t.Fatalf("in its place: %v", err)
	}
}

// The attack: an object written whole, authentic-looking, by a holder
// of another key (another cluster's object dropped in this bucket, or a
// forger's own key): its key id is not the cluster's.
func TestObjectUnderAnotherKeyRefused(t *testing.T) {
	rng := rand.New(rand.NewSource(43))
	batches := genBatches(t, rng, 0, genConfig{batches: 5, maxRecords: 3, maxValue: 50})
	opts := segfile.Options{Key: testKey(t, 2), Name: "c/t/topic/3/other.seg", BlockBytes: 256}
	obj, _ := writeSegment(t, batches, opts)
	ours := segfile.Auth{Key: testKey(t, 1), Name: opts.Name, Required: true}
	if _, err := segfile.Verify(ctx, segfile.Bytes(obj), int64(len(obj)), ours); !isForgery(err) {
		t.Fatalf("an object under another key: %v, want ErrMACMismatch", err)
	}
	// With the cluster's key id written in, the MAC still gives it away.
	bad := bytes.Clone(obj)
	binary.BigEndian.PutUint64(bad[trailerStart(bad)+36:], ours.Key.ID())
	fixCRCs(bad)
	if _, err := segfile.Verify(ctx, segfile.Bytes(bad), int64(len(bad)), ours); !isForgery(err) {
		t.Fatalf("an object under another key, claiming ours: %v, want ErrMACMismatch", err)
	}
}

// The attack: an authenticated object replaced by an unauthenticated one
// (format version 1, valid CRCs), hoping that readers take it for an
// object written before authentication: refused when metad records the
// object as authenticated (Auth.Required); an old object whose record
// says nothing still reads.
func TestDowngradeToUnauthenticatedRefused(t *testing.T) {
	seg := newAuthSeg(t, 44, 0, 5, "c/t/topic/3/old.seg", 256)
	v1, auth := seg.v1, seg.auth
	_, err := segfile.Verify(ctx, segfile.Bytes(v1), int64(len(v1)), auth)
	if !errors.Is(err, segfile.ErrUnauthenticated) || !errors.Is(err, segfile.ErrCorrupt) || !corruption.Is(err) {
		t.Fatalf("a version 1 object recorded as authenticated: %v, want ErrUnauthenticated, corrupt", err)
	}
	old := auth
	old.Required = false
	sum, err := segfile.Verify(ctx, segfile.Bytes(v1), int64(len(v1)), old)
	if err != nil || sum.Authenticated {
		t.Fatalf("a version 1 object written before authentication: %+v, %v", sum, err)
	}
}

// A reader without the key cannot read an authenticated object, and says
// so without calling it corrupt.
func TestAuthenticatedObjectWithoutKey(t *testing.T) {
	seg := newAuthSeg(t, 45, 0, 5, "c/t/topic/3/nokey.seg", 256)
	obj, auth := seg.obj, seg.auth
	auth.Key = nil
	_, err := segfile.Verify(ctx, segfile.Bytes(obj), int64(len(obj)), auth)
	if !errors.Is(err, segfile.ErrNoKey) || corruption.Is(err) {
		t.Fatalf("Verify without a key: %v, want ErrNoKey, not corruption", err)
	}
}

// In an authenticated object a fetch catches every bit flipped in the
// blocks it reads, the partition leader epoch included, which no CRC
// covers on the read path (TestIteratorDetectsDataBitFlips).
func TestAuthenticatedFetchDetectsEveryDataBitFlip(t *testing.T) {
	for name, seg := range smallSegments(t) {
		if seg.auth.Key == nil {
			continue
		}
		t.Run(name, func(t *testing.T) {
			obj := seg.obj
			tail, err := segfile.FindTail(ctx, segfile.Bytes(obj), int64(len(obj)), seg.auth)
			if err != nil {
				t.Fatal(err)
			}
			from := tail.Footer.GetBaseOffset()
			bad := bytes.Clone(obj)
			for i := range tail.DataEnd() {
				for bit := range 8 {
					bad[i] ^= 1 << bit
					if _, err := tail.ReadFetch(ctx, segfile.Bytes(bad), from, 1<<20); !errors.Is(err, segfile.ErrCorrupt) {
						t.Fatalf("flip of byte %d bit %d: ReadFetch returned %v", i, bit, err)
					}
					bad[i] ^= 1 << bit
				}
			}
		})
	}
}

// vouchingReader is an AuthenticatedReader that vouches for the blocks
// starting in vouched.
type vouchingReader struct {
	segfile.Bytes
	vouched func(pos int64) bool
}

func (v vouchingReader) Authenticated(pos, _ int64) bool { return v.vouched(pos) }

// An AuthenticatedReader's word spares hashing exactly the blocks it
// vouches for: a damaged block it vouches for goes through (its word is
// the contract), one it does not is caught.
func TestReadDataTrustsOnlyVouchedBlocks(t *testing.T) {
	seg := newAuthSeg(t, 46, 0, 20, "c/t/topic/3/vouched.seg", 256)
	obj, auth, tail := seg.obj, seg.auth, seg.tail
	pos, b := batchAt(t, obj, auth, 10)
	bad := fixCRCs(func() []byte { x := bytes.Clone(obj); x[pos+int64(len(b))-1] ^= 1; return x }())
	block := (pos + int64(len(b)) - 1) / 256 * 256
	h, _ := recordbatch.ParseHeader(b)
	vouch := func(v bool) segfile.RangeReader {
		return vouchingReader{segfile.Bytes(bad), func(p int64) bool { return v && p == block }}
	}
	if _, err := tail.ReadFetch(ctx, vouch(false), h.BaseOffset, 1); !isForgery(err) {
		t.Fatalf("damaged block not vouched for: %v", err)
	}
	if _, err := tail.ReadFetch(ctx, vouch(true), h.BaseOffset, 1); err != nil {
		t.Fatalf("damaged block vouched for: %v", err)
	}
}

// A BlockChecker fed an object's bytes in pieces of any size verifies
// the whole blocks from where it starts (from the first block when it
// starts at the data, with the header the footer implies), stops for
// good at a damaged one, and checks nothing in a version 1 object.
func TestBlockChecker(t *testing.T) {
	seg := newAuthSeg(t, 47, 0, 20, "c/t/topic/3/checker.seg", 128)
	v1, obj, tail := seg.v1, seg.obj, seg.tail
	rng := rand.New(rand.NewSource(47))
	end := tail.DataEnd()
	feed := func(c *segfile.BlockChecker, b []byte) error {
		for len(b) > 0 {
			n := min(len(b), 1+rng.Intn(300))
			if err := c.Write(b[:n]); err != nil {
				return err
			}
			b = b[n:]
		}
		return nil
	}
	for _, start := range []int64{0, segfile.HeaderSize, 128, 200, end - 1} {
		c := tail.NewBlockChecker(start)
		if err := feed(c, obj[start:]); err != nil { // the tail is fed too: ignored
			t.Fatalf("from %d: %v", start, err)
		}
		wantFrom := min((start+127)/128*128, end)
		if start == segfile.HeaderSize {
			wantFrom = 0
		}
		if from, to := c.Verified(); from != wantFrom || to != end {
			t.Errorf("from %d: verified [%d, %d), want [%d, %d)", start, from, to, wantFrom, end)
		}
	}

	bad := bytes.Clone(obj)
	bad[700] ^= 1
	c := tail.NewBlockChecker(segfile.HeaderSize)
	if err := feed(c, bad[segfile.HeaderSize:]); !isForgery(err) {
		t.Fatalf("damaged byte 700: %v", err)
	}
	if _, to := c.Verified(); to != 640 {
		t.Errorf("verified to %d after damage at 700, want 640", to)
	}
	if err := c.Write(obj[:1]); !isForgery(err) {
		t.Errorf("not sticky: %v", err)
	}
	// A header that is not the one the footer implies fails block 0.
	bad = bytes.Clone(obj)
	bad[20] ^= 1
	c = tail.NewBlockChecker(0)
	if err := feed(c, bad[:end]); !isForgery(err) {
		t.Errorf("damaged header: %v", err)
	}

	tail1, err := segfile.FindTail(ctx, segfile.Bytes(v1), int64(len(v1)), segfile.Auth{})
	if err != nil {
		t.Fatal(err)
	}
	c = tail1.NewBlockChecker(segfile.HeaderSize)
	if err := feed(c, v1[segfile.HeaderSize:300]); err != nil {
		t.Fatal(err)
	}
	if from, to := c.Verified(); from != segfile.HeaderSize || to != 300 {
		t.Errorf("version 1: verified [%d, %d), want everything given", from, to)
	}
}

// The id of a key is a PRF of it (doc.go): distinct keys, distinct ids,
// and a key of the wrong size is refused.
func TestKey(t *testing.T) {
	a, b := testKey(t, 1), testKey(t, 2)
	if a.ID() == b.ID() || a.ID() != testKey(t, 1).ID() {
		t.Fatalf("ids %016x %016x", a.ID(), b.ID())
	}
	if _, err := segfile.NewKey(make([]byte, 16)); !errors.Is(err, segfile.ErrInvalidOptions) {
		t.Fatalf("a 16-byte key: %v", err)
	}
}

// hmacOf is HMAC-SHA256 by hand, for the golden test.
func hmacOf(secret []byte, parts ...[]byte) []byte {
	m := hmac.New(sha256.New, secret)
	for _, p := range parts {
		m.Write(p)
	}
	return m.Sum(nil)
}
