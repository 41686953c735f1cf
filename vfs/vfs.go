package vfs

import (
	"io"
	"os"
	"unsafe"
)

// File is an open file. Writes always append at the end of the file (the
// file is opened with append semantics), so a File has no write offset to
// manage; reads are positional (ReadAt) and may run concurrently with a
// writer on another handle of the same file.
type File interface {
	io.ReaderAt
	io.Writer
	io.Closer
	// Sync makes the file's data durable (fdatasync semantics: data and the
	// metadata needed to read it back, such as the size, but not times).
	Sync() error
	// Truncate changes the file's size. Like writes, it is durable only
	// after Sync.
	Truncate(size int64) error
	// Stat returns the file's info; Size is the logical size readers see.
	Stat() (os.FileInfo, error)
	// Preallocate reserves disk space for the first size bytes of the file
	// without changing its logical size, so a later write within that range
	// does not fail for lack of space. It may be a no-op on file systems
	// that cannot reserve space.
	Preallocate(size int64) error
}

// FS is the file system seam. Paths are plain OS paths; every method is safe
// for concurrent use.
type FS interface {
	// Create creates a new file for reading and appending; it fails if the
	// file exists. The new directory entry is durable only after SyncDir of
	// its directory.
	Create(name string) (File, error)
	// CreateDirect is Create for a file written with direct I/O (O_DIRECT
	// on Linux): writes go to the device without a copy into the page
	// cache. Every Write must start at a file offset, have a length and
	// come from a buffer address that are multiples of DirectAlign
	// (AlignedBuffer makes such buffers); otherwise it fails with EINVAL
	// and writes nothing. Reads (through any handle) see the written bytes
	// at once; durability still needs Sync. direct is false when the file
	// system refuses direct I/O: the file is then opened for buffered
	// writes, which accept the same writes.
	CreateDirect(name string) (f File, direct bool, err error)
	// OpenReadWrite opens an existing file for reading and appending.
	OpenReadWrite(name string) (File, error)
	// Open opens an existing file read-only.
	Open(name string) (File, error)
	// OpenDirect is Open for reads with direct I/O: from the device into
	// the caller's buffer, without the page cache's copy and bookkeeping.
	// Every ReadAt must have an offset, a length and a buffer address that
	// are multiples of DirectAlign (EINVAL otherwise); a read may end
	// short at the end of the file, and a following read at the unaligned
	// offset fails, so a caller reads what it needs in one call. direct is
	// false when the file system refuses direct I/O: the handle then reads
	// through the page cache and accepts the same reads.
	OpenDirect(name string) (f File, direct bool, err error)
	// Remove removes a file (or an empty directory). Durable after SyncDir.
	Remove(name string) error
	// Rename renames a file, replacing newname if it exists. Durable after
	// SyncDir of both directories.
	Rename(oldname, newname string) error
	// MkdirAll creates dir and any missing parents.
	MkdirAll(dir string) error
	// List returns the base names of dir's entries, sorted.
	List(dir string) ([]string, error)
	// SyncDir makes the creations, removals and renames of dir's entries
	// durable (fsync of the directory).
	SyncDir(dir string) error
	// Stat returns the info of the named file or directory.
	Stat(name string) (os.FileInfo, error)
	// DiskUsage reports the size and free space of the file system that
	// holds dir.
	DiskUsage(dir string) (DiskUsage, error)
}

// DiskUsage is the capacity of a file system. FreeBytes counts the bytes
// available to an unprivileged writer.
type DiskUsage struct {
	TotalBytes uint64
	FreeBytes  uint64
}

// DirectAlign is the alignment direct I/O needs of a write's buffer address,
// length and file offset: 4096 covers devices with 512-byte and 4 KiB
// logical blocks.
const DirectAlign = 4096

// AlignedBuffer returns a zeroed slice of length and capacity n whose first
// byte is at an address that is a multiple of DirectAlign. (Go's heap
// objects do not move, so the alignment holds for the slice's life.)
func AlignedBuffer(n int) []byte {
	b := make([]byte, n+DirectAlign)
	skip := (DirectAlign - int(uintptr(unsafe.Pointer(unsafe.SliceData(b)))%DirectAlign)) % DirectAlign
	return b[skip : skip+n : skip+n]
}

// isAligned reports whether p's address and length are multiples of
// DirectAlign.
func isAligned(p []byte) bool {
	return len(p)%DirectAlign == 0 && (len(p) == 0 || uintptr(unsafe.Pointer(unsafe.SliceData(p)))%DirectAlign == 0)
}

// Default returns the operating system's file system.
func Default() FS { return osFS{} }
