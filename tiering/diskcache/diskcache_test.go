package diskcache

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/strata-log/strata/internal/corruption"
	"github.com/strata-log/strata/vfs"
)

const dir = "/cache"

// fileBytes is the size of the file of a chunk of key with n data bytes.
func fileBytes(key string, n int) int64 { return int64(headerBytes + len(key) + n + crcBytes) }

func chunkData(key string, index int64, n int) []byte {
	return bytes.Repeat(fmt.Appendf(nil, "%s/%d;", key, index), n)[:n]
}

func open(t *testing.T, fs vfs.FS, capBytes int64) (*Cache, *Metrics) {
	t.Helper()
	m := NewMetrics(prometheus.NewRegistry())
	c, err := Open(fs, Config{Dir: dir, CapBytes: capBytes}, m)
	if err != nil {
		t.Fatal(err)
	}
	return c, m
}

func put(t *testing.T, c *Cache, key string, index int64, n int) {
	t.Helper()
	if err := c.Put(key, index, chunkData(key, index, n)); err != nil {
		t.Fatal(err)
	}
}

// has checks that Get finds (or not) chunk index of key with n bytes.
func has(t *testing.T, c *Cache, key string, index int64, n int) bool {
	t.Helper()
	got, ok := c.Get(key, index, int64(n))
	if ok && !bytes.Equal(got, chunkData(key, index, n)) {
		t.Fatalf("chunk %d of %s: wrong bytes", index, key)
	}
	return ok
}

func value(t *testing.T, c prometheus.Metric) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	if m.Counter != nil {
		return m.Counter.GetValue()
	}
	return m.Gauge.GetValue()
}

// files lists the directory's chunk and temporary files.
func files(t *testing.T, fs vfs.FS) []string {
	t.Helper()
	names, err := fs.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// D1: least recently used first, Get counting as a use; never above the
// bound.
func TestEvictionOrderAndBound(t *testing.T) {
	fs := vfs.NewMem()
	const n = 1000
	capBytes := 3 * fileBytes("obj/a", n)
	c, m := open(t, fs, capBytes)
	put(t, c, "obj/a", 0, n)
	put(t, c, "obj/a", 1, n)
	put(t, c, "obj/a", 2, n)
	if !has(t, c, "obj/a", 0, n) { // 0 is now the most recent
		t.Fatal("chunk 0 missing")
	}
	put(t, c, "obj/a", 3, n) // evicts 1
	if has(t, c, "obj/a", 1, n) {
		t.Fatal("chunk 1 should have been evicted (least recently used)")
	}
	for _, i := range []int64{0, 2, 3} {
		if !has(t, c, "obj/a", i, n) {
			t.Fatalf("chunk %d missing", i)
		}
	}
	if c.Bytes() != capBytes || c.Len() != 3 || len(files(t, fs)) != 3 {
		t.Fatalf("bytes %d (cap %d), %d chunks, files %v", c.Bytes(), capBytes, c.Len(), files(t, fs))
	}
	if v := value(t, m.Evictions); v != 1 {
		t.Fatalf("evictions %v", v)
	}
	if v := value(t, m.Bytes); int64(v) != capBytes {
		t.Fatalf("bytes gauge %v", v)
	}
	// A chunk larger than the whole cache is not stored and evicts nothing.
	if err := c.Put("obj/big", 0, make([]byte, capBytes)); err != nil {
		t.Fatal(err)
	}
	if c.Len() != 3 {
		t.Fatalf("%d chunks after an oversized put", c.Len())
	}
	// Many puts: the bound always holds.
	for i := range int64(50) {
		put(t, c, "obj/b", i, n/2+int(i))
		if c.Bytes() > capBytes {
			t.Fatalf("bytes %d above the bound %d", c.Bytes(), capBytes)
		}
	}
}

// D4: a chunk is found only under the key and number it was stored for,
// and only with the size asked for (a chunk's size is fixed by its
// object's: a file of another size is not the chunk, and goes).
func TestKeyedByObjectAndChunk(t *testing.T) {
	c, _ := open(t, vfs.NewMem(), 1<<20)
	put(t, c, "t/x/0-9-aaaa.seg", 0, 100)
	for _, q := range []struct {
		key      string
		index, n int64
	}{{"t/x/0-9-bbbb.seg", 0, 100}, {"t/x/0-9-aaaa.seg", 1, 100}} {
		if _, ok := c.Get(q.key, q.index, q.n); ok {
			t.Fatalf("found %+v", q)
		}
	}
	if !has(t, c, "t/x/0-9-aaaa.seg", 0, 100) {
		t.Fatal("the chunk itself is missing")
	}
	if _, ok := c.Get("t/x/0-9-aaaa.seg", 0, 99); ok || c.Len() != 0 {
		t.Fatalf("a 99-byte read of a 100-byte chunk: found %t, %d chunks left", ok, c.Len())
	}
}

// D2: every kind of damage is a miss, deletes the file and is counted;
// the chunk can be stored again.
func TestCorruptFileIsDeletedNeverServed(t *testing.T) {
	const key, n = "obj/c", 5000
	for _, c := range []struct {
		name   string
		damage func(b []byte) []byte
	}{
		{"bit flip in data", func(b []byte) []byte { b[headerBytes+len(key)+n/2] ^= 0x10; return b }},
		{"bit flip in crc", func(b []byte) []byte { b[len(b)-1] ^= 1; return b }},
		{"bit flip in key", func(b []byte) []byte { b[headerBytes] ^= 1; return b }},
		{"truncated", func(b []byte) []byte { return b[:len(b)-100] }},
		{"empty", func(b []byte) []byte { return nil }},
		{"zeroed", func(b []byte) []byte { return make([]byte, len(b)) }},
		{"another chunk's file", func([]byte) []byte {
			var buf bytes.Buffer
			other := chunkData(key, 7, n)
			fs := vfs.NewMem()
			oc, _ := Open(fs, Config{Dir: dir, CapBytes: 1 << 20}, nil)
			if err := oc.Put(key, 7, other); err != nil {
				panic(err)
			}
			buf.Write(readAll(t, fs, files(t, fs)[0]))
			return buf.Bytes()
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			fs := vfs.NewMem()
			cache, m := open(t, fs, 1<<20)
			put(t, cache, key, 0, n)
			name := files(t, fs)[0]
			damaged := c.damage(readAll(t, fs, name))
			if _, err := check(damaged, key, 0, n); !errors.Is(err, ErrCorrupt) || !corruption.Is(err) {
				t.Fatalf("check of the damaged file: %v, want ErrCorrupt, marked as corruption", err)
			}
			rewrite(t, fs, name, damaged)
			if has(t, cache, key, 0, n) {
				t.Fatal("damaged chunk served")
			}
			if v := value(t, m.CorruptChunks); v != 1 {
				t.Fatalf("corrupt count %v", v)
			}
			if f := files(t, fs); len(f) != 0 || cache.Bytes() != 0 {
				t.Fatalf("files %v, %d bytes left", f, cache.Bytes())
			}
			put(t, cache, key, 0, n)
			if !has(t, cache, key, 0, n) {
				t.Fatal("chunk stored again is missing")
			}
		})
	}
}

func readAll(t *testing.T, fs vfs.FS, name string) []byte {
	t.Helper()
	f, err := fs.Open(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, info.Size())
	if _, err := f.ReadAt(b, 0); err != nil {
		t.Fatal(err)
	}
	return b
}

// rewrite replaces a file's contents in place (same name, so the index
// still points at it).
func rewrite(t *testing.T, fs vfs.FS, name string, b []byte) {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := fs.Remove(p); err != nil {
		t.Fatal(err)
	}
	f, err := fs.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// D5 and D3: a new Cache over the directory finds the chunks, drops
// temporary and foreign files, keeps the newest copy of a chunk, and
// evicts the oldest down to a lowered bound.
func TestRestart(t *testing.T) {
	for _, osFS := range []bool{false, true} {
		t.Run(fmt.Sprintf("os=%t", osFS), func(t *testing.T) {
			fs := vfs.FS(vfs.NewMem())
			d := dir
			if osFS {
				fs, d = vfs.Default(), t.TempDir()
			}
			openAt := func(capBytes int64) *Cache {
				c, err := Open(fs, Config{Dir: d, CapBytes: capBytes}, nil)
				if err != nil {
					t.Fatal(err)
				}
				return c
			}
			const n = 1000
			one := fileBytes("obj/r", n)
			c := openAt(10 * one)
			for i := range int64(5) {
				put(t, c, "obj/r", i, n)
			}
			// A crash mid-write leaves a temporary file; someone left junk.
			for _, junk := range []string{"0123456789abcdef0123456789abcdef-9-99.chunk.tmp", "notes.txt"} {
				f, err := fs.Create(filepath.Join(d, junk))
				if err != nil {
					t.Fatal(err)
				}
				f.Write([]byte("partial"))
				f.Close()
			}

			c = openAt(10 * one)
			if c.Len() != 5 || c.Bytes() != 5*one {
				t.Fatalf("reopened: %d chunks, %d bytes", c.Len(), c.Bytes())
			}
			names, _ := fs.List(d)
			for _, nm := range names {
				if !strings.HasSuffix(nm, chunkSuffix) {
					t.Fatalf("%s left after Open", nm)
				}
			}
			for i := range int64(5) {
				if !has(t, c, "obj/r", i, n) {
					t.Fatalf("chunk %d lost across the restart", i)
				}
			}
			// New files continue the generations: a chunk written after the
			// restart is newer than every older one.
			put(t, c, "obj/r", 5, n)

			// Reopen with room for 3: the oldest-written go.
			c = openAt(3 * one)
			if c.Len() != 3 || c.Bytes() > 3*one {
				t.Fatalf("reopened smaller: %d chunks, %d bytes", c.Len(), c.Bytes())
			}
			for i := range int64(6) {
				if got, want := has(t, c, "obj/r", i, n), i >= 3; got != want {
					t.Fatalf("chunk %d present=%t after shrinking", i, got)
				}
			}
			if names, _ := fs.List(d); len(names) != 3 {
				t.Fatalf("files %v", names)
			}
		})
	}
}

// A full or failing disk makes Put fail cleanly: counted, nothing
// indexed, no file left, and the cache goes on working.
func TestWriteErrors(t *testing.T) {
	fs := vfs.NewMem()
	c, m := open(t, fs, 1<<20)
	put(t, c, "obj/w", 0, 100)
	broken := errors.New("disk on fire")
	fs.InjectError(func(op vfs.Op, name string) error {
		if strings.HasSuffix(name, tempSuffix) || op == vfs.OpRename {
			return broken
		}
		return nil
	})
	if err := c.Put("obj/w", 1, chunkData("obj/w", 1, 100)); !errors.Is(err, broken) {
		t.Fatalf("put on a broken disk: %v", err)
	}
	fs.InjectError(nil)
	if v := value(t, m.WriteErrors); v != 1 {
		t.Fatalf("write errors %v", v)
	}
	if c.Len() != 1 || len(files(t, fs)) != 1 || !has(t, c, "obj/w", 0, 100) || has(t, c, "obj/w", 1, 100) {
		t.Fatalf("after a failed put: %d chunks, files %v", c.Len(), files(t, fs))
	}
}

// Remove forgets a chunk and deletes its file.
func TestRemove(t *testing.T) {
	fs := vfs.NewMem()
	c, _ := open(t, fs, 1<<20)
	put(t, c, "obj/x", 3, 100)
	c.Remove("obj/x", 3)
	c.Remove("obj/x", 4) // absent: nothing happens
	if has(t, c, "obj/x", 3, 100) || c.Bytes() != 0 || len(files(t, fs)) != 0 {
		t.Fatal("removed chunk still there")
	}
}

// Concurrent puts, gets and removes keep the index, the files and the
// bound consistent (run with -race).
func TestConcurrentUse(t *testing.T) {
	fs := vfs.NewMem()
	const n = 512
	capBytes := 8 * fileBytes("obj/k0", n)
	c, _ := open(t, fs, capBytes)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("obj/k%d", w%3)
			for i := range int64(200) {
				idx := i % 13
				switch i % 4 {
				case 0, 1:
					if err := c.Put(key, idx, chunkData(key, idx, n)); err != nil {
						t.Error(err)
					}
				case 2:
					if got, ok := c.Get(key, idx, n); ok && !bytes.Equal(got, chunkData(key, idx, n)) {
						t.Errorf("wrong bytes for chunk %d of %s", idx, key)
					}
				case 3:
					c.Remove(key, idx)
				}
			}
		}()
	}
	wg.Wait()
	if c.Bytes() > capBytes {
		t.Fatalf("bytes %d above the bound %d", c.Bytes(), capBytes)
	}
	if got := len(files(t, fs)); got != c.Len() {
		t.Fatalf("%d files, %d indexed", got, c.Len())
	}
}
