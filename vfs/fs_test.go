package vfs

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
)

// TestContract runs the same behavioural checks against the OS and MemFS,
// so the twin cannot drift from the real thing.
func TestContract(t *testing.T) {
	for _, tc := range bothFS(t) {
		t.Run(tc.name, func(t *testing.T) { testContract(t, tc.fs, tc.dir) })
	}
}

// fsCase is a file system under test and a directory in it.
type fsCase struct {
	name string
	fs   FS
	dir  string
}

// bothFS are the OS's file system (in a temporary directory) and MemFS:
// the contract tests run on both, so the twin cannot drift.
func bothFS(t *testing.T) []fsCase {
	return []fsCase{{"os", Default(), t.TempDir()}, {"mem", NewMem(), "/data"}}
}

func testContract(t *testing.T, fsys FS, root string) {
	dir := filepath.Join(root, "a", "b")
	must(t, fsys.MkdirAll(dir))
	must(t, fsys.MkdirAll(dir)) // idempotent
	name := filepath.Join(dir, "f")

	f, err := fsys.Create(name)
	must(t, err)
	if _, err := fsys.Create(name); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("Create of an existing file: %v, want ErrExist", err)
	}
	writeAll(t, f, []byte("hello "))
	must(t, f.Preallocate(1<<20))
	if info, err := f.Stat(); err != nil || info.Size() != 6 {
		t.Fatalf("Stat after Preallocate: %v %v, want size 6", info, err)
	}
	must(t, f.Sync())
	must(t, f.Close())
	if err := f.Close(); err == nil {
		t.Fatal("second Close succeeded")
	}

	// OpenReadWrite appends at the end.
	f, err = fsys.OpenReadWrite(name)
	must(t, err)
	writeAll(t, f, []byte("world"))
	got := make([]byte, 11)
	if n, err := f.ReadAt(got, 0); n != 11 || (err != nil && err != io.EOF) {
		t.Fatalf("ReadAt = %d, %v", n, err)
	}
	if string(got) != "hello world" {
		t.Fatalf("content %q", got)
	}
	// Reading past the end: io.EOF with a short count.
	if n, err := f.ReadAt(make([]byte, 4), 9); n != 2 || err != io.EOF {
		t.Fatalf("ReadAt past end = %d, %v; want 2, EOF", n, err)
	}
	must(t, f.Truncate(5))
	must(t, f.Sync())
	must(t, f.Close())

	// Read-only handles refuse writes.
	r, err := fsys.Open(name)
	must(t, err)
	if _, err := r.Write([]byte("x")); err == nil {
		t.Fatal("Write on a read-only file succeeded")
	}
	if info, err := r.Stat(); err != nil || info.Size() != 5 {
		t.Fatalf("Stat = %v, %v; want 5", info, err)
	}
	must(t, r.Close())
	if _, err := r.ReadAt(make([]byte, 1), 0); err == nil {
		t.Fatal("ReadAt on a closed file succeeded")
	}

	if _, err := fsys.Open(filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Open of a missing file: %v, want ErrNotExist", err)
	}
	if _, err := fsys.Create(filepath.Join(root, "nodir", "f")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Create in a missing directory: %v, want ErrNotExist", err)
	}

	// Rename replaces; List is sorted; Remove removes.
	for _, n := range []string{"c", "b2", "a1"} {
		f, err := fsys.Create(filepath.Join(dir, n))
		must(t, err)
		must(t, f.Close())
	}
	must(t, fsys.Rename(filepath.Join(dir, "c"), name))
	names, err := fsys.List(dir)
	must(t, err)
	if want := []string{"a1", "b2", "f"}; !slices.Equal(names, want) {
		t.Fatalf("List = %v, want %v", names, want)
	}
	if info, err := fsys.Stat(name); err != nil || info.Size() != 0 {
		t.Fatalf("Stat after rename = %v, %v; want the empty file", info, err)
	}
	must(t, fsys.Remove(filepath.Join(dir, "a1")))
	if _, err := fsys.Stat(filepath.Join(dir, "a1")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Stat after Remove: %v", err)
	}
	must(t, fsys.SyncDir(dir))
	if info, err := fsys.Stat(dir); err != nil || !info.IsDir() {
		t.Fatalf("Stat(dir) = %v, %v", info, err)
	}
	du, err := fsys.DiskUsage(dir)
	must(t, err)
	if du.TotalBytes == 0 || du.FreeBytes > du.TotalBytes {
		t.Fatalf("DiskUsage = %+v", du)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func writeAll(t testing.TB, f File, b []byte) {
	t.Helper()
	if n, err := f.Write(b); err != nil || n != len(b) {
		t.Fatalf("Write = %d, %v", n, err)
	}
}

func readAll(t testing.TB, fsys FS, name string) []byte {
	t.Helper()
	f, err := fsys.Open(name)
	must(t, err)
	defer f.Close()
	info, err := f.Stat()
	must(t, err)
	b := make([]byte, info.Size())
	if n, err := f.ReadAt(b, 0); n != len(b) || (err != nil && err != io.EOF) {
		t.Fatalf("ReadAt = %d, %v", n, err)
	}
	return b
}

// TestOSPreallocateKeepsSize checks that fallocate(KEEP_SIZE) reserves
// without showing readers any bytes, and that later appends land right
// after the logical end.
func TestOSPreallocateKeepsSize(t *testing.T) {
	fsys := Default()
	name := filepath.Join(t.TempDir(), "f")
	f, err := fsys.Create(name)
	must(t, err)
	defer f.Close()
	must(t, f.Preallocate(4<<20))
	writeAll(t, f, []byte("abc"))
	must(t, f.Sync())
	if got := readAll(t, fsys, name); !bytes.Equal(got, []byte("abc")) {
		t.Fatalf("content %q", got)
	}
}

// TestCreateDirect checks direct-I/O files on the OS and MemFS: aligned
// appends land after the preallocated logical end, a reader holding a
// buffered handle (and its page cache) sees every block right after the
// write that put it there, and MemFS refuses what Linux refuses.
func TestCreateDirect(t *testing.T) {
	for _, tc := range bothFS(t) {
		t.Run(tc.name, func(t *testing.T) {
			must(t, tc.fs.MkdirAll(tc.dir))
			name := filepath.Join(tc.dir, "direct")
			f, direct, err := tc.fs.CreateDirect(name)
			must(t, err)
			defer f.Close()
			t.Logf("direct I/O: %v", direct)
			if _, _, err := tc.fs.CreateDirect(name); !errors.Is(err, fs.ErrExist) {
				t.Fatalf("CreateDirect of an existing file: %v, want ErrExist", err)
			}
			must(t, f.Preallocate(1<<20))
			r, err := tc.fs.Open(name)
			must(t, err)
			defer r.Close()
			buf := AlignedBuffer(3 * DirectAlign)
			var want []byte
			for i := range 8 {
				block := buf[:(1+i%3)*DirectAlign]
				for k := range block {
					block[k] = byte(i*31 + k)
				}
				writeAll(t, f, block)
				must(t, f.Sync())
				want = append(want, block...)
				// Read the whole file through the long-lived buffered handle:
				// its cached pages of earlier blocks and of the new one must
				// agree with what was written.
				got := make([]byte, len(want)+1)
				if n, err := r.ReadAt(got, 0); n != len(want) || err != io.EOF {
					t.Fatalf("block %d: ReadAt = %d, %v; want %d, EOF", i, n, err, len(want))
				}
				if !bytes.Equal(got[:len(want)], want) {
					t.Fatalf("block %d: read back differs from what was written", i)
				}
			}
			// Direct reads: aligned ranges read back what was written, and
			// one past the end ends short.
			d, directRead, err := tc.fs.OpenDirect(name)
			must(t, err)
			defer d.Close()
			got := AlignedBuffer(len(want) + DirectAlign)
			for _, off := range []int{0, DirectAlign, len(want) - DirectAlign} {
				if n, err := d.ReadAt(got, int64(off)); n != len(want)-off || !bytes.Equal(got[:n], want[off:]) {
					t.Fatalf("direct ReadAt at %d = %d, %v; want %d bytes as written", off, n, err, len(want)-off)
				}
			}
			if !direct || !directRead {
				return
			}
			for _, bad := range [][]byte{buf[:100], buf[1 : 1+DirectAlign]} {
				if n, err := f.Write(bad); !errors.Is(err, syscall.EINVAL) || n != 0 {
					t.Fatalf("unaligned direct write of %d bytes = %d, %v; want 0, EINVAL", len(bad), n, err)
				}
				if _, err := d.ReadAt(bad, 0); !errors.Is(err, syscall.EINVAL) {
					t.Fatalf("unaligned direct read of %d bytes: %v; want EINVAL", len(bad), err)
				}
			}
			if _, err := d.ReadAt(buf[:DirectAlign], 100); !errors.Is(err, syscall.EINVAL) {
				t.Fatalf("direct read at an unaligned offset: %v; want EINVAL", err)
			}
			if info, err := f.Stat(); err != nil || info.Size() != int64(len(want)) {
				t.Fatalf("Stat = %v, %v; want %d bytes", info, err, len(want))
			}
		})
	}
}

func TestAlignedBuffer(t *testing.T) {
	for _, n := range []int{0, 1, DirectAlign, 3*DirectAlign + 5} {
		b := AlignedBuffer(n)
		if len(b) != n || cap(b) != n || (n > 0 && !isAligned(b[:n/DirectAlign*DirectAlign])) {
			t.Fatalf("AlignedBuffer(%d): len %d cap %d", n, len(b), cap(b))
		}
	}
}
