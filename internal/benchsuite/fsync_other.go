//go:build !linux

package benchsuite

import (
	"errors"
	"os"
)

func fdatasync(f *os.File) error { return f.Sync() }

func reserve(*os.File, int64) error { return errors.ErrUnsupported }
