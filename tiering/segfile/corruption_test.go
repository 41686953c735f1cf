package segfile_test

import (
	"bytes"
	"errors"
	"io"
	"math/rand"
	"testing"

	"github.com/strata-log/strata/internal/corruption"
	"github.com/strata-log/strata/tiering/segfile"
)

// smallSegment is an object and how to authenticate it.
type smallSegment struct {
	obj  []byte
	auth segfile.Auth
}

// smallSegments are segments small enough to damage in every possible
// way: a plain one with a sparse index and a compacted one with an entry
// per batch, each unauthenticated (version 1) and authenticated in
// 64-byte blocks (version 2, several blocks).
func smallSegments(t *testing.T) map[string]smallSegment {
	rng := rand.New(rand.NewSource(10))
	out := map[string]smallSegment{}
	plain := genBatches(t, rng, 50, genConfig{batches: 4, maxRecords: 2, maxValue: 8})
	compacted := genBatches(t, rng, 50, genConfig{batches: 4, maxRecords: 2, maxValue: 8, compacted: true, horizon: true})
	for name, c := range map[string]struct {
		batches [][]byte
		opts    segfile.Options
	}{
		"plain":     {plain, segfile.Options{BaseOffset: 50, IndexIntervalBytes: 100, Footer: testFooter()}},
		"compacted": {compacted, segfile.Options{BaseOffset: 40, Compacted: true, IndexIntervalBytes: 1}},
	} {
		obj, _ := writeSegment(t, c.batches, c.opts)
		out[name] = smallSegment{obj: obj}
		opts := authenticated(t, c.opts, "c/t/topic/3/small-"+name+".seg", segfile.MinBlockBytes)
		obj, _ = writeSegment(t, c.batches, opts)
		out[name+" authenticated"] = smallSegment{obj: obj, auth: authOf(opts)}
	}
	return out
}

// T8, T10: every single-bit flip anywhere in a segment is detected by
// Verify (the uploader's read-back, scrub): each byte is covered by a CRC
// or compared with a constant (doc.go).
func TestVerifyDetectsEveryBitFlip(t *testing.T) {
	for name, seg := range smallSegments(t) {
		obj, auth := seg.obj, seg.auth
		t.Run(name, func(t *testing.T) {
			if _, err := segfile.Verify(ctx, segfile.Bytes(obj), int64(len(obj)), auth); err != nil {
				t.Fatal(err)
			}
			bad := bytes.Clone(obj)
			for i := range bad {
				for bit := range 8 {
					bad[i] ^= 1 << bit
					_, err := segfile.Verify(ctx, segfile.Bytes(bad), int64(len(bad)), auth)
					if !errors.Is(err, segfile.ErrCorrupt) || !corruption.Is(err) {
						t.Fatalf("flip of byte %d bit %d of %d bytes: Verify returned %v, want ErrCorrupt, marked as corruption", i, bit, len(obj), err)
					}
					var ce *segfile.CorruptError
					if !errors.As(err, &ce) || ce.Section == "" {
						t.Fatalf("flip of byte %d bit %d: %v is not a *CorruptError", i, bit, err)
					}
					bad[i] ^= 1 << bit
				}
			}
		})
	}
}

// A flip in the tail is caught by both tail readers, without reading the
// data.
func TestTailDetectsEveryBitFlip(t *testing.T) {
	for name, seg := range smallSegments(t) {
		obj, auth := seg.obj, seg.auth
		t.Run(name, func(t *testing.T) {
			tail, err := segfile.FindTail(ctx, segfile.Bytes(obj), int64(len(obj)), auth)
			if err != nil {
				t.Fatal(err)
			}
			indexPos, size := tail.Trailer.IndexPos, tail.Trailer.Size
			bad := bytes.Clone(obj)
			for i := indexPos; i < size; i++ {
				for bit := range 8 {
					bad[i] ^= 1 << bit
					if _, err := segfile.ReadTail(ctx, segfile.Bytes(bad), indexPos, size, auth); !errors.Is(err, segfile.ErrCorrupt) {
						t.Fatalf("flip of byte %d bit %d: ReadTail returned %v", i, bit, err)
					}
					if _, err := segfile.FindTail(ctx, segfile.Bytes(bad), size, auth); !errors.Is(err, segfile.ErrCorrupt) {
						t.Fatalf("flip of byte %d bit %d: FindTail returned %v", i, bit, err)
					}
					bad[i] ^= 1 << bit
				}
			}
		})
	}
}

// A flip in the data is caught by the iterator a fetch uses, except in
// the partition leader epoch (bytes 12..16 of a batch), which neither the
// batch CRC nor any read-path check covers (doc.go); Verify catches those.
// The compacted segment has an index entry per batch: with a sparse index
// a flip of a base offset that keeps offsets increasing would be caught
// only by Verify.
func TestIteratorDetectsDataBitFlips(t *testing.T) {
	for name, seg := range smallSegments(t) {
		obj, auth := seg.obj, seg.auth
		t.Run(name, func(t *testing.T) {
			tail, err := segfile.FindTail(ctx, segfile.Bytes(obj), int64(len(obj)), auth)
			if err != nil {
				t.Fatal(err)
			}
			var epochBytes []int64
			it := tail.Batches(obj[segfile.HeaderSize:tail.DataEnd()], segfile.HeaderSize)
			for it.Next() {
				for i := int64(12); i < 16; i++ {
					epochBytes = append(epochBytes, it.Batch().Pos+i)
				}
			}
			bad := bytes.Clone(obj)
			for i := int64(segfile.HeaderSize); i < tail.DataEnd(); i++ {
				if containsPos(epochBytes, i) {
					continue
				}
				for bit := range 8 {
					bad[i] ^= 1 << bit
					it := tail.Batches(bad[segfile.HeaderSize:tail.DataEnd()], segfile.HeaderSize)
					for it.Next() {
					}
					if !errors.Is(it.Err(), segfile.ErrCorrupt) {
						t.Fatalf("flip of byte %d bit %d: iterator returned %v (done %t)", i, bit, it.Err(), it.Done())
					}
					bad[i] ^= 1 << bit
				}
			}
		})
	}
}

func containsPos(ps []int64, p int64) bool {
	for _, x := range ps {
		if x == p {
			return true
		}
	}
	return false
}

// T10: truncation at every length is corruption, whether the reader is
// told the truncated size (a listing) or the original one (metad).
func TestTruncationDetected(t *testing.T) {
	for name, seg := range smallSegments(t) {
		obj, auth := seg.obj, seg.auth
		t.Run(name, func(t *testing.T) {
			size := int64(len(obj))
			tail, err := segfile.FindTail(ctx, segfile.Bytes(obj), size, auth)
			if err != nil {
				t.Fatal(err)
			}
			for n := range len(obj) {
				short := segfile.Bytes(obj[:n])
				if _, err := segfile.Verify(ctx, short, int64(n), auth); !errors.Is(err, segfile.ErrCorrupt) {
					t.Fatalf("Verify of %d of %d bytes (size %d): %v", n, size, n, err)
				}
				_, err := segfile.Verify(ctx, short, size, auth)
				if !errors.Is(err, segfile.ErrCorrupt) || !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Fatalf("Verify of %d of %d bytes (size %d): %v", n, size, size, err)
				}
				if _, err := segfile.ReadTail(ctx, short, tail.Trailer.IndexPos, size, auth); !errors.Is(err, segfile.ErrCorrupt) {
					t.Fatalf("ReadTail of %d of %d bytes: %v", n, size, err)
				}
				// A fetch reading a truncated data range fails too.
				if int64(n) < tail.DataEnd() {
					if _, err := tail.ReadFetch(ctx, short, tail.Footer.GetLastOffset(), 1<<20); !errors.Is(err, segfile.ErrCorrupt) {
						t.Fatalf("ReadFetch over %d of %d bytes: %v", n, size, err)
					}
				}
			}
			// Through a file-like io.ReaderAt too.
			r := segfile.FromReaderAt(bytes.NewReader(obj[:len(obj)-1]))
			if _, err := segfile.Verify(ctx, r, size, auth); !errors.Is(err, segfile.ErrCorrupt) || !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("Verify through io.ReaderAt: %v", err)
			}
			if _, err := segfile.Verify(ctx, segfile.FromReaderAt(bytes.NewReader(obj)), size, auth); err != nil {
				t.Fatalf("Verify through io.ReaderAt: %v", err)
			}
		})
	}
}

// Bytes appended to an object (or a size that is too large) are corruption.
func TestExtraBytesDetected(t *testing.T) {
	for name, seg := range smallSegments(t) {
		long := append(bytes.Clone(seg.obj), 0)
		if _, err := segfile.Verify(ctx, segfile.Bytes(long), int64(len(long)), seg.auth); !errors.Is(err, segfile.ErrCorrupt) {
			t.Fatalf("%s: Verify with a trailing byte: %v", name, err)
		}
	}
}
