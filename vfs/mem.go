package vfs

import (
	"io"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Op names a file-system operation, for InjectError.
type Op int

// The operations InjectError sees. File-level operations carry the name the
// file was opened under.
const (
	OpCreate   Op = iota + 1
	OpOpen        // Open and OpenReadWrite
	OpRead        // File.ReadAt
	OpWrite       // File.Write
	OpSync        // File.Sync
	OpTruncate    // File.Truncate
	OpPreallocate
	OpStat // FS.Stat and File.Stat
	OpClose
	OpRemove
	OpRename // the name is the old name
	OpMkdirAll
	OpList
	OpSyncDir
	OpDiskUsage
)

var opNames = [...]string{
	OpCreate: "create", OpOpen: "open", OpRead: "read", OpWrite: "write",
	OpSync: "sync", OpTruncate: "truncate", OpPreallocate: "preallocate",
	OpStat: "stat", OpClose: "close", OpRemove: "remove", OpRename: "rename",
	OpMkdirAll: "mkdirall", OpList: "list", OpSyncDir: "syncdir", OpDiskUsage: "diskusage",
}

func (o Op) String() string {
	if o > 0 && int(o) < len(opNames) {
		return opNames[o]
	}
	return "op(" + strconv.Itoa(int(o)) + ")"
}

// CrashOptions shapes what Crash keeps.
type CrashOptions struct {
	// TornTail keeps, for every file with unsynced appended bytes, a random
	// prefix of those bytes, possibly garbled (bytes changed, a range
	// zeroed, or all of it zeroed), as a power failure in the middle of
	// write-back can. See doc.go for the distribution.
	TornTail bool
	// Rand drives TornTail. nil means a fixed seed.
	Rand *rand.Rand
}

// unlimitedBytes is the total size a MemFS without capacity reports.
const unlimitedBytes = 1 << 50

// MemFS is an in-memory FS that remembers what is durable, so a test can
// simulate a crash (Crash), inject errors (InjectError) and run out of space
// (SetCapacity). It is safe for concurrent use. See doc.go for the
// durability model.
type MemFS struct {
	inject atomic.Pointer[injector]

	mu struct {
		// Reads take the read lock; everything else, and Crash, the write
		// lock, so a crash is a consistent cut of the file system.
		sync.RWMutex
		dirs     map[string]*memDir // by clean path; "/" and "." always exist
		capacity int64              // 0: unlimited
		used     int64              // sum of usage() over linked nodes
	}
}

type injector struct {
	fn func(op Op, name string) error
}

// memDir is a directory: its entries now and as of its last SyncDir.
// Directories themselves are durable as soon as they are created.
type memDir struct {
	entries map[string]*memNode
	durable map[string]*memNode
}

// memNode is a file's contents.
// REQUIRES: MemFS.mu held (read lock to read, write lock to change).
type memNode struct {
	data      []byte
	syncedLen int // data[:syncedLen] is durable (when durableData is nil)
	// durableData is non-nil when a Truncate cut into synced bytes after
	// the last Sync: it holds the content a crash restores.
	durableData []byte
	reserved    int64 // bytes reserved by Preallocate
	linked      bool  // reachable from a directory: counts toward used
}

func (n *memNode) usage() int64 { return max(int64(len(n.data)), n.reserved) }

// NewMem returns an empty MemFS with unlimited capacity and no error
// injection.
func NewMem() *MemFS {
	m := &MemFS{}
	m.mu.dirs = map[string]*memDir{"/": newMemDir(), ".": newMemDir()}
	return m
}

func newMemDir() *memDir {
	return &memDir{entries: map[string]*memNode{}, durable: map[string]*memNode{}}
}

// InjectError installs fn, called before every operation with the operation
// and the path it concerns; a non-nil result is returned by that operation
// (wrapped in an *fs.PathError) and the operation does nothing. fn runs
// without MemFS locks held, possibly from several goroutines at once, and
// may call Crash. nil removes the injector.
func (m *MemFS) InjectError(fn func(op Op, name string) error) {
	if fn == nil {
		m.inject.Store(nil)
		return
	}
	m.inject.Store(&injector{fn: fn})
}

// SetCapacity limits the bytes the files of m may hold (data or
// preallocated, whichever is larger, per file); 0 means unlimited. A write
// that does not fit writes what fits and fails with an error wrapping
// syscall.ENOSPC; a Preallocate that does not fit fails and reserves
// nothing. DiskUsage reports the capacity.
func (m *MemFS) SetCapacity(bytes uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.mu.capacity = int64(min(bytes, uint64(unlimitedBytes)))
}

// Crash returns a new MemFS holding only what a power failure at this
// instant would leave: every file as of its last Sync (with TornTail, plus a
// random, possibly garbled, prefix of its unsynced appends), and every
// directory as of its last SyncDir: creations, removals and renames not
// followed by SyncDir of their directory are undone. m itself is unchanged
// and keeps working, so the code under test can be shut down. The new
// MemFS has m's capacity and no error injector.
func (m *MemFS) Crash(opts CrashOptions) *MemFS {
	r := opts.Rand
	if r == nil {
		r = rand.New(rand.NewPCG(0, 0))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := NewMem()
	out.mu.capacity = m.mu.capacity
	copies := map[*memNode]*memNode{}
	// Sorted iteration: the same Rand gives the same crash.
	for _, dirName := range slices.Sorted(maps.Keys(m.mu.dirs)) {
		d := m.mu.dirs[dirName]
		nd := out.mu.dirs[dirName]
		if nd == nil {
			nd = newMemDir()
			out.mu.dirs[dirName] = nd
		}
		for _, base := range slices.Sorted(maps.Keys(d.durable)) {
			n := d.durable[base]
			c, seen := copies[n]
			if !seen {
				c = n.crashCopy(opts.TornTail, r)
				copies[n] = c
			} else {
				// The same file under two names (a rename whose two
				// directories were not both synced): give each its own copy.
				c = &memNode{data: slices.Clone(c.data), syncedLen: c.syncedLen, reserved: c.reserved}
			}
			c.linked = true
			out.mu.used += c.usage()
			nd.entries[base] = c
			nd.durable[base] = c
		}
	}
	return out
}

// crashCopy returns what survives of n after a crash.
// REQUIRES: MemFS.mu held.
func (n *memNode) crashCopy(torn bool, r *rand.Rand) *memNode {
	var data []byte
	if n.durableData != nil {
		data = slices.Clone(n.durableData)
	} else {
		synced := min(n.syncedLen, len(n.data))
		data = slices.Clone(n.data[:synced])
		if tail := n.data[synced:]; torn && len(tail) > 0 {
			kept := slices.Clone(tail[:tornLength(len(tail), r)])
			garble(kept, r)
			data = append(data, kept...)
		}
	}
	return &memNode{data: data, syncedLen: len(data), reserved: n.reserved}
}

// tornLength picks how many of n unsynced bytes survive a crash: none,
// all, or a uniform prefix, each shape often enough for a test to meet it.
func tornLength(n int, r *rand.Rand) int {
	switch r.IntN(4) {
	case 0:
		return 0
	case 1:
		return n
	default:
		return r.IntN(n + 1)
	}
}

// garble damages b the ways a torn write can: nothing, a few bytes changed,
// a range of zeros (a sector never written), or all zeros (the size was
// written back but not the data).
func garble(b []byte, r *rand.Rand) {
	if len(b) == 0 {
		return
	}
	switch r.IntN(5) {
	case 1:
		flipBytes(b, r)
	case 2:
		zeroRange(b, r)
	case 3:
		flipBytes(b, r)
		zeroRange(b, r)
	case 4:
		clear(b)
	}
}

func flipBytes(b []byte, r *rand.Rand) {
	for range 1 + r.IntN(3) {
		b[r.IntN(len(b))] ^= byte(1 + r.IntN(255))
	}
}

func zeroRange(b []byte, r *rand.Rand) {
	start := r.IntN(len(b))
	clear(b[start : start+1+r.IntN(len(b)-start)])
}

// check runs the injector, if any, for op on name.
func (m *MemFS) check(op Op, name string) error {
	if in := m.inject.Load(); in != nil {
		if err := in.fn(op, name); err != nil {
			return &fs.PathError{Op: op.String(), Path: name, Err: err}
		}
	}
	return nil
}

func pathErr(op Op, name string, err error) error {
	return &fs.PathError{Op: op.String(), Path: name, Err: err}
}

// lookupLocked returns the directory holding name and name's node (nil if
// absent). The directory is nil if it does not exist.
// REQUIRES: m.mu held.
func (m *MemFS) lookupLocked(name string) (*memDir, string, *memNode) {
	d := m.mu.dirs[filepath.Dir(name)]
	base := filepath.Base(name)
	if d == nil {
		return nil, base, nil
	}
	return d, base, d.entries[base]
}

// unlinkLocked drops n from the space accounting.
// REQUIRES: m.mu held for writing.
func (m *MemFS) unlinkLocked(n *memNode) {
	if n.linked {
		m.mu.used -= n.usage()
		n.linked = false
	}
}

// Create implements FS.
func (m *MemFS) Create(name string) (File, error) {
	if err := m.check(OpCreate, name); err != nil {
		return nil, err
	}
	name = filepath.Clean(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	d, base, n := m.lookupLocked(name)
	switch {
	case d == nil:
		return nil, pathErr(OpCreate, name, syscall.ENOENT)
	case n != nil || m.mu.dirs[name] != nil:
		return nil, pathErr(OpCreate, name, syscall.EEXIST)
	}
	n = &memNode{linked: true}
	d.entries[base] = n
	return &memFile{fs: m, node: n, name: name, writable: true}, nil
}

// CreateDirect implements FS: MemFS plays a file system that supports
// direct I/O, so it holds writes to its rules (see doc.go).
func (m *MemFS) CreateDirect(name string) (File, bool, error) {
	f, err := m.Create(name)
	if err != nil {
		return nil, false, err
	}
	f.(*memFile).direct = true
	return f, true, nil
}

// OpenDirect implements FS: MemFS holds the handle's reads to direct I/O's
// alignment rules.
func (m *MemFS) OpenDirect(name string) (File, bool, error) {
	f, err := m.open(name, false)
	if err != nil {
		return nil, false, err
	}
	f.(*memFile).direct = true
	return f, true, nil
}

// OpenReadWrite implements FS.
func (m *MemFS) OpenReadWrite(name string) (File, error) { return m.open(name, true) }

// Open implements FS.
func (m *MemFS) Open(name string) (File, error) { return m.open(name, false) }

func (m *MemFS) open(name string, writable bool) (File, error) {
	if err := m.check(OpOpen, name); err != nil {
		return nil, err
	}
	name = filepath.Clean(name)
	m.mu.RLock()
	defer m.mu.RUnlock()
	_, _, n := m.lookupLocked(name)
	if n == nil {
		if m.mu.dirs[name] != nil {
			return nil, pathErr(OpOpen, name, syscall.EISDIR)
		}
		return nil, pathErr(OpOpen, name, syscall.ENOENT)
	}
	return &memFile{fs: m, node: n, name: name, writable: writable}, nil
}

// Remove implements FS.
func (m *MemFS) Remove(name string) error {
	if err := m.check(OpRemove, name); err != nil {
		return err
	}
	name = filepath.Clean(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.mu.dirs[name]; ok && name != "/" && name != "." {
		for other := range m.mu.dirs {
			if other != name && filepath.Dir(other) == name {
				return pathErr(OpRemove, name, syscall.ENOTEMPTY)
			}
		}
		if len(m.mu.dirs[name].entries) > 0 {
			return pathErr(OpRemove, name, syscall.ENOTEMPTY)
		}
		delete(m.mu.dirs, name)
		return nil
	}
	d, base, n := m.lookupLocked(name)
	if n == nil {
		return pathErr(OpRemove, name, syscall.ENOENT)
	}
	delete(d.entries, base)
	m.unlinkLocked(n)
	return nil
}

// Rename implements FS. Only files can be renamed.
func (m *MemFS) Rename(oldname, newname string) error {
	if err := m.check(OpRename, oldname); err != nil {
		return err
	}
	oldname, newname = filepath.Clean(oldname), filepath.Clean(newname)
	m.mu.Lock()
	defer m.mu.Unlock()
	od, obase, n := m.lookupLocked(oldname)
	if n == nil {
		return pathErr(OpRename, oldname, syscall.ENOENT)
	}
	nd, nbase, target := m.lookupLocked(newname)
	switch {
	case nd == nil:
		return pathErr(OpRename, newname, syscall.ENOENT)
	case m.mu.dirs[newname] != nil:
		return pathErr(OpRename, newname, syscall.EISDIR)
	case target == n:
		return nil
	}
	if target != nil {
		m.unlinkLocked(target)
	}
	delete(od.entries, obase)
	nd.entries[nbase] = n
	return nil
}

// MkdirAll implements FS. Directories are durable at once (see doc.go).
func (m *MemFS) MkdirAll(dir string) error {
	if err := m.check(OpMkdirAll, dir); err != nil {
		return err
	}
	dir = filepath.Clean(dir)
	m.mu.Lock()
	defer m.mu.Unlock()
	var missing []string
	for p := dir; m.mu.dirs[p] == nil; p = filepath.Dir(p) {
		if _, _, n := m.lookupLocked(p); n != nil {
			return pathErr(OpMkdirAll, p, syscall.ENOTDIR)
		}
		missing = append(missing, p)
	}
	for _, p := range missing {
		m.mu.dirs[p] = newMemDir()
	}
	return nil
}

// List implements FS: files and subdirectories, sorted.
func (m *MemFS) List(dir string) ([]string, error) {
	if err := m.check(OpList, dir); err != nil {
		return nil, err
	}
	dir = filepath.Clean(dir)
	m.mu.RLock()
	defer m.mu.RUnlock()
	d := m.mu.dirs[dir]
	if d == nil {
		return nil, pathErr(OpList, dir, syscall.ENOENT)
	}
	names := slices.Collect(maps.Keys(d.entries))
	for other := range m.mu.dirs {
		if other != dir && filepath.Dir(other) == dir {
			names = append(names, filepath.Base(other))
		}
	}
	slices.Sort(names)
	return names, nil
}

// SyncDir implements FS: the directory's entries as they are now become
// what a crash keeps.
func (m *MemFS) SyncDir(dir string) error {
	if err := m.check(OpSyncDir, dir); err != nil {
		return err
	}
	dir = filepath.Clean(dir)
	m.mu.Lock()
	defer m.mu.Unlock()
	d := m.mu.dirs[dir]
	if d == nil {
		return pathErr(OpSyncDir, dir, syscall.ENOENT)
	}
	d.durable = maps.Clone(d.entries)
	return nil
}

// Stat implements FS.
func (m *MemFS) Stat(name string) (os.FileInfo, error) {
	if err := m.check(OpStat, name); err != nil {
		return nil, err
	}
	name = filepath.Clean(name)
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.mu.dirs[name] != nil {
		return memInfo{name: filepath.Base(name), dir: true}, nil
	}
	_, base, n := m.lookupLocked(name)
	if n == nil {
		return nil, pathErr(OpStat, name, syscall.ENOENT)
	}
	return memInfo{name: base, size: int64(len(n.data))}, nil
}

// DiskUsage implements FS. Without a capacity the total is 1 PiB.
func (m *MemFS) DiskUsage(dir string) (DiskUsage, error) {
	if err := m.check(OpDiskUsage, dir); err != nil {
		return DiskUsage{}, err
	}
	dir = filepath.Clean(dir)
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.mu.dirs[dir] == nil {
		return DiskUsage{}, pathErr(OpDiskUsage, dir, syscall.ENOENT)
	}
	total := m.mu.capacity
	if total == 0 {
		total = unlimitedBytes
	}
	return DiskUsage{TotalBytes: uint64(total), FreeBytes: uint64(max(total-m.mu.used, 0))}, nil
}

// memFile is an open handle on a memNode. Handles stay valid after the file
// is removed or renamed, as on Linux.
type memFile struct {
	fs       *MemFS
	node     *memNode
	name     string
	writable bool
	direct   bool // by CreateDirect or OpenDirect: reads and writes must be aligned
	closed   atomic.Bool
}

// usable checks the injector and the handle's state for op.
func (f *memFile) usable(op Op, write bool) error {
	if err := f.fs.check(op, f.name); err != nil {
		return err
	}
	if f.closed.Load() {
		return pathErr(op, f.name, fs.ErrClosed)
	}
	if write && !f.writable {
		return pathErr(op, f.name, syscall.EBADF)
	}
	return nil
}

func (f *memFile) ReadAt(p []byte, off int64) (int, error) {
	if err := f.usable(OpRead, false); err != nil {
		return 0, err
	}
	if off < 0 || (f.direct && (!isAligned(p) || off%DirectAlign != 0)) {
		return 0, pathErr(OpRead, f.name, syscall.EINVAL)
	}
	m := f.fs
	m.mu.RLock()
	defer m.mu.RUnlock()
	data := f.node.data
	if off >= int64(len(data)) {
		return 0, io.EOF
	}
	n := copy(p, data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (f *memFile) Write(p []byte) (int, error) {
	if err := f.usable(OpWrite, true); err != nil {
		return 0, err
	}
	if f.direct && !isAligned(p) {
		return 0, pathErr(OpWrite, f.name, syscall.EINVAL)
	}
	m := f.fs
	m.mu.Lock()
	defer m.mu.Unlock()
	n := f.node
	if f.direct && len(n.data)%DirectAlign != 0 {
		return 0, pathErr(OpWrite, f.name, syscall.EINVAL)
	}
	var err error
	want := len(p)
	if m.mu.capacity > 0 && n.linked {
		// After the write, used - usage + max(len, reserved) <= capacity.
		maxLen := m.mu.capacity - m.mu.used + n.usage()
		if int64(len(n.data)+want) > maxLen {
			want = int(max(maxLen-int64(len(n.data)), 0))
			err = pathErr(OpWrite, f.name, syscall.ENOSPC)
		}
	}
	before := n.usage()
	n.data = append(n.data, p[:want]...)
	if n.linked {
		m.mu.used += n.usage() - before
	}
	return want, err
}

func (f *memFile) Sync() error {
	if err := f.usable(OpSync, false); err != nil {
		return err
	}
	m := f.fs
	m.mu.Lock()
	defer m.mu.Unlock()
	f.node.syncedLen = len(f.node.data)
	f.node.durableData = nil
	return nil
}

// Truncate implements File. Like ftruncate it also releases space
// preallocated beyond the new size.
func (f *memFile) Truncate(size int64) error {
	if err := f.usable(OpTruncate, true); err != nil {
		return err
	}
	if size < 0 {
		return pathErr(OpTruncate, f.name, syscall.EINVAL)
	}
	m := f.fs
	m.mu.Lock()
	defer m.mu.Unlock()
	n := f.node
	if size < int64(n.syncedLen) && n.durableData == nil {
		n.durableData = slices.Clone(n.data[:n.syncedLen])
	}
	before := n.usage()
	if grow := size - int64(len(n.data)); grow > 0 {
		if m.mu.capacity > 0 && n.linked && m.mu.used-before+max(size, n.reserved) > m.mu.capacity {
			return pathErr(OpTruncate, f.name, syscall.ENOSPC)
		}
		n.data = append(n.data, make([]byte, grow)...)
	} else {
		n.data = n.data[:size:size] // a later append must not reuse cut bytes
	}
	n.reserved = min(n.reserved, size)
	if n.linked {
		m.mu.used += n.usage() - before
	}
	return nil
}

func (f *memFile) Stat() (os.FileInfo, error) {
	if err := f.usable(OpStat, false); err != nil {
		return nil, err
	}
	m := f.fs
	m.mu.RLock()
	defer m.mu.RUnlock()
	return memInfo{name: filepath.Base(f.name), size: int64(len(f.node.data))}, nil
}

func (f *memFile) Preallocate(size int64) error {
	if err := f.usable(OpPreallocate, true); err != nil {
		return err
	}
	m := f.fs
	m.mu.Lock()
	defer m.mu.Unlock()
	n := f.node
	if size <= n.reserved {
		return nil
	}
	delta := max(int64(len(n.data)), size) - n.usage()
	if m.mu.capacity > 0 && n.linked && m.mu.used+delta > m.mu.capacity {
		return pathErr(OpPreallocate, f.name, syscall.ENOSPC)
	}
	n.reserved = size
	if n.linked {
		m.mu.used += delta
	}
	return nil
}

func (f *memFile) Close() error {
	if err := f.fs.check(OpClose, f.name); err != nil {
		return err
	}
	if f.closed.Swap(true) {
		return pathErr(OpClose, f.name, fs.ErrClosed)
	}
	return nil
}

// memInfo is the os.FileInfo of a MemFS file or directory.
type memInfo struct {
	name string
	size int64
	dir  bool
}

func (i memInfo) Name() string       { return i.name }
func (i memInfo) Size() int64        { return i.size }
func (i memInfo) ModTime() time.Time { return time.Time{} }
func (i memInfo) IsDir() bool        { return i.dir }
func (i memInfo) Sys() any           { return nil }
func (i memInfo) Mode() fs.FileMode {
	if i.dir {
		return fs.ModeDir | 0o755
	}
	return 0o644
}
