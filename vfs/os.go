package vfs

import (
	"os"
	"syscall"
)

// osFS is the real file system. Platform details (fdatasync, fallocate,
// statfs) live in os_linux.go and os_other.go.
type osFS struct{}

func (osFS) Create(name string) (File, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &osFile{f: f}, nil
}

// CreateDirect opens with O_DIRECT where the platform has it, falling back
// to buffered writes when the file system refuses it (os_linux.go).
func (osFS) CreateDirect(name string) (File, bool, error) {
	f, direct, err := createDirect(name, os.OpenFile)
	if err != nil {
		return nil, false, err
	}
	return &osFile{f: f}, direct, nil
}

func (osFS) OpenReadWrite(name string) (File, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_APPEND, 0)
	if err != nil {
		return nil, err
	}
	return &osFile{f: f}, nil
}

func (osFS) Open(name string) (File, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	return &osFile{f: f}, nil
}

// OpenDirect opens read-only with O_DIRECT where the platform has it,
// falling back to a buffered handle when the file system refuses it.
func (osFS) OpenDirect(name string) (File, bool, error) {
	f, direct, err := openDirect(name)
	if err != nil {
		return nil, false, err
	}
	return &osFile{f: f}, direct, nil
}

func (osFS) Remove(name string) error              { return os.Remove(name) }
func (osFS) Rename(oldname, newname string) error  { return os.Rename(oldname, newname) }
func (osFS) MkdirAll(dir string) error             { return os.MkdirAll(dir, 0o755) }
func (osFS) Stat(name string) (os.FileInfo, error) { return os.Stat(name) }
func (osFS) DiskUsage(dir string) (DiskUsage, error) {
	return diskUsage(dir)
}

func (osFS) List(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir) // sorted by name
	if err != nil {
		return nil, err
	}
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name()
	}
	return names, nil
}

// SyncDir fsyncs the directory itself: on Linux that is what makes a new,
// removed or renamed entry survive a power failure.
func (osFS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	if err := d.Sync(); err != nil {
		d.Close()
		return err
	}
	return d.Close()
}

// osFile is an *os.File with fdatasync and preallocation.
type osFile struct {
	f *os.File
}

func (o *osFile) ReadAt(p []byte, off int64) (int, error) { return o.f.ReadAt(p, off) }
func (o *osFile) Write(p []byte) (int, error)             { return o.f.Write(p) }
func (o *osFile) Close() error                            { return o.f.Close() }
func (o *osFile) Truncate(size int64) error               { return o.f.Truncate(size) }
func (o *osFile) Stat() (os.FileInfo, error)              { return o.f.Stat() }

// Sync is fdatasync on Linux (see os_linux.go).
func (o *osFile) Sync() error { return syncData(o) }

// Preallocate is fallocate(FALLOC_FL_KEEP_SIZE) on Linux (see os_linux.go).
func (o *osFile) Preallocate(size int64) error {
	if size <= 0 {
		return nil
	}
	return preallocate(o, size)
}

// control runs fn on the file's descriptor without f.Fd(), which would put
// the file in blocking mode and detach it from the runtime poller.
func (o *osFile) control(op string, fn func(fd int) error) error {
	rc, err := o.f.SyscallConn()
	if err != nil {
		return err
	}
	var opErr error
	if err := rc.Control(func(fd uintptr) { opErr = fn(int(fd)) }); err != nil {
		return err
	}
	if opErr != nil {
		return &os.PathError{Op: op, Path: o.f.Name(), Err: opErr}
	}
	return nil
}

// ignoringEINTR retries fn while it is interrupted by a signal; EINTR is not
// an I/O outcome, so retrying it is not retrying a failed fsync.
func ignoringEINTR(fn func() error) error {
	for {
		err := fn()
		if err != syscall.EINTR {
			return err
		}
	}
}
