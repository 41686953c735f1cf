package tiering

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math/rand"
	"testing"
	"time"

	"github.com/strata-log/strata/internal/corruption"
	"github.com/strata-log/strata/internal/testwait"
	"github.com/strata-log/strata/tiering/objstore"
	"github.com/strata-log/strata/tiering/objstore/memstore"
	"github.com/strata-log/strata/tiering/segfile"
	"github.com/strata-log/strata/vfs"
)

// replaceObject puts obj under key in place of what is there, as whoever
// can write the bucket can.
func replaceObject(t *testing.T, st objstore.Store, key string, obj []byte) {
	t.Helper()
	if _, err := st.Delete(bg, []string{key}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Put(bg, key, bytes.NewReader(obj), int64(len(obj)), nil); err != nil {
		t.Fatal(err)
	}
}

// forgeBatch returns obj with batch i's last byte changed and the
// batch's CRC made right again: every check but authentication passes.
func forgeBatch(t *testing.T, s testSeg, i int) []byte {
	t.Helper()
	pos := int64(segfile.HeaderSize)
	for _, b := range s.batches[:i] {
		pos += int64(len(b))
	}
	bad := bytes.Clone(s.obj)
	b := bad[pos : pos+int64(len(s.batches[i]))]
	b[len(b)-1] ^= 0x20
	binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[21:], crc32.MakeTable(crc32.Castagnoli)))
	return bad
}

// isForgery: a read failed authentication, as corruption.
func isForgery(err error) bool {
	return errors.Is(err, segfile.ErrMACMismatch) && corruption.Is(err)
}

// The attack: a batch of an authenticated object rewritten in the bucket
// with a valid CRC. A fetch that reaches it fails as corrupt (counted,
// its chunks dropped), and the consumer is given none of its bytes, on
// the first read and on a retry; fetches elsewhere in the object still
// read. The same forgery of an unauthenticated object (written before
// authentication) is served: the premise of the attack.
func TestReaderRefusesForgedBatch(t *testing.T) {
	st := memstore.New(memstore.Options{})
	segs := threeSegments(t, st)
	old, s := segs[0], segs[1]
	r, m := newTestReader(t, st, ReaderConfig{ChunkBytes: testChunk, ReadAhead: -1})

	replaceObject(t, st, old.ref.Key, forgeBatch(t, old, 50))
	if got, err := r.Fetch(bg, old.ref, headerOf(t, old.batches[50]).BaseOffset, 1); err != nil || bytes.Equal(got, old.batches[50]) {
		t.Fatalf("premise: an unauthenticated object forged with a valid CRC is served, but: %v", err)
	}

	// The batch holding the newest record: a time lookup for its
	// timestamp has to read it.
	forged := 0
	for i, b := range s.batches {
		if headerOf(t, b).MaxTimestamp > headerOf(t, s.batches[forged]).MaxTimestamp {
			forged = i
		}
	}
	replaceObject(t, st, s.ref.Key, forgeBatch(t, s, forged))
	h := headerOf(t, s.batches[forged])
	for attempt := range 2 {
		got, err := r.Fetch(bg, s.ref, h.BaseOffset, 1)
		if !isForgery(err) || got != nil {
			t.Fatalf("attempt %d: fetch of the forged batch: %d bytes, %v; want ErrMACMismatch and nothing", attempt, len(got), err)
		}
	}
	if _, _, _, err := r.OffsetForTime(bg, s.ref, h.MaxTimestamp, 0); !isForgery(err) {
		t.Fatalf("time lookup of the forged batch's newest record: %v, want ErrMACMismatch", err)
	}
	if errs := value(t, m.ReadErrors); errs != 3 {
		t.Errorf("%v read errors, want every failed read counted (3)", errs)
	}
	// Far from the forged block, the object still reads.
	far := 0
	if forged < len(s.batches)/2 {
		far = len(s.batches) - 1
	}
	if got, err := r.Fetch(bg, s.ref, headerOf(t, s.batches[far]).BaseOffset, 1); err != nil || !bytes.Equal(got, s.batches[far]) {
		t.Fatalf("fetch of batch %d, far from the forged %d: %v", far, forged, err)
	}
}

// The attack: two authentic objects of the cluster swapped in the bucket
// (same offsets and sizes, as a compaction output and the object it
// replaced can be): each is refused under the other's key.
func TestReaderRefusesSwappedObjects(t *testing.T) {
	st := memstore.New(memstore.Options{})
	rng := rand.New(rand.NewSource(7))
	batches := genBatches(t, rng, 0, genConfig{batches: 40, maxRecords: 5, maxValue: 300})
	a := putAuthenticated(t, st, "t/p0/00-aaaa.seg", 0, false, 2048, batches)
	b := putAuthenticated(t, st, "t/p0/00-bbbb.seg", 0, false, 2048, batches)
	if a.ref.Size != b.ref.Size || bytes.Equal(a.obj, b.obj) {
		t.Fatal("want two objects of one size and different bytes")
	}
	replaceObject(t, st, a.ref.Key, b.obj)
	replaceObject(t, st, b.ref.Key, a.obj)
	r, _ := newTestReader(t, st, ReaderConfig{ChunkBytes: testChunk})
	for _, s := range []testSeg{a, b} {
		if got, err := r.Fetch(bg, s.ref, 0, 1<<20); !isForgery(err) || got != nil {
			t.Errorf("%s holding the other object: %d bytes, %v; want ErrMACMismatch", s.ref.Key, len(got), err)
		}
	}
}

// The attack: an authenticated object replaced by an unauthenticated one
// (format version 1, every CRC valid): refused, because the ref says the
// object was written authenticated; while an object written before
// authentication (threeSegments' first) reads.
func TestReaderRefusesDowngrade(t *testing.T) {
	st := memstore.New(memstore.Options{})
	rng := rand.New(rand.NewSource(8))
	batches := genBatches(t, rng, 0, genConfig{batches: 20, maxRecords: 5, maxValue: 300})
	s := putSegment(t, st, "t/p0/v1.seg", 0, false, 2048, batches)
	r, _ := newTestReader(t, st, ReaderConfig{ChunkBytes: testChunk})
	if got, err := r.Fetch(bg, s.ref, 0, 1); err != nil || !bytes.Equal(got, batches[0]) {
		t.Fatalf("an object written before authentication: %v", err)
	}
	ref := s.ref
	ref.Authenticated = true // what metad records of an object written with a MAC
	_, err := r.Fetch(bg, ref, 0, 1)
	if !errors.Is(err, segfile.ErrUnauthenticated) || !corruption.Is(err) {
		t.Fatalf("an unauthenticated object where an authenticated one was written: %v", err)
	}
}

// A Reader without the key cannot read authenticated objects, and says
// why without calling them corrupt.
func TestReaderWithoutKey(t *testing.T) {
	st := memstore.New(memstore.Options{})
	s := threeSegments(t, st)[1]
	r := NewReader(st, ReaderConfig{ChunkBytes: testChunk}, nil)
	defer r.Close()
	_, err := r.Fetch(bg, s.ref, s.ref.BaseOffset, 1)
	if !errors.Is(err, segfile.ErrNoKey) || corruption.Is(err) {
		t.Fatalf("fetch without the key: %v", err)
	}
}

// Through the disk cache: a forged object is refused and the chunk that
// failed is not kept on disk; and a forged chunk on disk (valid for the
// disk cache's own checksum) is refused too, though the store holds the
// genuine object.
func TestDiskCacheRefusesForgedChunk(t *testing.T) {
	st := memstore.New(memstore.Options{})
	s := threeSegments(t, st)[1]
	const forged = 40
	h := headerOf(t, s.batches[forged])
	bad := forgeBatch(t, s, forged)
	replaceObject(t, st, s.ref.Key, bad)
	fs := vfs.NewMem()
	r, _, d := diskReader(t, st, fs, 1<<30)
	for range 2 {
		if got, err := r.Fetch(bg, s.ref, h.BaseOffset, 1); !isForgery(err) || got != nil {
			t.Fatalf("fetch of a forged chunk with a disk cache: %d bytes, %v", len(got), err)
		}
	}
	testwait.Until(t, 10*time.Second, "the disk writer to be idle", func() bool { return r.pendingSpills.Load() == 0 })
	first, last := forgedChunks(t, s, forged)
	for idx := first; idx <= last; idx++ {
		if _, ok := d.Get(s.ref.Key, idx, testChunk); ok {
			t.Errorf("chunk %d, which failed, is on disk", idx)
		}
	}

	replaceObject(t, st, s.ref.Key, s.obj)
	for idx := first; idx <= last; idx++ {
		if err := d.Put(s.ref.Key, idx, bad[idx*testChunk:(idx+1)*testChunk]); err != nil {
			t.Fatal(err)
		}
	}
	r2, _, _ := diskReader(t, st, fs, 1<<30)
	if got, err := r2.Fetch(bg, s.ref, h.BaseOffset, 1); !isForgery(err) || got != nil {
		t.Fatalf("fetch of a forged chunk on disk: %d bytes, %v", len(got), err)
	}
	// The failed read dropped it from disk: the next one downloads the
	// genuine bytes.
	if got, err := r2.Fetch(bg, s.ref, h.BaseOffset, 1); err != nil || !bytes.Equal(got, s.batches[forged]) {
		t.Fatalf("fetch after the forged disk chunk was dropped: %v", err)
	}
}

// forgedChunks is the range of chunks batch i of s lies in.
func forgedChunks(t *testing.T, s testSeg, i int) (first, last int64) {
	t.Helper()
	pos := int64(segfile.HeaderSize)
	for _, b := range s.batches[:i] {
		pos += int64(len(b))
	}
	return pos / testChunk, (pos + int64(len(s.batches[i])) - 1) / testChunk
}

// Downloads authenticate chunks as they arrive: a chunk of whole blocks
// comes with all of it authenticated (so fetches do not hash it again),
// a chunk with a forged block with the blocks before it only (the fetch
// checks the rest and fails), and an unauthenticated object's chunks
// with nothing.
func TestDownloadAuthenticatesChunks(t *testing.T) {
	st := memstore.New(memstore.Options{})
	segs := threeSegments(t, st)
	old, s := segs[0], segs[1]
	r, _ := newTestReader(t, st, ReaderConfig{ChunkBytes: testChunk})
	tail := func(s testSeg) *segfile.Tail {
		tl, err := r.loadTail(bg, s.ref)
		if err != nil {
			t.Fatal(err)
		}
		return tl
	}
	download := func(s testSeg, idx int64) chunkData {
		c, err := fetchOne(bg, r.readRange, s.ref.Key, idx*testChunk, r.chunkLen(s.ref, idx), tail(s))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	for idx := int64(0); idx*testChunk < s.ref.IndexPos; idx++ {
		want := span{idx * testChunk, min((idx+1)*testChunk, s.ref.IndexPos)}
		if got := download(s, idx).authenticated; got != want {
			t.Fatalf("chunk %d authenticated %+v, want %+v", idx, got, want)
		}
	}
	if got := download(old, 1).authenticated; got != (span{}) {
		t.Fatalf("an unauthenticated object's chunk: authenticated %+v", got)
	}

	// Two blocks per chunk: a forged byte in the second block of a chunk
	// leaves the first one authenticated.
	r2, _ := newTestReader(t, st, ReaderConfig{ChunkBytes: 2 * testChunk})
	bad := bytes.Clone(s.obj)
	bad[3*testChunk+100] ^= 1
	replaceObject(t, st, s.ref.Key, bad)
	tl, err := r2.loadTail(bg, s.ref)
	if err != nil {
		t.Fatal(err)
	}
	c, err := fetchOne(bg, r2.readRange, s.ref.Key, 2*testChunk, 2*testChunk, tl)
	if err != nil {
		t.Fatal(err)
	}
	if want := (span{2 * testChunk, 3 * testChunk}); c.authenticated != want {
		t.Fatalf("chunk with a forged second block: authenticated %+v, want %+v", c.authenticated, want)
	}
}
