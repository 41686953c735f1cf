package benchsuite

import (
	"errors"
	"os"
	"syscall"
)

// fdatasync makes f's data durable as the bookie journal does.
func fdatasync(f *os.File) error { return syscall.Fdatasync(int(f.Fd())) }

// reserve preallocates n bytes without changing the file's size
// (FALLOC_FL_KEEP_SIZE), as the journal does; errors are ignored by the
// caller (some file systems cannot).
func reserve(f *os.File, n int64) error { return syscall.Fallocate(int(f.Fd()), 1, 0, n) }

// openProbe opens name with O_DIRECT, as the journal writes (format 2),
// or without it where the file system refuses (EINVAL), as the journal
// then falls back; direct says which.
func openProbe(name string, flags int) (f *os.File, direct bool, err error) {
	f, err = os.OpenFile(name, flags|syscall.O_DIRECT, 0o600)
	if errors.Is(err, syscall.EINVAL) {
		f, err = os.OpenFile(name, flags, 0o600)
		return f, false, err
	}
	return f, err == nil, err
}
