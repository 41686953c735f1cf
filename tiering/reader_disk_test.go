package tiering

import (
	"bytes"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/strata-log/strata/internal/corruption"
	"github.com/strata-log/strata/internal/testwait"
	"github.com/strata-log/strata/tiering/diskcache"
	"github.com/strata-log/strata/tiering/objstore"
	"github.com/strata-log/strata/tiering/objstore/memstore"
	"github.com/strata-log/strata/tiering/segfile"
	"github.com/strata-log/strata/vfs"
)

const diskDir = "/tier-cache"

// diskReader returns a Reader over st with an on-disk chunk cache in
// fs's diskDir (opened afresh, as a restarted broker does) and a memory
// cache of a few chunks; both are closed at the end of the test.
func diskReader(t *testing.T, st objstore.Store, fs vfs.FS, capBytes int64) (*Reader, *Metrics, *diskcache.Cache) {
	return diskReaderMem(t, st, fs, capBytes, 4*testChunk)
}

func diskReaderMem(t *testing.T, st objstore.Store, fs vfs.FS, capBytes, memBytes int64) (*Reader, *Metrics, *diskcache.Cache) {
	t.Helper()
	m := NewMetrics(prometheus.NewRegistry())
	d, err := diskcache.Open(fs, diskcache.Config{Dir: diskDir, CapBytes: capBytes}, m.DiskCache)
	if err != nil {
		t.Fatal(err)
	}
	r := NewReader(st, ReaderConfig{ChunkBytes: testChunk, CacheBytes: memBytes, ReadAhead: -1, DiskCache: d, Key: tierKey}, m)
	t.Cleanup(func() { r.Close() })
	return r, m, d
}

// readWhole fetches all of s from its base offset and checks it is the
// segment's batches.
func readWhole(t *testing.T, r *Reader, s testSeg) {
	t.Helper()
	var want, got []byte
	for _, b := range s.batches {
		want = append(want, b...)
	}
	for off := s.ref.BaseOffset; off <= s.ref.LastOffset; {
		b, err := r.Fetch(bg, s.ref, off, 3*testChunk)
		if err != nil {
			t.Fatalf("offset %d: %v", off, err)
		}
		if len(b) == 0 {
			break
		}
		got = append(got, b...)
		last, err := lastOffsetOf(b)
		if err != nil {
			t.Fatal(err)
		}
		off = last + 1
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes, want %d", len(got), len(want))
	}
}

// dataChunks is the number of chunks of s's data section.
func dataChunks(s testSeg) int64 { return (s.ref.IndexPos-1)/testChunk + 1 }

// spilled waits for r's disk writer to be idle and returns how many
// chunks d holds; all of them unless the writer fell behind (counted).
func spilled(t *testing.T, r *Reader, m *Metrics, d *diskcache.Cache, want int64) int64 {
	t.Helper()
	testwait.Until(t, 10*time.Second, "the disk writer to be idle", func() bool { return r.pendingSpills.Load() == 0 })
	n := int64(d.Len())
	if skipped := int64(value(t, m.DiskCacheSkipped)); n+skipped < want {
		t.Fatalf("%d chunks on disk, %d skipped, want %d", n, skipped, want)
	}
	return n
}

// A reader that restarts (new Reader, new memory cache, the disk cache
// reopened from its directory) reads every chunk from disk: the only GET
// is the tail's.
func TestDiskCacheSurvivesRestart(t *testing.T) {
	st := memstore.New(memstore.Options{})
	s := threeSegments(t, st)[0]
	fs := vfs.NewMem()
	r, m, d := diskReader(t, st, fs, 1<<30)
	readWhole(t, r, s)
	onDisk := spilled(t, r, m, d, dataChunks(s))
	if v := value(t, m.DiskCache.Hits); v != 0 {
		t.Fatalf("%v disk hits on a cold disk", v)
	}
	r.Close()

	log := newGetLog()
	st.SetHook(log.hook)
	r2, m2, d2 := diskReader(t, st, fs, 1<<30)
	if int64(d2.Len()) != onDisk {
		t.Fatalf("reopened disk cache holds %d chunks, want %d", d2.Len(), onDisk)
	}
	readWhole(t, r2, s)
	if n := int64(log.total()); n != 1+dataChunks(s)-onDisk || log.count(s.ref.IndexPos, s.ref.Size-s.ref.IndexPos) != 1 {
		t.Fatalf("%d GETs after the restart with %d of %d chunks on disk", n, onDisk, dataChunks(s))
	}
	if v := value(t, m2.DiskCache.Hits); int64(v) < onDisk {
		t.Fatalf("%v disk hits, want >= %d", v, onDisk)
	}
}

// Many readers of a chunk in neither cache: one GET; of a chunk on disk
// only: one disk read, no GET.
func TestDiskCacheConcurrentReadersOneDownload(t *testing.T) {
	st := memstore.New(memstore.Options{})
	s := threeSegments(t, st)[0]
	log := newGetLog()
	st.SetHook(func(c memstore.Call) memstore.Fault {
		log.record(c)
		return memstore.Fault{Delay: 20 * time.Millisecond}
	})
	fs := vfs.NewMem()
	const readers, maxBytes = 20, 3 * testChunk
	together := func(r *Reader) { t.Helper(); fetchTogether(t, r, s, 40, maxBytes, readers) }
	// Memory for all of them: every reader's chunks stay in it.
	r, m, d := diskReaderMem(t, st, fs, 1<<30, 64*testChunk)
	together(r)
	if n := log.maxPerRange(); n != 1 {
		t.Fatalf("a range was read %d times", n)
	}
	chunks := int64(log.total() - 1) // but the tail
	onDisk := spilled(t, r, m, d, chunks)
	if v := value(t, m.DiskCache.Misses); int64(v) != chunks {
		t.Fatalf("%v disk misses for %d chunks", v, chunks)
	}
	r.Close()

	before := log.total()
	r2, m2, _ := diskReaderMem(t, st, fs, 1<<30, 64*testChunk)
	together(r2)
	if n := int64(log.total() - before); n != 1+chunks-onDisk {
		t.Fatalf("%d GETs with %d of %d chunks on disk", n, onDisk, chunks)
	}
	if v := value(t, m2.DiskCache.Hits); int64(v) != onDisk {
		t.Fatalf("%v disk reads for %d chunks on disk and %d readers", v, onDisk, readers)
	}
}

// A damaged cache file is never served: the chunk is downloaded again,
// the file replaced, the damage counted.
func TestDiskCacheCorruptFileRedownloaded(t *testing.T) {
	st := memstore.New(memstore.Options{})
	s := threeSegments(t, st)[0]
	fs := vfs.NewMem()
	r, m, d := diskReader(t, st, fs, 1<<30)
	readWhole(t, r, s)
	onDisk := spilled(t, r, m, d, dataChunks(s))
	r.Close()

	// Flip a byte in the middle of every chunk file's data.
	names, err := fs.List(diskDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		p := filepath.Join(diskDir, n)
		f, err := fs.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		info, _ := f.Stat()
		b := make([]byte, info.Size())
		if _, err := f.ReadAt(b, 0); err != nil {
			t.Fatal(err)
		}
		f.Close()
		b[len(b)/2] ^= 0x40
		if err := fs.Remove(p); err != nil {
			t.Fatal(err)
		}
		w, err := fs.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(b)
		w.Close()
	}
	log := newGetLog()
	st.SetHook(log.hook)
	r2, m2, d2 := diskReader(t, st, fs, 1<<30)
	readWhole(t, r2, s)
	if v := value(t, m2.DiskCache.CorruptChunks); int64(v) != onDisk {
		t.Fatalf("%v corrupt chunks counted, want %d", v, onDisk)
	}
	if n := int64(log.total()); n != dataChunks(s)+1 {
		t.Fatalf("%d GETs, want every chunk and the tail once (%d)", n, dataChunks(s)+1)
	}
	// Rewritten: a third reader reads what is on disk from disk, and
	// finds nothing corrupt.
	onDisk = spilled(t, r2, m2, d2, dataChunks(s))
	r2.Close()
	before := log.total()
	r3, m3, _ := diskReader(t, st, fs, 1<<30)
	readWhole(t, r3, s)
	if n := int64(log.total() - before); n != 1+dataChunks(s)-onDisk || value(t, m3.DiskCache.CorruptChunks) != 0 {
		t.Fatalf("%d GETs with %d of %d chunks on disk, %v corrupt after the rewrite", n, onDisk, dataChunks(s), value(t, m3.DiskCache.CorruptChunks))
	}
}

// Bytes damaged in transit, which the disk cache may already have
// stored (its checksum covers what it was given), are dropped from disk
// too when the read proves them corrupt: the retry downloads them again.
func TestDiskCacheDropsChunkDamagedInTransit(t *testing.T) {
	st := memstore.New(memstore.Options{})
	s := threeSegments(t, st)[0]
	fs := vfs.NewMem()
	var once atomic.Bool
	const damaged = 2 * testChunk
	st.SetHook(func(c memstore.Call) memstore.Fault {
		if c.Op == objstore.OpGetRange && c.Off == damaged && once.CompareAndSwap(false, true) {
			return memstore.Fault{Body: func(b []byte) []byte { b[testChunk/2] ^= 1; return b }}
		}
		return memstore.Fault{}
	})
	r, _, _ := diskReader(t, st, fs, 1<<30)
	var err error
	for off := s.ref.BaseOffset; off <= s.ref.LastOffset && err == nil; {
		var b []byte
		if b, err = r.Fetch(bg, s.ref, off, testChunk); err == nil {
			last, _ := lastOffsetOf(b)
			off = last + 1
		}
	}
	if !errors.Is(err, segfile.ErrCorrupt) || !corruption.Is(err) {
		t.Fatalf("damaged in transit: %v, want segfile.ErrCorrupt, marked as corruption", err)
	}
	// Whatever the writer was doing, the damaged chunk is not on disk
	// once it is idle; a new reader (memory cold) reads everything right.
	testwait.Until(t, 10*time.Second, "the disk writer to be idle", func() bool { return r.pendingSpills.Load() == 0 })
	r.Close()
	r2, _, _ := diskReader(t, st, fs, 1<<30)
	readWhole(t, r2, s)
}

// The disk cache stays within its bound while a reader goes through more
// than it holds.
func TestDiskCacheBound(t *testing.T) {
	st := memstore.New(memstore.Options{})
	segs := threeSegments(t, st)
	fs := vfs.NewMem()
	capBytes := int64(5 * (testChunk + 200))
	r, m, d := diskReader(t, st, fs, capBytes)
	for _, s := range segs {
		readWhole(t, r, s)
	}
	testwait.Until(t, 10*time.Second, "evictions", func() bool { return value(t, m.DiskCache.Evictions) > 0 })
	if d.Bytes() > capBytes || int64(value(t, m.DiskCache.Bytes)) != d.Bytes() {
		t.Fatalf("disk cache %d bytes (gauge %v) over its bound %d", d.Bytes(), value(t, m.DiskCache.Bytes), capBytes)
	}
}
