package benchsuite

import (
	"os"
	"syscall"
)

// fdatasync makes f's data durable as the bookie journal does.
func fdatasync(f *os.File) error { return syscall.Fdatasync(int(f.Fd())) }

// reserve preallocates n bytes without changing the file's size
// (FALLOC_FL_KEEP_SIZE), as the journal does; errors are ignored by the
// caller (some file systems cannot).
func reserve(f *os.File, n int64) error { return syscall.Fallocate(int(f.Fd()), 1, 0, n) }
