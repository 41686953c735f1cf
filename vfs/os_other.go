//go:build !linux

package vfs

import (
	"errors"
	"os"
)

// Off Linux, Sync is a full fsync (there is no portable fdatasync),
// CreateDirect writes through the page cache, preallocation is a no-op
// and DiskUsage is not supported. Strata's storage
// nodes run on Linux; this file only keeps the package building elsewhere.

// createDirect has no direct I/O to offer: a plain buffered create.
func createDirect(name string, open func(string, int, os.FileMode) (*os.File, error)) (*os.File, bool, error) {
	f, err := open(name, os.O_RDWR|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o644)
	return f, false, err
}

// openDirect has no direct I/O to offer: a plain buffered open.
func openDirect(name string) (*os.File, bool, error) {
	f, err := os.Open(name)
	return f, false, err
}

func syncData(o *osFile) error { return o.f.Sync() }

func preallocate(o *osFile, size int64) error { return nil }

func diskUsage(dir string) (DiskUsage, error) {
	return DiskUsage{}, &os.PathError{Op: "statfs", Path: dir, Err: errors.ErrUnsupported}
}
