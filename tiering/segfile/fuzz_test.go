package segfile_test

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math/rand"
	"testing"

	"github.com/strata-log/strata/recordbatch"
	"github.com/strata-log/strata/tiering/segfile"
)

// fuzzSecret is the fuzzers' tier key, and fuzzName the name their
// authenticated objects are written and read under.
var (
	fuzzSecret = bytes.Repeat([]byte{9}, segfile.KeySize)
	fuzzName   = "c/t/topic/3/fuzz.seg"
)

// fuzzAuth reads both versions: version 2 objects with the fuzz key.
func fuzzAuth(t testing.TB) segfile.Auth {
	key, err := segfile.NewKey(fuzzSecret)
	if err != nil {
		t.Fatal(err)
	}
	return segfile.Auth{Key: key, Name: fuzzName}
}

// fuzzSegments are valid segments to seed the fuzzers with, each
// unauthenticated and authenticated (in 64-byte blocks).
func fuzzSegments(f *testing.F) [][]byte {
	rng := rand.New(rand.NewSource(30))
	var out [][]byte
	for _, gen := range []genConfig{
		{batches: 1, maxRecords: 1},
		{batches: 4, maxRecords: 3, maxValue: 20},
		{batches: 5, maxRecords: 2, maxValue: 10, compacted: true, horizon: true},
		{batches: 3, maxRecords: 4, maxValue: 30, codec: recordbatch.CompressionZstd, logAppendTime: true},
	} {
		batches := genBatches(f, rng, 10, gen)
		opts := segfile.Options{BaseOffset: 10, Compacted: gen.compacted, IndexIntervalBytes: 80, Footer: testFooter()}
		obj, _ := writeSegment(f, batches, opts)
		out = append(out, obj)
		opts.Key, opts.Name, opts.BlockBytes = fuzzAuth(f).Key, fuzzName, segfile.MinBlockBytes
		obj, _ = writeSegment(f, batches, opts)
		out = append(out, obj)
	}
	return out
}

// FuzzParseTail: ParseTail never panics, fails only with ErrCorrupt on a
// whole object, and a tail it accepts gives lookups inside the data.
func FuzzParseTail(f *testing.F) {
	for _, obj := range fuzzSegments(f) {
		f.Add(obj)
		f.Add(obj[trailerStart(obj):])
		f.Add(obj[:len(obj)-1])
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		checkParseTail(t, data)
		// With the checksums and the MAC made right again, the mutations
		// reach the checks and the decoders behind them.
		checkParseTail(t, repairChecksums(bytes.Clone(data)))
	})
}

func checkParseTail(t *testing.T, data []byte) {
	tail, err := segfile.ParseTail(data, int64(len(data)), fuzzAuth(t))
	if err != nil {
		if !errors.Is(err, segfile.ErrCorrupt) {
			t.Fatalf("ParseTail: %v is not ErrCorrupt", err)
		}
		return
	}
	sum, end := tail.Summary(), tail.DataEnd()
	if sum.Size != int64(len(data)) || end < segfile.HeaderSize || end > sum.Size {
		t.Fatalf("summary %+v", sum)
	}
	for _, off := range []int64{-1, 0, sum.BaseOffset, sum.LastOffset, (sum.BaseOffset + sum.LastOffset) / 2} {
		if r, ok := tail.FetchRange(off, 100); ok && (r.Start < segfile.HeaderSize || r.End > end || r.Start >= r.End) {
			t.Fatalf("FetchRange(%d) = %+v, data ends at %d", off, r, end)
		}
	}
	for _, ts := range []int64{-1, 0, sum.MaxTimestampMs} {
		if r, ok := tail.TimeRange(ts); ok && (r.Start < segfile.HeaderSize || r.End > end || r.Start >= r.End) {
			t.Fatalf("TimeRange(%d) = %+v, data ends at %d", ts, r, end)
		}
	}
	// Walking whatever data there is must not panic either.
	it := tail.Batches(data[segfile.HeaderSize:end], segfile.HeaderSize)
	for it.Next() {
	}
}

// FuzzIterator: the iterator never panics, never returns a batch that
// does not verify or is out of order, and over a buffer that reaches the
// end of data it ends either Done or with ErrCorrupt. The same bytes are
// also walked with the checks of a real segment's tail.
func FuzzIterator(f *testing.F) {
	segs := fuzzSegments(f)
	for _, obj := range segs {
		tail, err := segfile.FindTail(ctx, segfile.Bytes(obj), int64(len(obj)), fuzzAuth(f))
		if err != nil {
			f.Fatal(err)
		}
		data := obj[segfile.HeaderSize:tail.DataEnd()]
		f.Add(data, tail.Footer.GetCompacted())
		f.Add(data[:len(data)-1], false)
	}
	tail, err := segfile.FindTail(ctx, segfile.Bytes(segs[2]), int64(len(segs[2])), fuzzAuth(f))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte, compacted bool) {
		checkIterator(t, tail, data, compacted)
		checkIterator(t, tail, repairBatchCRCs(bytes.Clone(data), 0, len(data)), compacted)
	})
}

func checkIterator(t *testing.T, tail *segfile.Tail, data []byte, compacted bool) {
	it := segfile.NewIterator(data, segfile.HeaderSize, segfile.HeaderSize+int64(len(data)), compacted)
	prevLast := int64(-1)
	for it.Next() {
		b := it.Batch()
		h, err := recordbatch.Verify(b.Bytes)
		if err != nil {
			t.Fatalf("returned a batch that does not verify: %v", err)
		}
		if h.BaseOffset <= prevLast || (!compacted && prevLast >= 0 && h.BaseOffset != prevLast+1) {
			t.Fatalf("batch at %d after %d", h.BaseOffset, prevLast)
		}
		if !bytes.Equal(b.Bytes, data[b.Pos-segfile.HeaderSize:b.Pos-segfile.HeaderSize+int64(len(b.Bytes))]) {
			t.Fatal("batch bytes are not the input's")
		}
		prevLast = h.LastOffset()
	}
	if !it.Done() && !errors.Is(it.Err(), segfile.ErrCorrupt) {
		t.Fatalf("stopped at %d of %d without ErrCorrupt: %v", it.Pos(), len(data), it.Err())
	}
	it = tail.Batches(data, segfile.HeaderSize)
	for it.Next() {
	}
	if err := it.Err(); err != nil && !errors.Is(err, segfile.ErrCorrupt) {
		t.Fatalf("tail iterator: %v", err)
	}
}

// FuzzVerify: Verify never panics and fails only with ErrCorrupt; an
// object it accepts can be read back whole.
func FuzzVerify(f *testing.F) {
	for _, obj := range fuzzSegments(f) {
		f.Add(obj)
	}
	f.Fuzz(func(t *testing.T, obj []byte) {
		checkVerify(t, obj)
		checkVerify(t, repairChecksums(bytes.Clone(obj)))
	})
}

func checkVerify(t *testing.T, obj []byte) {
	auth := fuzzAuth(t)
	sum, err := segfile.Verify(ctx, segfile.Bytes(obj), int64(len(obj)), auth)
	if err != nil {
		if !errors.Is(err, segfile.ErrCorrupt) {
			t.Fatalf("Verify: %v is not ErrCorrupt", err)
		}
		return
	}
	auth.Required = sum.Authenticated
	tail, err := segfile.ReadTail(ctx, segfile.Bytes(obj), sum.IndexPos, sum.Size, auth)
	if err != nil {
		t.Fatalf("Verify accepted what ReadTail refuses: %v", err)
	}
	got, err := tail.ReadFetch(ctx, segfile.Bytes(obj), sum.BaseOffset, sum.DataBytes)
	if err != nil || int64(len(got)) != sum.DataBytes {
		t.Fatalf("ReadFetch of everything: %d of %d bytes, %v", len(got), sum.DataBytes, err)
	}
}

// repairChecksums recomputes, where the trailer's positions allow, every
// checksum of obj: batch CRCs, data CRC, meta CRC and, in a version 2
// object, the block tags and the MAC under the fuzz key and name.
func repairChecksums(obj []byte) []byte {
	size := len(obj)
	if size < segfile.TrailerSize {
		return obj
	}
	v2 := binary.BigEndian.Uint16(obj[size-20:]) == segfile.VersionAuthenticated
	if v2 && size < segfile.TrailerSizeV2 {
		return obj
	}
	tr := obj[trailerStart(obj):]
	indexPos := binary.BigEndian.Uint64(tr[0:])
	if indexPos < segfile.HeaderSize || indexPos > uint64(size-len(tr)) {
		return obj
	}
	repairBatchCRCs(obj, segfile.HeaderSize, int(indexPos))
	binary.BigEndian.PutUint32(tr[24:], crc32.Checksum(obj[:indexPos], crcTable))
	if v2 {
		repairMAC(obj, tr, indexPos)
	}
	binary.BigEndian.PutUint32(obj[size-12:], crc32.Checksum(obj[indexPos:size-12], crcTable))
	return obj
}

// repairMAC rewrites, where the positions allow, the block tags and the
// MAC of a version 2 object whose trailer is tr.
func repairMAC(obj, tr []byte, indexPos uint64) {
	size := uint64(len(obj))
	count, blockBytes := uint64(binary.BigEndian.Uint32(tr[8:])), uint64(binary.BigEndian.Uint32(tr[28:]))
	tags := indexPos + count*segfile.IndexEntrySize
	if blockBytes < segfile.MinBlockBytes || count > size || tags > size {
		return
	}
	for k := uint64(0); k*blockBytes < indexPos && tags+segfile.TagSize <= size-segfile.TrailerSizeV2; k++ {
		copy(obj[tags:], blockTag(fuzzSecret, fuzzName, k, obj[k*blockBytes:min((k+1)*blockBytes, indexPos)]))
		tags += segfile.TagSize
	}
	copy(tr[44:76], hmacOf(fuzzSecret, []byte("STRATSEG-MAC-v2\n"), nameBytes(fuzzName), obj[indexPos:size-52]))
}

// nameBytes is name with its uint16 length before it, as the MAC and the
// object key take it.
func nameBytes(name string) []byte {
	return append(binary.BigEndian.AppendUint16(nil, uint16(len(name))), name...)
}

// blockTag is block k's tag by hand (doc.go): GMAC under the object's
// key, nonce k.
func blockTag(secret []byte, name string, k uint64, block []byte) []byte {
	objKey := hmacOf(secret, []byte("STRATSEG-OBJ-v2\n"), nameBytes(name))
	c, err := aes.NewCipher(objKey)
	if err != nil {
		panic(err)
	}
	g, err := cipher.NewGCM(c)
	if err != nil {
		panic(err)
	}
	nonce := binary.BigEndian.AppendUint64(make([]byte, 4), k)
	return g.Seal(nil, nonce, nil, block)
}

// repairBatchCRCs recomputes the CRC of every batch framed in b[from:to].
func repairBatchCRCs(b []byte, from, to int) []byte {
	for pos := from; to-pos >= recordbatch.HeaderSize; {
		n := int(int32(binary.BigEndian.Uint32(b[pos+8:]))) + 12
		if n < recordbatch.HeaderSize || n > to-pos {
			break
		}
		reCRC(b[pos : pos+n])
		pos += n
	}
	return b
}

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// repairChecksums leaves a valid object as it is, in both versions: what
// it writes is what the format says (else the fuzzers would never get
// past the checksums and the MAC).
func TestRepairChecksumsIsTheFormat(t *testing.T) {
	rng := rand.New(rand.NewSource(31))
	batches := genBatches(t, rng, 10, genConfig{batches: 6, maxRecords: 3, maxValue: 40})
	for _, opts := range []segfile.Options{{BaseOffset: 10}, {BaseOffset: 10, Key: fuzzAuth(t).Key, Name: fuzzName, BlockBytes: segfile.MinBlockBytes}} {
		obj, _ := writeSegment(t, batches, opts)
		if got := repairChecksums(bytes.Clone(obj)); !bytes.Equal(got, obj) {
			t.Fatalf("repairChecksums changed a valid object (authenticated: %t)", opts.Key != nil)
		}
	}
}

// FuzzAuthenticatedFetch: whatever the bytes a store returns for an
// authenticated object, a fetch through its genuine tail (what metad's
// record leads a reader to) returns exactly the writer's batches or an
// error, never anything else.
func FuzzAuthenticatedFetch(f *testing.F) {
	segs := fuzzSegments(f)
	genuine := segs[3] // authenticated, 4 batches
	tail, err := segfile.FindTail(ctx, segfile.Bytes(genuine), int64(len(genuine)), fuzzAuth(f))
	if err != nil || !tail.Authenticated() {
		f.Fatalf("seed: %v", err)
	}
	f.Add(genuine, int64(10), int64(1000))
	f.Add(repairChecksums(append(bytes.Clone(genuine[:40]), genuine[41:]...)), int64(12), int64(1))
	f.Fuzz(func(t *testing.T, stored []byte, offset, maxBytes int64) {
		want, err := tail.ReadFetch(ctx, segfile.Bytes(genuine), offset, maxBytes)
		if err != nil {
			t.Fatalf("genuine: %v", err)
		}
		got, err := tail.ReadFetch(ctx, segfile.Bytes(stored), offset, maxBytes)
		if err == nil && !bytes.Equal(got, want) {
			t.Fatalf("returned %d bytes that are not the writer's", len(got))
		}
		if err != nil && !errors.Is(err, segfile.ErrCorrupt) {
			t.Fatalf("%v is not ErrCorrupt", err)
		}
	})
}
