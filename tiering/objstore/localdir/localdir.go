package localdir

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/strata-log/strata/tiering/objstore"
)

// uploadsDir holds the files of Puts in progress (incomplete uploads),
// under the root. Keys may not start with it.
const uploadsDir = ".objstore-uploads"

// Object file layout (doc.go): magic, header length, JSON header, data.
var magic = [8]byte{'S', 'T', 'R', 'A', 'T', 'O', 'B', 'J'}

// headerlessGrace is the age after which an upload file without a valid
// header is removed by a listing: a Put writes the header right after
// creating the file.
const headerlessGrace = time.Hour

const (
	prefixBytes    = len(magic) + 4
	maxHeaderBytes = 64 << 10 // a key, a time and 2 KiB of metadata fit
)

// header is the JSON header of an object file.
type header struct {
	Version int               `json:"v"`
	Key     string            `json:"key"`
	Created int64             `json:"created_unix_nano"`
	Meta    map[string]string `json:"meta,omitempty"`
}

// Store is the objstore.Store of a local directory.
type Store struct {
	root string
}

var _ objstore.Store = (*Store)(nil)

// New returns the store rooted at dir, an absolute path, creating it (and
// its uploads directory) when missing.
func New(dir string) (*Store, error) {
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("localdir: %q is not an absolute path", dir)
	}
	s := &Store{root: filepath.Clean(dir)}
	if err := os.MkdirAll(filepath.Join(s.root, uploadsDir), 0o755); err != nil {
		return nil, fmt.Errorf("localdir: %w", err)
	}
	return s, nil
}

// Root returns the directory the store keeps its objects in.
func (s *Store) Root() string { return s.root }

// classify is the one place localdir turns an error into a classified one.
// Out of space and interrupted calls may pass; a permission, a read-only
// file system or an I/O error needs an operator.
func classify(op objstore.Op, key string, err error) error {
	var oe *objstore.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &oe):
		return err
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return objstore.NewError(op, key, objstore.ErrTransient, err)
	case errors.Is(err, objstore.ErrInvalidKey):
		return objstore.NewError(op, key, objstore.ErrInvalidKey, err)
	case errors.Is(err, objstore.ErrInvalidRange):
		return objstore.NewError(op, key, objstore.ErrInvalidRange, err)
	case errors.Is(err, objstore.ErrPermanent):
		return objstore.NewError(op, key, objstore.ErrPermanent, err)
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		// ENOTDIR: a segment of the key is an object, so the key
		// itself cannot exist.
		return objstore.NewError(op, key, objstore.ErrNotFound, err)
	case errors.Is(err, fs.ErrExist):
		return objstore.NewError(op, key, objstore.ErrPreconditionFailed, err)
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM), errors.Is(err, syscall.EROFS),
		errors.Is(err, syscall.EIO), errors.Is(err, syscall.EISDIR),
		errors.Is(err, syscall.ENAMETOOLONG), errors.Is(err, errCorrupt):
		return objstore.NewError(op, key, objstore.ErrPermanent, err)
	default: // ENOSPC, EINTR, EAGAIN, EMFILE, ...
		return objstore.NewError(op, key, objstore.ErrTransient, err)
	}
}

var errCorrupt = errors.New("not an object file")

// path checks key and returns its file.
func (s *Store) path(key string) (string, error) {
	if err := objstore.ValidateKey(key); err != nil {
		return "", err
	}
	if key == uploadsDir || strings.HasPrefix(key, uploadsDir+"/") {
		return "", fmt.Errorf("%w: %q is reserved by localdir", objstore.ErrInvalidKey, uploadsDir)
	}
	// ValidateKey leaves only relative paths without "." or ".."
	// segments, so the join cannot leave the root.
	return filepath.Join(s.root, filepath.FromSlash(key)), nil
}

// Put implements objstore.Store: the object is written to a file in the
// uploads directory, synced, linked under its key (link(2) fails if the
// key exists, where rename(2) would replace it) and the directory synced.
func (s *Store) Put(ctx context.Context, key string, r io.Reader, size int64, meta map[string]string) (objstore.PutInfo, error) {
	n, err := s.put(ctx, objstore.OpPut, key, r, size, meta)
	return objstore.PutInfo{Size: n}, classify(objstore.OpPut, key, err)
}

// PutIfAbsent implements objstore.Store: Put is already create-only.
func (s *Store) PutIfAbsent(ctx context.Context, key string, b []byte) error {
	_, err := s.put(ctx, objstore.OpPutIfAbsent, key, bytes.NewReader(b), int64(len(b)), nil)
	return classify(objstore.OpPutIfAbsent, key, err)
}

func (s *Store) put(ctx context.Context, op objstore.Op, key string, r io.Reader, size int64, meta map[string]string) (int64, error) {
	final, err := s.path(key)
	if err != nil {
		return 0, err
	}
	if err := objstore.ValidateMetadata(meta); err != nil {
		return 0, err
	}
	if err := objstore.ContextError(ctx, op, key); err != nil {
		return 0, err
	}
	id, err := newUploadID()
	if err != nil {
		return 0, err
	}
	tmp := filepath.Join(s.root, uploadsDir, id)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, fs.ErrNotExist) {
		// The tree was emptied behind our back. Like an emptied bucket it
		// still takes uploads; a root that is gone (a deleted bucket)
		// does not.
		if err := s.checkRoot(); err != nil {
			return 0, err
		}
		if err := os.MkdirAll(filepath.Dir(tmp), 0o755); err != nil {
			return 0, err
		}
		f, err = os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	}
	if err != nil {
		return 0, err
	}
	published := false
	defer func() {
		if !published {
			os.Remove(tmp)
		}
	}()
	n, err := writeObject(ctx, f, header{Version: 1, Key: key, Created: time.Now().UnixNano(), Meta: meta}, r, size)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, err
	}
	if err := objstore.ContextError(ctx, op, key); err != nil {
		return 0, err
	}
	if err := s.mkdirAll(filepath.Dir(final)); err != nil {
		return 0, err
	}
	if err := os.Link(tmp, final); err != nil {
		if _, statErr := os.Lstat(tmp); errors.Is(statErr, fs.ErrNotExist) {
			return 0, fmt.Errorf("upload %s was aborted", id)
		}
		if fi, statErr := os.Stat(final); statErr == nil && fi.IsDir() {
			return 0, fmt.Errorf("%w: %q names a directory of other keys; localdir cannot hold both \"k\" and \"k/...\"",
				objstore.ErrPermanent, key)
		}
		return 0, err
	}
	published = true
	os.Remove(tmp)
	// The new name is durable once its directory is synced; the removal
	// of the temporary name needs no sync (a leftover is listed as an
	// incomplete upload and aborted by the sweeper).
	return n, syncDir(filepath.Dir(final))
}

// writeObject writes the object file: the header, then exactly size bytes
// of r (all of r when size < 0). It returns the data size.
func writeObject(ctx context.Context, w io.Writer, h header, r io.Reader, size int64) (int64, error) {
	hb, err := json.Marshal(h)
	if err != nil {
		return 0, err
	}
	buf := make([]byte, 0, prefixBytes+len(hb))
	buf = append(buf, magic[:]...)
	buf = binary.BigEndian.AppendUint32(buf, uint32(len(hb)))
	buf = append(buf, hb...)
	if _, err := w.Write(buf); err != nil {
		return 0, err
	}
	src := &sourceReader{ctx: ctx, r: r}
	if size >= 0 {
		src.r = io.LimitReader(r, size)
	}
	n, err := io.Copy(w, src)
	if err != nil {
		if src.err != nil {
			if ctx.Err() != nil {
				return n, ctx.Err()
			}
			return n, objstore.NewError(objstore.OpPut, h.Key, objstore.ErrTransient, fmt.Errorf("reading the source: %w", src.err))
		}
		return n, err
	}
	if size >= 0 && n != size {
		return n, fmt.Errorf("%w: the source ended after %d of %d bytes", objstore.ErrPermanent, n, size)
	}
	return n, nil
}

// sourceReader reads a Put's source under ctx and remembers its error, to
// tell it from a write error.
type sourceReader struct {
	ctx context.Context
	r   io.Reader
	err error
}

func (s *sourceReader) Read(p []byte) (int, error) {
	if err := s.ctx.Err(); err != nil {
		s.err = err
		return 0, err
	}
	n, err := s.r.Read(p)
	if err != nil && err != io.EOF {
		s.err = err
	}
	return n, err
}

func newUploadID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}

// mkdirAll creates dir and its missing parents, syncing the parent of each
// directory it creates so the path survives a crash.
func (s *Store) mkdirAll(dir string) error {
	if fi, err := os.Stat(dir); err == nil {
		if !fi.IsDir() {
			return fmt.Errorf("%w: %s is an object, not a directory; localdir cannot hold both \"k\" and \"k/...\"",
				objstore.ErrPermanent, strings.TrimPrefix(dir, s.root+"/"))
		}
		return nil
	}
	if dir == s.root {
		return s.checkRoot()
	}
	if err := s.mkdirAll(filepath.Dir(dir)); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return syncDir(filepath.Dir(dir))
}

// checkRoot fails permanently when the root directory is gone: the store
// was deleted, and recreating it would hide that.
func (s *Store) checkRoot() error {
	if fi, err := os.Stat(s.root); err != nil || !fi.IsDir() {
		return fmt.Errorf("%w: root %s is gone", objstore.ErrPermanent, s.root)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// objectFile is an open object file.
type objectFile struct {
	f       *os.File
	h       header
	dataOff int64 // where the data starts in the file
	size    int64 // of the data
	modTime time.Time
}

// openObject opens an object file and reads its header. A directory is no
// object: fs.ErrNotExist.
func openObject(path string) (*objectFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if fi.IsDir() {
		f.Close()
		return nil, fs.ErrNotExist
	}
	h, dataOff, err := readHeader(f)
	if err != nil {
		f.Close()
		return nil, err
	}
	return &objectFile{f: f, h: h, dataOff: dataOff, size: fi.Size() - dataOff, modTime: fi.ModTime()}, nil
}

// readHeader reads an object file's header from its start and returns it
// with the offset of the data.
func readHeader(f *os.File) (header, int64, error) {
	var pre [prefixBytes]byte
	if _, err := f.ReadAt(pre[:], 0); err != nil {
		if err == io.EOF {
			return header{}, 0, fmt.Errorf("%s: %w (too short)", f.Name(), errCorrupt)
		}
		return header{}, 0, err
	}
	if !bytes.Equal(pre[:len(magic)], magic[:]) {
		return header{}, 0, fmt.Errorf("%s: %w (bad magic)", f.Name(), errCorrupt)
	}
	hlen := binary.BigEndian.Uint32(pre[len(magic):])
	if hlen > maxHeaderBytes {
		return header{}, 0, fmt.Errorf("%s: %w (header of %d bytes)", f.Name(), errCorrupt, hlen)
	}
	hb := make([]byte, hlen)
	if _, err := f.ReadAt(hb, int64(prefixBytes)); err != nil {
		return header{}, 0, fmt.Errorf("%s: %w (header: %v)", f.Name(), errCorrupt, err)
	}
	var h header
	if err := json.Unmarshal(hb, &h); err != nil || h.Version != 1 {
		return header{}, 0, fmt.Errorf("%s: %w (header version %d, %v)", f.Name(), errCorrupt, h.Version, err)
	}
	return h, int64(prefixBytes) + int64(hlen), nil
}

// GetRange implements objstore.Store.
func (s *Store) GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	rc, err := s.getRange(ctx, key, off, n)
	return rc, classify(objstore.OpGetRange, key, err)
}

func (s *Store) getRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	path, err := s.path(key)
	if err != nil {
		return nil, err
	}
	if err := objstore.ValidateRangeArgs(off, n); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	o, err := openObject(path)
	if err != nil {
		return nil, err
	}
	if err := objstore.ValidateRange(off, n, o.size); err != nil {
		o.f.Close()
		return nil, err
	}
	end := objstore.RangeEnd(off, n, o.size)
	return &fileReader{ctx: ctx, key: key, f: o.f, sr: io.NewSectionReader(o.f, o.dataOff+off, end-off)}, nil
}

// fileReader reads a range of an object file under ctx.
type fileReader struct {
	ctx context.Context
	key string
	f   *os.File
	sr  *io.SectionReader
}

func (r *fileReader) Read(p []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, classify(objstore.OpGetRange, r.key, err)
	}
	n, err := r.sr.Read(p)
	if err != nil && err != io.EOF {
		err = classify(objstore.OpGetRange, r.key, err)
	}
	return n, err
}

func (r *fileReader) Close() error { return r.f.Close() }

// Stat implements objstore.Store.
func (s *Store) Stat(ctx context.Context, key string) (objstore.ObjectInfo, error) {
	info, err := s.stat(ctx, key)
	return info, classify(objstore.OpStat, key, err)
}

func (s *Store) stat(ctx context.Context, key string) (objstore.ObjectInfo, error) {
	path, err := s.path(key)
	if err != nil {
		return objstore.ObjectInfo{}, err
	}
	if err := ctx.Err(); err != nil {
		return objstore.ObjectInfo{}, err
	}
	info, h, err := statFile(path, key)
	if err != nil {
		return objstore.ObjectInfo{}, err
	}
	info.Metadata = h.Meta
	if info.Metadata == nil {
		info.Metadata = map[string]string{}
	}
	return info, nil
}

func statFile(path, key string) (objstore.ObjectInfo, header, error) {
	o, err := openObject(path)
	if err != nil {
		return objstore.ObjectInfo{}, header{}, err
	}
	o.f.Close()
	return objstore.ObjectInfo{Key: key, Size: o.size, LastModified: o.modTime}, o.h, nil
}

// List implements objstore.Store. It walks the directories depth first,
// ordering each directory's entries by the keys they hold (a directory d
// sorts as "d/"), which is key order, and skips subtrees that the prefix
// or startAfter exclude.
func (s *Store) List(ctx context.Context, prefix, startAfter string, fn func(objstore.ObjectInfo) bool) error {
	if err := ctx.Err(); err != nil {
		return classify(objstore.OpList, prefix, err)
	}
	_, err := s.walk(ctx, "", prefix, startAfter, fn)
	return classify(objstore.OpList, prefix, err)
}

// walk lists the directory holding the keys that start with dirKey (""
// or ending in "/"). It returns false when fn asked to stop.
func (s *Store) walk(ctx context.Context, dirKey, prefix, startAfter string, fn func(objstore.ObjectInfo) bool) (bool, error) {
	entries, err := os.ReadDir(filepath.Join(s.root, filepath.FromSlash(dirKey)))
	if errors.Is(err, fs.ErrNotExist) {
		if dirKey == "" {
			return false, s.checkRoot()
		}
		return true, nil // removed while listing
	}
	if err != nil {
		return false, err
	}
	type item struct {
		key string // the key, or for a directory its key prefix ("d/")
		dir bool
	}
	items := make([]item, 0, len(entries))
	for _, e := range entries {
		if dirKey == "" && e.Name() == uploadsDir {
			continue
		}
		it := item{key: dirKey + e.Name(), dir: e.IsDir()}
		if it.dir {
			it.key += "/"
		}
		items = append(items, it)
	}
	slices.SortFunc(items, func(a, b item) int { return strings.Compare(a.key, b.key) })
	for _, it := range items {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		if it.dir {
			// Descend only if some key under it can match the prefix and
			// sort after startAfter.
			if !strings.HasPrefix(it.key, prefix) && !strings.HasPrefix(prefix, it.key) {
				continue
			}
			if it.key < startAfter && !strings.HasPrefix(startAfter, it.key) {
				continue
			}
			more, err := s.walk(ctx, it.key, prefix, startAfter, fn)
			if !more || err != nil {
				return more, err
			}
			continue
		}
		if !strings.HasPrefix(it.key, prefix) || it.key <= startAfter {
			continue
		}
		info, _, err := statFile(filepath.Join(s.root, filepath.FromSlash(it.key)), it.key)
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted while listing
		}
		if err != nil {
			return false, err
		}
		if !fn(info) {
			return false, nil
		}
	}
	return true, nil
}

// Delete implements objstore.Store. Emptied directories stay: removing
// them would race with a Put creating a key in them.
func (s *Store) Delete(ctx context.Context, keys []string) ([]objstore.DeleteError, error) {
	paths := make([]string, len(keys))
	for i, k := range keys {
		p, err := s.path(k)
		if err != nil {
			return nil, classify(objstore.OpDelete, k, err)
		}
		paths[i] = p
	}
	var failed []objstore.DeleteError
	dirs := map[string]bool{}
	for i, p := range paths {
		if err := ctx.Err(); err != nil {
			return failed, classify(objstore.OpDelete, keys[i], err)
		}
		err := os.Remove(p)
		if err == nil {
			dirs[filepath.Dir(p)] = true
			continue
		}
		err = classify(objstore.OpDelete, keys[i], err)
		switch {
		case errors.Is(err, objstore.ErrNotFound):
		case isDir(p): // a directory of other keys is not an object: nothing to delete
		default:
			failed = append(failed, objstore.DeleteError{Key: keys[i], Err: err})
		}
	}
	for _, d := range slices.Sorted(maps.Keys(dirs)) {
		if err := syncDir(d); err != nil {
			return failed, classify(objstore.OpDelete, d, err)
		}
	}
	return failed, nil
}

func isDir(p string) bool {
	fi, err := os.Lstat(p)
	return err == nil && fi.IsDir()
}

// ListIncompleteUploads implements objstore.Store: the files in the uploads
// directory, each naming its key in its header.
func (s *Store) ListIncompleteUploads(ctx context.Context, prefix string, fn func(objstore.UploadInfo) bool) error {
	ups, err := s.uploads(ctx, prefix)
	if err != nil {
		return classify(objstore.OpListIncompleteUploads, prefix, err)
	}
	for _, u := range ups {
		if !fn(u) {
			return nil
		}
	}
	return nil
}

func (s *Store) uploads(ctx context.Context, prefix string) ([]objstore.UploadInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	dir := filepath.Join(s.root, uploadsDir)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, s.checkRoot() // an emptied tree has no uploads
	}
	if err != nil {
		return nil, err
	}
	var ups []objstore.UploadInfo
	for _, e := range entries {
		path := filepath.Join(dir, e.Name())
		h, err := readUploadHeader(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue // completed or aborted meanwhile
		}
		if err != nil {
			// A crash before the header was written leaves a file that
			// names no key, so no caller could abort it: remove it once
			// it is old enough that no Put can still be writing it.
			if fi, statErr := os.Stat(path); statErr == nil && time.Since(fi.ModTime()) > headerlessGrace {
				os.Remove(path)
			}
			continue
		}
		if strings.HasPrefix(h.Key, prefix) {
			ups = append(ups, objstore.UploadInfo{Key: h.Key, UploadID: e.Name(), Initiated: time.Unix(0, h.Created)})
		}
	}
	slices.SortFunc(ups, func(a, b objstore.UploadInfo) int {
		if c := strings.Compare(a.Key, b.Key); c != 0 {
			return c
		}
		if c := a.Initiated.Compare(b.Initiated); c != 0 {
			return c
		}
		return strings.Compare(a.UploadID, b.UploadID)
	})
	return ups, nil
}

func readUploadHeader(path string) (header, error) {
	f, err := os.Open(path)
	if err != nil {
		return header{}, err
	}
	defer f.Close()
	h, _, err := readHeader(f)
	return h, err
}

// AbortIncompleteUpload implements objstore.Store.
func (s *Store) AbortIncompleteUpload(ctx context.Context, key, uploadID string) error {
	err := s.abort(ctx, key, uploadID)
	return classify(objstore.OpAbortIncompleteUpload, key, err)
}

func (s *Store) abort(ctx context.Context, key, uploadID string) error {
	if _, err := s.path(key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	// Upload IDs are hex: this keeps a caller's ID from naming a path
	// outside the uploads directory.
	if _, err := hex.DecodeString(uploadID); err != nil || uploadID == "" {
		return nil // no such upload
	}
	path := filepath.Join(s.root, uploadsDir, uploadID)
	h, err := readUploadHeader(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err == nil && h.Key != key {
		return nil // another key's upload: not this one
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
