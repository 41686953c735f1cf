package cli

import (
	"io/fs"
	"os"
	"path/filepath"
)

// WriteFileAtomic writes data to path with WriteFileAs, readable by its
// owner only (mode 0600: metad snapshots hold every key).
func WriteFileAtomic(path string, data []byte) error {
	return WriteFileAs(path, data, 0o600, nil)
}

// Owner is a file's user and group (WriteFileAs).
type Owner struct{ UID, GID int }

// WriteFileAs writes data to path through a new temporary file in the
// same directory, given mode perm (and owner, when not nil) before any
// byte is written, fsynced, then renamed over path and the directory
// fsynced: a reader sees the old file or the new one, never a part, and
// never a key with looser rights than perm.
func WriteFileAs(path string, data []byte, perm fs.FileMode, owner *Owner) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after a successful rename, nothing to remove
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return err
	}
	if owner != nil {
		if err := tmp.Chown(owner.UID, owner.GID); err != nil {
			tmp.Close()
			return err
		}
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	dir, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer dir.Close()
	return dir.Sync()
}
