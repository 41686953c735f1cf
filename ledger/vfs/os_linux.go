package vfs

import (
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
