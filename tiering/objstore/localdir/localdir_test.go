package localdir_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-log/strata/tiering/objstore"
	"github.com/strata-log/strata/tiering/objstore/localdir"
	"github.com/strata-log/strata/tiering/objstore/objstoretest"
)

func newStore(t *testing.T) *localdir.Store {
	s, err := localdir.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConformance(t *testing.T) {
	objstoretest.Run(t, objstoretest.Config{New: func(t *testing.T) objstore.Store { return newStore(t) }})
}

func TestRelativeRootRefused(t *testing.T) {
	if _, err := localdir.New("relative/dir"); err == nil {
		t.Fatal("New accepted a relative root")
	}
}

// TestKeysStayUnderRoot checks that no key, valid or not, creates a file
// outside the root.
func TestKeysStayUnderRoot(t *testing.T) {
	parent := t.TempDir()
	root := filepath.Join(parent, "root")
	s, err := localdir.New(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"../escape", "a/../../escape", "/abs/escape", ".objstore-uploads/x", "ok/../../escape"} {
		_, err := s.Put(t.Context(), key, bytes.NewReader([]byte("x")), 1, nil)
		if !errors.Is(err, objstore.ErrInvalidKey) {
			t.Errorf("Put(%q) = %v, want ErrInvalidKey", key, err)
		}
	}
	entries, _ := os.ReadDir(parent)
	if len(entries) != 1 || entries[0].Name() != "root" {
		t.Fatalf("files appeared next to the root: %v", entries)
	}
}

func TestFileAndDirectoryKeysConflictPermanently(t *testing.T) {
	s := newStore(t)
	if err := s.PutIfAbsent(t.Context(), "a/b", nil); err != nil {
		t.Fatal(err)
	}
	if err := s.PutIfAbsent(t.Context(), "a", nil); !errors.Is(err, objstore.ErrPermanent) || !strings.Contains(err.Error(), "directory") {
		t.Fatalf("Put(a) over directory a/: %v, want a permanent error naming the conflict", err)
	}
	if err := s.PutIfAbsent(t.Context(), "a/b/c", nil); !errors.Is(err, objstore.ErrPermanent) {
		t.Fatalf("Put(a/b/c) under object a/b: %v, want permanent", err)
	}
	if _, err := s.Stat(t.Context(), "a/b/c"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("Stat below an object: %v, want ErrNotFound", err)
	}
	if failed, err := s.Delete(t.Context(), []string{"a/b/c"}); err != nil || len(failed) != 0 {
		t.Fatalf("Delete below an object: %v, %v; want nothing to delete", failed, err)
	}
	if _, err := s.Stat(t.Context(), "a"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("Stat of a directory: %v, want ErrNotFound", err)
	}
	if failed, err := s.Delete(t.Context(), []string{"a"}); err != nil || len(failed) != 0 {
		t.Fatalf("Delete of a directory: %v, %v; want nothing to delete", failed, err)
	}
}

// TestCorruptFileIsPermanent: a file in the tree that is not an object
// file (written by hand, or damaged) is reported, never served as data.
func TestCorruptFileIsPermanent(t *testing.T) {
	s := newStore(t)
	if err := os.WriteFile(filepath.Join(s.Root(), "stray"), []byte("not an object"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetRange(t.Context(), "stray", 0, -1); !errors.Is(err, objstore.ErrPermanent) {
		t.Fatalf("GetRange of a stray file: %v, want permanent", err)
	}
}

// TestLeftoverUploadIsListed: a Put cut by a crash after its file was
// written leaves the file in the uploads directory, which the sweeper
// finds and aborts.
func TestLeftoverUploadIsListed(t *testing.T) {
	dir := t.TempDir()
	s, err := localdir.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.PutIfAbsent(t.Context(), "t/1/seg", []byte("data")); err != nil {
		t.Fatal(err)
	}
	// Recreate the state between the upload file's sync and its link.
	src := filepath.Join(dir, "t/1/seg")
	leftover := filepath.Join(dir, ".objstore-uploads", "00112233445566778899aabbccddeeff")
	if err := os.Link(src, leftover); err != nil {
		t.Fatal(err)
	}
	var ups []objstore.UploadInfo
	if err := s.ListIncompleteUploads(t.Context(), "t/", func(u objstore.UploadInfo) bool { ups = append(ups, u); return true }); err != nil {
		t.Fatal(err)
	}
	if len(ups) != 1 || ups[0].Key != "t/1/seg" || ups[0].UploadID != filepath.Base(leftover) {
		t.Fatalf("ListIncompleteUploads = %+v", ups)
	}
	if err := s.AbortIncompleteUpload(t.Context(), "t/1/seg", ups[0].UploadID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(leftover); !os.IsNotExist(err) {
		t.Fatalf("leftover still there: %v", err)
	}
	if _, err := s.Stat(t.Context(), "t/1/seg"); err != nil {
		t.Fatalf("aborting the leftover touched the object: %v", err)
	}
}

// TestWipedTree: an emptied tree still takes uploads (an emptied bucket
// does); a removed root fails them permanently (a deleted bucket).
func TestWipedTree(t *testing.T) {
	s := newStore(t)
	if err := s.PutIfAbsent(t.Context(), "a/b", nil); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(s.Root())
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(s.Root(), e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.PutIfAbsent(t.Context(), "a/b", nil); err != nil {
		t.Fatalf("Put into an emptied tree: %v", err)
	}
	if err := os.RemoveAll(s.Root()); err != nil {
		t.Fatal(err)
	}
	if err := s.PutIfAbsent(t.Context(), "a/c", nil); !errors.Is(err, objstore.ErrPermanent) {
		t.Fatalf("Put with the root gone: %v, want ErrPermanent", err)
	}
	err = s.List(t.Context(), "", "", func(objstore.ObjectInfo) bool { return true })
	if !errors.Is(err, objstore.ErrPermanent) {
		t.Fatalf("List with the root gone: %v, want ErrPermanent", err)
	}
	err = s.ListIncompleteUploads(t.Context(), "", func(objstore.UploadInfo) bool { return true })
	if !errors.Is(err, objstore.ErrPermanent) {
		t.Fatalf("ListIncompleteUploads with the root gone: %v, want ErrPermanent", err)
	}
}
