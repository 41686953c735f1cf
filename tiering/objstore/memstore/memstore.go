package memstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/strata-log/strata/tiering/objstore"
)

// Call is an operation about to run, as a Hook sees it.
type Call struct {
	Op objstore.Op
	// Key is the object key; for List and ListIncompleteUploads the
	// prefix. Delete calls the hook once per key.
	Key string
	// Off and N are GetRange's arguments.
	Off, N int64
}

// Fault is what a Hook does to one call. The zero Fault lets it run.
type Fault struct {
	// Delay holds the call this long before it runs.
	Delay time.Duration
	// Block holds the call until the channel is closed.
	Block <-chan struct{}
	// Err fails the call with no effect (for Delete: fails that key). An
	// error of no class is returned as ErrTransient.
	Err error
	// Body rewrites the bytes a GetRange serves. When it returns fewer
	// bytes than the range holds, the reader fails after them as a cut
	// connection does; same-length changes (corruption) go unnoticed, as
	// they would over S3.
	Body func(b []byte) []byte
}

// Hook is called before every operation, from the calling goroutine with
// no lock held; it may block, count calls or change the Store.
type Hook func(Call) Fault

// Options configures a Store.
type Options struct {
	// Now stamps LastModified and upload initiation times; nil is
	// time.Now. Tests of age-based decisions (orphan grace) pass a fake.
	Now func() time.Time
}

// Store is the in-memory objstore.Store. The zero value is not usable;
// call New.
type Store struct {
	now  func() time.Time
	hook atomic.Pointer[Hook]

	mu struct {
		sync.Mutex
		objects  map[string]object
		uploads  map[string]objstore.UploadInfo // by upload ID
		uploadSN int
	}
}

type object struct {
	data    []byte
	meta    map[string]string
	modTime time.Time
}

var _ objstore.Store = (*Store)(nil)

// New returns an empty Store.
func New(opts Options) *Store {
	s := &Store{now: opts.Now}
	if s.now == nil {
		s.now = time.Now
	}
	s.mu.objects = map[string]object{}
	s.mu.uploads = map[string]objstore.UploadInfo{}
	return s
}

// SetHook installs h (nil removes it).
func (s *Store) SetHook(h Hook) {
	if h == nil {
		s.hook.Store(nil)
		return
	}
	s.hook.Store(&h)
}

// Wipe removes every object and incomplete upload: the bucket was emptied
// behind Strata's back.
func (s *Store) Wipe() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.mu.objects)
	clear(s.mu.uploads)
}

// AddIncompleteUpload records an upload of key begun at initiated that
// never completed, as a crash in the middle of a multipart Put leaves
// behind, and returns its ID.
func (s *Store) AddIncompleteUpload(key string, initiated time.Time) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addUploadLocked(key, initiated)
}

// REQUIRES: s.mu held.
func (s *Store) addUploadLocked(key string, initiated time.Time) string {
	s.mu.uploadSN++
	id := "mem-" + strconv.Itoa(s.mu.uploadSN)
	s.mu.uploads[id] = objstore.UploadInfo{Key: key, UploadID: id, Initiated: initiated}
	return id
}

// before runs the hook and the ctx check every operation starts with. It
// returns the fault (for its Body) or the call's error.
func (s *Store) before(ctx context.Context, c Call) (Fault, error) {
	var f Fault
	if h := s.hook.Load(); h != nil {
		f = (*h)(c)
	}
	if f.Delay > 0 {
		t := time.NewTimer(f.Delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
	if f.Block != nil {
		select {
		case <-f.Block:
		case <-ctx.Done():
		}
	}
	if err := objstore.ContextError(ctx, c.Op, c.Key); err != nil {
		return f, err
	}
	if f.Err != nil {
		return f, classify(c.Op, c.Key, f.Err)
	}
	return f, nil
}

// classify is the one place memstore turns a cause into a classified error:
// a hook's error keeps its class, anything else is transient.
func classify(op objstore.Op, key string, err error) error {
	var oe *objstore.Error
	switch {
	case errors.As(err, &oe):
		return err
	case errors.Is(err, objstore.ErrInvalidKey):
		return objstore.NewError(op, key, objstore.ErrInvalidKey, err)
	case errors.Is(err, objstore.ErrInvalidRange):
		return objstore.NewError(op, key, objstore.ErrInvalidRange, err)
	}
	for _, class := range []error{objstore.ErrNotFound, objstore.ErrPreconditionFailed, objstore.ErrPermanent} {
		if errors.Is(err, class) {
			return objstore.NewError(op, key, class, err)
		}
	}
	return objstore.NewError(op, key, objstore.ErrTransient, err)
}

// Put implements objstore.Store. The upload is listed as incomplete while
// the source is read.
func (s *Store) Put(ctx context.Context, key string, r io.Reader, size int64, meta map[string]string) (objstore.PutInfo, error) {
	if err := s.checkPut(ctx, objstore.OpPut, key, meta); err != nil {
		return objstore.PutInfo{}, err
	}
	s.mu.Lock()
	id := s.addUploadLocked(key, s.now())
	s.mu.Unlock()
	data, err := readSource(ctx, key, r, size)
	if err != nil {
		s.mu.Lock()
		delete(s.mu.uploads, id)
		s.mu.Unlock()
		return objstore.PutInfo{}, err
	}
	if err := s.commit(key, id, data, meta); err != nil {
		return objstore.PutInfo{}, classify(objstore.OpPut, key, err)
	}
	return objstore.PutInfo{Size: int64(len(data))}, nil
}

func (s *Store) checkPut(ctx context.Context, op objstore.Op, key string, meta map[string]string) error {
	if err := objstore.ValidateKey(key); err != nil {
		return classify(op, key, err)
	}
	if err := objstore.ValidateMetadata(meta); err != nil {
		return classify(op, key, err)
	}
	_, err := s.before(ctx, Call{Op: op, Key: key})
	return err
}

// readSource reads a Put's source under ctx: exactly size bytes, or all of
// it when size < 0.
func readSource(ctx context.Context, key string, r io.Reader, size int64) ([]byte, error) {
	src := &ctxReader{ctx: ctx, r: r}
	if size >= 0 {
		src.r = io.LimitReader(r, size)
	}
	data, err := io.ReadAll(src)
	if err != nil {
		if ctxErr := objstore.ContextError(ctx, objstore.OpPut, key); ctxErr != nil {
			return nil, ctxErr
		}
		return nil, classify(objstore.OpPut, key, fmt.Errorf("reading the source: %w", err))
	}
	if size >= 0 && int64(len(data)) != size {
		return nil, objstore.NewError(objstore.OpPut, key, objstore.ErrPermanent,
			fmt.Errorf("the source ended after %d of %d bytes", len(data), size))
	}
	return data, nil
}

// commit publishes data under key unless the key exists or the upload was
// aborted meanwhile.
func (s *Store) commit(key, uploadID string, data []byte, meta map[string]string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if uploadID != "" {
		if _, ok := s.mu.uploads[uploadID]; !ok {
			return fmt.Errorf("upload %s was aborted", uploadID)
		}
		delete(s.mu.uploads, uploadID)
	}
	if _, ok := s.mu.objects[key]; ok {
		return objstore.ErrPreconditionFailed
	}
	s.mu.objects[key] = object{data: data, meta: maps.Clone(meta), modTime: s.now()}
	return nil
}

// PutIfAbsent implements objstore.Store.
func (s *Store) PutIfAbsent(ctx context.Context, key string, b []byte) error {
	if err := s.checkPut(ctx, objstore.OpPutIfAbsent, key, nil); err != nil {
		return err
	}
	if err := s.commit(key, "", bytes.Clone(b), nil); err != nil {
		return classify(objstore.OpPutIfAbsent, key, err)
	}
	return nil
}

// GetRange implements objstore.Store.
func (s *Store) GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	if err := objstore.ValidateKey(key); err != nil {
		return nil, classify(objstore.OpGetRange, key, err)
	}
	if err := objstore.ValidateRangeArgs(off, n); err != nil {
		return nil, classify(objstore.OpGetRange, key, err)
	}
	f, err := s.before(ctx, Call{Op: objstore.OpGetRange, Key: key, Off: off, N: n})
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	o, ok := s.mu.objects[key]
	s.mu.Unlock()
	if !ok {
		return nil, objstore.NewError(objstore.OpGetRange, key, objstore.ErrNotFound, nil)
	}
	size := int64(len(o.data))
	if err := objstore.ValidateRange(off, n, size); err != nil {
		return nil, classify(objstore.OpGetRange, key, err)
	}
	// Objects are never modified in place, so the slice is safe to share;
	// Body gets a copy it may change.
	want := o.data[off:objstore.RangeEnd(off, n, size)]
	served := want
	if f.Body != nil {
		served = f.Body(bytes.Clone(want))
	}
	return &rangeReader{ctx: ctx, key: key, data: served, want: len(want)}, nil
}

// rangeReader serves a GetRange under its ctx and fails, rather than ending
// cleanly, when it has fewer bytes than the range holds.
type rangeReader struct {
	ctx  context.Context
	key  string
	data []byte
	want int
	pos  int
}

func (r *rangeReader) Read(p []byte) (int, error) {
	if err := objstore.ContextError(r.ctx, objstore.OpGetRange, r.key); err != nil {
		return 0, err
	}
	if r.pos >= len(r.data) {
		if len(r.data) < r.want {
			return 0, objstore.NewError(objstore.OpGetRange, r.key, objstore.ErrTransient,
				fmt.Errorf("body cut after %d of %d bytes: %w", len(r.data), r.want, io.ErrUnexpectedEOF))
		}
		return 0, io.EOF
	}
	n := copy(p, r.data[r.pos:])
	r.pos += n
	return n, nil
}

func (r *rangeReader) Close() error { return nil }

// ctxReader stops reading a Put's source when ctx ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// Stat implements objstore.Store.
func (s *Store) Stat(ctx context.Context, key string) (objstore.ObjectInfo, error) {
	if err := objstore.ValidateKey(key); err != nil {
		return objstore.ObjectInfo{}, classify(objstore.OpStat, key, err)
	}
	if _, err := s.before(ctx, Call{Op: objstore.OpStat, Key: key}); err != nil {
		return objstore.ObjectInfo{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.mu.objects[key]
	if !ok {
		return objstore.ObjectInfo{}, objstore.NewError(objstore.OpStat, key, objstore.ErrNotFound, nil)
	}
	meta := maps.Clone(o.meta)
	if meta == nil {
		meta = map[string]string{}
	}
	return objstore.ObjectInfo{Key: key, Size: int64(len(o.data)), LastModified: o.modTime, Metadata: meta}, nil
}

// List implements objstore.Store. It lists a snapshot taken at the call,
// and calls fn without the lock held.
func (s *Store) List(ctx context.Context, prefix, startAfter string, fn func(objstore.ObjectInfo) bool) error {
	if _, err := s.before(ctx, Call{Op: objstore.OpList, Key: prefix}); err != nil {
		return err
	}
	s.mu.Lock()
	var infos []objstore.ObjectInfo
	for k, o := range s.mu.objects {
		if strings.HasPrefix(k, prefix) && k > startAfter {
			infos = append(infos, objstore.ObjectInfo{Key: k, Size: int64(len(o.data)), LastModified: o.modTime})
		}
	}
	s.mu.Unlock()
	slices.SortFunc(infos, func(a, b objstore.ObjectInfo) int { return strings.Compare(a.Key, b.Key) })
	for _, info := range infos {
		if err := objstore.ContextError(ctx, objstore.OpList, prefix); err != nil {
			return err
		}
		if !fn(info) {
			return nil
		}
	}
	return nil
}

// Delete implements objstore.Store.
func (s *Store) Delete(ctx context.Context, keys []string) ([]objstore.DeleteError, error) {
	for _, k := range keys {
		if err := objstore.ValidateKey(k); err != nil {
			return nil, classify(objstore.OpDelete, k, err)
		}
	}
	var failed []objstore.DeleteError
	for _, k := range keys {
		if _, err := s.before(ctx, Call{Op: objstore.OpDelete, Key: k}); err != nil {
			if ctx.Err() != nil {
				return failed, err
			}
			failed = append(failed, objstore.DeleteError{Key: k, Err: err})
			continue
		}
		s.mu.Lock()
		delete(s.mu.objects, k)
		s.mu.Unlock()
	}
	return failed, nil
}

// ListIncompleteUploads implements objstore.Store.
func (s *Store) ListIncompleteUploads(ctx context.Context, prefix string, fn func(objstore.UploadInfo) bool) error {
	if _, err := s.before(ctx, Call{Op: objstore.OpListIncompleteUploads, Key: prefix}); err != nil {
		return err
	}
	s.mu.Lock()
	var ups []objstore.UploadInfo
	for _, u := range s.mu.uploads {
		if strings.HasPrefix(u.Key, prefix) {
			ups = append(ups, u)
		}
	}
	s.mu.Unlock()
	slices.SortFunc(ups, compareUploads)
	for _, u := range ups {
		if !fn(u) {
			return nil
		}
	}
	return nil
}

// compareUploads orders uploads by key, then initiation time, then ID (so
// the order is total).
func compareUploads(a, b objstore.UploadInfo) int {
	if c := strings.Compare(a.Key, b.Key); c != 0 {
		return c
	}
	if c := a.Initiated.Compare(b.Initiated); c != 0 {
		return c
	}
	return strings.Compare(a.UploadID, b.UploadID)
}

// AbortIncompleteUpload implements objstore.Store.
func (s *Store) AbortIncompleteUpload(ctx context.Context, key, uploadID string) error {
	if err := objstore.ValidateKey(key); err != nil {
		return classify(objstore.OpAbortIncompleteUpload, key, err)
	}
	if _, err := s.before(ctx, Call{Op: objstore.OpAbortIncompleteUpload, Key: key}); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if u, ok := s.mu.uploads[uploadID]; ok && u.Key == key {
		delete(s.mu.uploads, uploadID)
	}
	return nil
}
