//go:build !linux

package benchsuite

import (
	"errors"
	"os"
)

func fdatasync(f *os.File) error { return f.Sync() }

func reserve(*os.File, int64) error { return errors.ErrUnsupported }

func openProbe(name string, flags int) (*os.File, bool, error) {
	f, err := os.OpenFile(name, flags, 0o600)
	return f, false, err
}
