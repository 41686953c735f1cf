package vfs

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestCreateDirectFallback plays a file system that refuses O_DIRECT the
// way Linux reports it (the file is created, then the open fails with
// EINVAL), or refuses before creating it: CreateDirect returns a buffered handle on that file and says so.
func TestCreateDirectFallback(t *testing.T) {
	for _, createsFirst := range []bool{true, false} {
		name := filepath.Join(t.TempDir(), "f")
		refuse := func(name string, flags int, perm os.FileMode) (*os.File, error) {
			if flags&syscall.O_DIRECT != 0 {
				if _, err := os.Stat(name); err == nil { // O_EXCL is checked first
					return nil, &os.PathError{Op: "open", Path: name, Err: syscall.EEXIST}
				}
				if createsFirst {
					f, err := os.OpenFile(name, flags&^syscall.O_DIRECT, perm)
					if err != nil {
						return nil, err
					}
					f.Close()
				}
				return nil, &os.PathError{Op: "open", Path: name, Err: syscall.EINVAL}
			}
			return os.OpenFile(name, flags, perm)
		}
		f, direct, err := createDirect(name, refuse)
		if err != nil || direct {
			t.Fatalf("createDirect on a refusing file system = %v, %v", direct, err)
		}
		file := &osFile{f: f}
		writeAll(t, file, []byte("abc")) // buffered: any length
		must(t, file.Sync())
		must(t, file.Close())
		if got := readAll(t, Default(), name); string(got) != "abc" {
			t.Fatalf("content %q", got)
		}
		// An existing file is still refused, whatever the file system.
		if _, _, err := createDirect(name, refuse); !errors.Is(err, os.ErrExist) {
			t.Fatalf("createDirect of an existing file: %v", err)
		}
	}
}
