//go:build !linux

package vfs

import (
	"errors"
	"os"
)

// Off Linux, Sync is a full fsync (there is no portable fdatasync),
// preallocation is a no-op and DiskUsage is not supported. Strata's storage
// nodes run on Linux; this file only keeps the package building elsewhere.

func syncData(o *osFile) error { return o.f.Sync() }

func preallocate(o *osFile, size int64) error { return nil }

func diskUsage(dir string) (DiskUsage, error) {
	return DiskUsage{}, &os.PathError{Op: "statfs", Path: dir, Err: errors.ErrUnsupported}
}
