package vfs

import (
	"errors"
	"os"
	"syscall"
)

// fallocKeepSize is FALLOC_FL_KEEP_SIZE from <linux/falloc.h>: reserve blocks
// without changing the file size.
const fallocKeepSize = 0x1

func syncData(o *osFile) error {
	return o.control("fdatasync", func(fd int) error {
		return ignoringEINTR(func() error { return syscall.Fdatasync(fd) })
	})
}

// preallocate reserves [0, size) of the file. File systems that cannot
// (EOPNOTSUPP) get no reservation; ENOSPC and other errors are returned.
func preallocate(o *osFile, size int64) error {
	return o.control("fallocate", func(fd int) error {
		err := ignoringEINTR(func() error { return syscall.Fallocate(fd, fallocKeepSize, 0, size) })
		if err == syscall.EOPNOTSUPP || err == syscall.ENOSYS {
			return nil
		}
		return err
	})
}

func diskUsage(dir string) (DiskUsage, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return DiskUsage{}, &os.PathError{Op: "statfs", Path: dir, Err: err}
	}
	bsize := uint64(st.Bsize)
	return DiskUsage{TotalBytes: st.Blocks * bsize, FreeBytes: st.Bavail * bsize}, nil
}

// openDirect opens name read-only with O_DIRECT, or buffered where the file
// system refuses it (EINVAL).
func openDirect(name string) (*os.File, bool, error) {
	f, err := os.OpenFile(name, os.O_RDONLY|syscall.O_DIRECT, 0)
	if err == nil {
		return f, true, nil
	}
	if !errors.Is(err, syscall.EINVAL) {
		return nil, false, err
	}
	f, err = os.Open(name)
	return f, false, err
}

// createDirect creates name with O_DIRECT. A file system that cannot do
// direct I/O (tmpfs before Linux 6.6, some FUSE and overlay setups) fails
// the open with EINVAL; Linux checks that only after creating the file, so
// the file then exists, empty, and is opened again for buffered writes.
// open is os.OpenFile (a parameter so tests can play such a file system).
func createDirect(name string, open func(string, int, os.FileMode) (*os.File, error)) (*os.File, bool, error) {
	const flags = os.O_RDWR | os.O_CREATE | os.O_EXCL | os.O_APPEND
	f, err := open(name, flags|syscall.O_DIRECT, 0o644)
	if err == nil {
		return f, true, nil
	}
	if !errors.Is(err, syscall.EINVAL) {
		return nil, false, err
	}
	// Whether the refused open left the file behind depends on where the
	// file system refused: create it if it is not there (O_EXCL still
	// guards against a file that existed before the first open, which
	// would have failed with EEXIST instead).
	f, err2 := open(name, flags, 0o644)
	if errors.Is(err2, syscall.EEXIST) {
		f, err2 = open(name, os.O_RDWR|os.O_APPEND, 0)
	}
	if err2 != nil {
		return nil, false, errors.Join(err, err2)
	}
	return f, false, nil
}
