package objstoretest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/strata-log/strata/tiering/objstore"
)

// Config describes the store under test.
type Config struct {
	// New returns an empty store for one test; it registers its own
	// cleanup with t.
	New func(t *testing.T) objstore.Store
	// LargeBytes is the size of the "large" objects, chosen to span
	// several parts where the store uploads in parts. 0 means 1 MiB.
	LargeBytes int
	// UploadsListedByKeyOnly: ListIncompleteUploads finds an upload only
	// when the prefix is its whole key (MinIO; see the s3 package).
	UploadsListedByKeyOnly bool
}

// Run runs the conformance suite, one subtest per behaviour of the
// objstore.Store contract (doc.go).
func Run(t *testing.T, cfg Config) {
	if cfg.LargeBytes == 0 {
		cfg.LargeBytes = 1 << 20
	}
	tests := []struct {
		name string
		fn   func(t *testing.T, s objstore.Store, cfg Config)
	}{
		{"PutStatGet", testPutStatGet},
		{"PutUnknownSize", testPutUnknownSize},
		{"EmptyObject", testEmptyObject},
		{"PutNeverOverwrites", testPutNeverOverwrites},
		{"ConcurrentPutsOneWins", testConcurrentPuts},
		{"PutIfAbsent", testPutIfAbsent},
		{"PutShortSource", testPutShortSource},
		{"PutSourceError", testPutSourceError},
		{"GetRange", testGetRange},
		{"NotFound", testNotFound},
		{"InvalidKeys", testInvalidKeys},
		{"InvalidMetadata", testInvalidMetadata},
		{"ListOrderPrefixStartAfter", testList},
		{"Delete", testDelete},
		{"ContextEndsCalls", testContext},
		{"IncompleteUploads", testIncompleteUploads},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.fn(t, cfg.New(t), cfg)
		})
	}
}

// ctx returns a context that ends with the test, with a deadline so that a
// store that hangs fails the test instead of the test binary.
func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func randomBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func put(t *testing.T, s objstore.Store, key string, data []byte) {
	t.Helper()
	info, err := s.Put(ctx(t), key, bytes.NewReader(data), int64(len(data)), nil)
	if err != nil {
		t.Fatalf("Put(%q): %v", key, err)
	}
	if info.Size != int64(len(data)) {
		t.Fatalf("Put(%q) size %d, want %d", key, info.Size, len(data))
	}
}

func get(t *testing.T, s objstore.Store, key string, off, n int64) ([]byte, error) {
	t.Helper()
	rc, err := s.GetRange(ctx(t), key, off, n)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

func mustGet(t *testing.T, s objstore.Store, key string) []byte {
	t.Helper()
	b, err := get(t, s, key, 0, -1)
	if err != nil {
		t.Fatalf("GetRange(%q): %v", key, err)
	}
	return b
}

func wantErr(t *testing.T, what string, err error, targets ...error) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error, want %v", what, targets)
	}
	for _, target := range targets {
		if !errors.Is(err, target) {
			t.Fatalf("%s: error %v does not match %v", what, err, target)
		}
	}
}

func testPutStatGet(t *testing.T, s objstore.Store, cfg Config) {
	data := randomBytes(1000, 1)
	meta := map[string]string{"strata-format": "1", "strata-base": "00000000000000000042"}
	before := time.Now().Add(-time.Minute)
	if _, err := s.Put(ctx(t), "seg/a.seg", bytes.NewReader(data), int64(len(data)), meta); err != nil {
		t.Fatal(err)
	}
	info, err := s.Stat(ctx(t), "seg/a.seg")
	if err != nil {
		t.Fatal(err)
	}
	if info.Key != "seg/a.seg" || info.Size != 1000 || !maps.Equal(info.Metadata, meta) {
		t.Fatalf("Stat = %+v, want key seg/a.seg, size 1000, metadata %v", info, meta)
	}
	if info.LastModified.Before(before) {
		t.Fatalf("LastModified %v is before the Put", info.LastModified)
	}
	if got := mustGet(t, s, "seg/a.seg"); !bytes.Equal(got, data) {
		t.Fatal("GetRange returned other bytes than Put stored")
	}
	large := randomBytes(cfg.LargeBytes, 2)
	put(t, s, "seg/large", large)
	if got := mustGet(t, s, "seg/large"); !bytes.Equal(got, large) {
		t.Fatal("large object: GetRange returned other bytes than Put stored")
	}
}

// testPutUnknownSize streams sources of unknown length, the way segments
// are uploaded while they are written.
func testPutUnknownSize(t *testing.T, s objstore.Store, cfg Config) {
	for i, n := range []int{1, 4096, cfg.LargeBytes + 17} {
		data := randomBytes(n, uint64(10+i))
		key := fmt.Sprintf("stream/%d", n)
		// io.MultiReader hides bytes.Reader's Len and Seek: a true stream.
		info, err := s.Put(ctx(t), key, io.MultiReader(bytes.NewReader(data)), -1, map[string]string{"n": fmt.Sprint(n)})
		if err != nil {
			t.Fatalf("Put(%d bytes, size -1): %v", n, err)
		}
		if info.Size != int64(n) {
			t.Fatalf("Put(%d bytes, size -1) reports %d bytes", n, info.Size)
		}
		if got := mustGet(t, s, key); !bytes.Equal(got, data) {
			t.Fatalf("%d bytes streamed: GetRange differs", n)
		}
		st, err := s.Stat(ctx(t), key)
		if err != nil || st.Size != int64(n) || st.Metadata["n"] != fmt.Sprint(n) {
			t.Fatalf("Stat = %+v, %v", st, err)
		}
	}
}

func testEmptyObject(t *testing.T, s objstore.Store, _ Config) {
	put(t, s, "empty/known", nil)
	if _, err := s.Put(ctx(t), "empty/stream", io.MultiReader(), -1, nil); err != nil {
		t.Fatalf("Put(empty, size -1): %v", err)
	}
	for _, key := range []string{"empty/known", "empty/stream"} {
		info, err := s.Stat(ctx(t), key)
		if err != nil || info.Size != 0 {
			t.Fatalf("Stat(%s) = %+v, %v", key, info, err)
		}
		for _, n := range []int64{-1, 10} {
			b, err := get(t, s, key, 0, n)
			if err != nil || len(b) != 0 {
				t.Fatalf("GetRange(%s, 0, %d) = %d bytes, %v; want empty", key, n, len(b), err)
			}
		}
		_, err = get(t, s, key, 1, -1)
		wantErr(t, "GetRange past an empty object", err, objstore.ErrInvalidRange, objstore.ErrPermanent)
	}
}

func testPutNeverOverwrites(t *testing.T, s objstore.Store, cfg Config) {
	first := []byte("first")
	put(t, s, "k", first)
	_, err := s.Put(ctx(t), "k", bytes.NewReader([]byte("second")), 6, nil)
	wantErr(t, "second Put, known size", err, objstore.ErrPreconditionFailed)
	_, err = s.Put(ctx(t), "k", io.MultiReader(bytes.NewReader([]byte("third"))), -1, nil)
	wantErr(t, "second Put, streamed", err, objstore.ErrPreconditionFailed)
	if got := mustGet(t, s, "k"); !bytes.Equal(got, first) {
		t.Fatalf("object now holds %q, want %q", got, first)
	}
	var uploads []objstore.UploadInfo
	if err := s.ListIncompleteUploads(ctx(t), "k", func(u objstore.UploadInfo) bool {
		uploads = append(uploads, u)
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if len(uploads) != 0 {
		t.Fatalf("refused Puts left uploads behind: %+v", uploads)
	}
}

func testConcurrentPuts(t *testing.T, s objstore.Store, _ Config) {
	const writers = 4
	var wg sync.WaitGroup
	errs := make([]error, writers)
	for i := range writers {
		wg.Go(func() {
			_, errs[i] = s.Put(ctx(t), "race", bytes.NewReader([]byte{byte(i)}), 1, nil)
		})
	}
	wg.Wait()
	won := -1
	for i, err := range errs {
		switch {
		case err == nil && won >= 0:
			t.Fatalf("writers %d and %d both created the key", won, i)
		case err == nil:
			won = i
		case !errors.Is(err, objstore.ErrPreconditionFailed):
			t.Fatalf("writer %d: %v, want ErrPreconditionFailed", i, err)
		}
	}
	if won < 0 {
		t.Fatal("no writer created the key")
	}
	if got := mustGet(t, s, "race"); !bytes.Equal(got, []byte{byte(won)}) {
		t.Fatalf("object holds %v, the winner wrote %v", got, won)
	}
}

func testPutIfAbsent(t *testing.T, s objstore.Store, _ Config) {
	cookie := []byte(`{"cluster":"a"}`)
	if err := s.PutIfAbsent(ctx(t), "bucket.json", cookie); err != nil {
		t.Fatal(err)
	}
	err := s.PutIfAbsent(ctx(t), "bucket.json", []byte(`{"cluster":"b"}`))
	wantErr(t, "second PutIfAbsent", err, objstore.ErrPreconditionFailed)
	if got := mustGet(t, s, "bucket.json"); !bytes.Equal(got, cookie) {
		t.Fatalf("cookie is %q, want %q", got, cookie)
	}
	put(t, s, "by-put", []byte("x"))
	wantErr(t, "PutIfAbsent over a Put", s.PutIfAbsent(ctx(t), "by-put", []byte("y")), objstore.ErrPreconditionFailed)
	if err := s.PutIfAbsent(ctx(t), "empty-cookie", nil); err != nil {
		t.Fatalf("PutIfAbsent(empty): %v", err)
	}
}

func testPutShortSource(t *testing.T, s objstore.Store, _ Config) {
	_, err := s.Put(ctx(t), "short", bytes.NewReader([]byte("12345")), 10, nil)
	wantErr(t, "Put of 5 bytes announced as 10", err, objstore.ErrPermanent)
	_, err = s.Stat(ctx(t), "short")
	wantErr(t, "Stat after a failed Put", err, objstore.ErrNotFound)
}

var errSource = errors.New("objstoretest: source failed")

type failingReader struct{ left int }

func (f *failingReader) Read(p []byte) (int, error) {
	if f.left == 0 {
		return 0, errSource
	}
	n := min(len(p), f.left)
	clear(p[:n])
	f.left -= n
	return n, nil
}

func testPutSourceError(t *testing.T, s objstore.Store, _ Config) {
	for _, size := range []int64{-1, 100_000} {
		key := fmt.Sprintf("failing/%d", size)
		_, err := s.Put(ctx(t), key, &failingReader{left: 1000}, size, nil)
		wantErr(t, "Put from a failing source", err, errSource)
		if !objstore.Classified(err) {
			t.Fatalf("source error %v is not classified", err)
		}
		_, err = s.Stat(ctx(t), key)
		wantErr(t, "Stat after a failed Put", err, objstore.ErrNotFound)
	}
}

func testGetRange(t *testing.T, s objstore.Store, _ Config) {
	data := randomBytes(1000, 3)
	put(t, s, "r", data)
	for _, tc := range []struct {
		off, n   int64
		from, to int // expected data[from:to]
	}{
		{0, -1, 0, 1000}, {0, 1000, 0, 1000}, {0, 5000, 0, 1000}, {10, 5, 10, 15},
		{999, 1, 999, 1000}, {999, -1, 999, 1000}, {500, -1, 500, 1000}, {990, 100, 990, 1000},
	} {
		got, err := get(t, s, "r", tc.off, tc.n)
		if err != nil {
			t.Fatalf("GetRange(%d, %d): %v", tc.off, tc.n, err)
		}
		if !bytes.Equal(got, data[tc.from:tc.to]) {
			t.Fatalf("GetRange(%d, %d) = %d bytes, want data[%d:%d]", tc.off, tc.n, len(got), tc.from, tc.to)
		}
	}
	for _, tc := range []struct{ off, n int64 }{{1000, -1}, {1000, 1}, {2000, 1}, {-1, 5}, {0, 0}, {5, 0}} {
		_, err := get(t, s, "r", tc.off, tc.n)
		wantErr(t, fmt.Sprintf("GetRange(%d, %d)", tc.off, tc.n), err, objstore.ErrInvalidRange, objstore.ErrPermanent)
	}
}

func testNotFound(t *testing.T, s objstore.Store, _ Config) {
	_, err := s.Stat(ctx(t), "missing")
	wantErr(t, "Stat", err, objstore.ErrNotFound)
	_, err = get(t, s, "missing", 0, -1)
	wantErr(t, "GetRange", err, objstore.ErrNotFound)
	_, err = get(t, s, "missing", 10, 5)
	wantErr(t, "GetRange with offset", err, objstore.ErrNotFound)
	failed, err := s.Delete(ctx(t), []string{"missing"})
	if err != nil || len(failed) != 0 {
		t.Fatalf("Delete(missing) = %v, %v; a missing key counts as deleted", failed, err)
	}
}

func testInvalidKeys(t *testing.T, s objstore.Store, _ Config) {
	for _, key := range []string{"", "/a", "a/", "a//b", "..", "../a", "a/../b", "./a", "a/.", `a\b`, "a\x00b", "a\nb", "\xff"} {
		what := fmt.Sprintf("key %q", key)
		_, err := s.Put(ctx(t), key, bytes.NewReader(nil), 0, nil)
		wantErr(t, what+": Put", err, objstore.ErrInvalidKey, objstore.ErrPermanent)
		wantErr(t, what+": PutIfAbsent", s.PutIfAbsent(ctx(t), key, nil), objstore.ErrInvalidKey)
		_, err = s.GetRange(ctx(t), key, 0, -1)
		wantErr(t, what+": GetRange", err, objstore.ErrInvalidKey)
		_, err = s.Stat(ctx(t), key)
		wantErr(t, what+": Stat", err, objstore.ErrInvalidKey)
		_, err = s.Delete(ctx(t), []string{"fine", key})
		wantErr(t, what+": Delete", err, objstore.ErrInvalidKey)
		wantErr(t, what+": AbortIncompleteUpload", s.AbortIncompleteUpload(ctx(t), key, "x"), objstore.ErrInvalidKey)
	}
}

func testInvalidMetadata(t *testing.T, s objstore.Store, _ Config) {
	for _, meta := range []map[string]string{{"Upper": "x"}, {"": "x"}, {"k": "new\nline"}, {"k_v": "x"}, {"k": string(make([]byte, 3000))}} {
		_, err := s.Put(ctx(t), "m", bytes.NewReader(nil), 0, meta)
		wantErr(t, fmt.Sprintf("metadata %q", meta), err, objstore.ErrPermanent)
	}
	_, err := s.Stat(ctx(t), "m")
	wantErr(t, "Stat after refused Puts", err, objstore.ErrNotFound)
}

func list(t *testing.T, s objstore.Store, prefix, startAfter string, limit int) []string {
	t.Helper()
	var keys []string
	err := s.List(ctx(t), prefix, startAfter, func(info objstore.ObjectInfo) bool {
		if info.Size != int64(len(info.Key)) || info.LastModified.IsZero() || info.Metadata != nil {
			t.Errorf("List: %+v: want size %d, a time, no metadata", info, len(info.Key))
		}
		keys = append(keys, info.Key)
		return len(keys) != limit
	})
	if err != nil {
		t.Fatalf("List(%q, %q): %v", prefix, startAfter, err)
	}
	return keys
}

func testList(t *testing.T, s objstore.Store, _ Config) {
	// "-" (0x2d) and "0" (0x30) sort around "/" (0x2f): a store that walks
	// directories must still list in key order.
	keys := []string{"p/a-c", "p/a/b", "p/a/c/d", "p/a0", "p/ab", "p/b", "q/x", "pz"}
	for _, k := range keys {
		put(t, s, k, []byte(k)) // size = len(key), checked by list
	}
	sorted := slices.Sorted(slices.Values(keys))
	for _, tc := range []struct {
		prefix, startAfter string
		limit              int
		want               []string
	}{
		{"", "", 0, sorted},
		{"p/", "", 0, []string{"p/a-c", "p/a/b", "p/a/c/d", "p/a0", "p/ab", "p/b"}},
		{"p/a", "", 0, []string{"p/a-c", "p/a/b", "p/a/c/d", "p/a0", "p/ab"}},
		{"p/a/", "", 0, []string{"p/a/b", "p/a/c/d"}},
		{"p/a/c", "", 0, []string{"p/a/c/d"}},
		{"p/", "p/a/b", 0, []string{"p/a/c/d", "p/a0", "p/ab", "p/b"}},
		{"p/", "p/a/", 0, []string{"p/a/b", "p/a/c/d", "p/a0", "p/ab", "p/b"}},
		{"p/", "p/a/zzz", 0, []string{"p/a0", "p/ab", "p/b"}},
		{"", "p/b", 0, []string{"pz", "q/x"}},
		{"p/", "", 2, []string{"p/a-c", "p/a/b"}},
		{"none/", "", 0, nil},
		{"", "zzz", 0, nil},
	} {
		if got := list(t, s, tc.prefix, tc.startAfter, tc.limit); !slices.Equal(got, tc.want) {
			t.Errorf("List(%q, after %q, limit %d) = %q, want %q", tc.prefix, tc.startAfter, tc.limit, got, tc.want)
		}
	}
}

func testDelete(t *testing.T, s objstore.Store, _ Config) {
	for _, k := range []string{"d/1", "d/2", "d/3", "d/4", "d/5"} {
		put(t, s, k, []byte(k))
	}
	failed, err := s.Delete(ctx(t), []string{"d/1", "d/3", "d/5", "d/never"})
	if err != nil || len(failed) != 0 {
		t.Fatalf("Delete = %v, %v", failed, err)
	}
	if got := list(t, s, "d/", "", 0); !slices.Equal(got, []string{"d/2", "d/4"}) {
		t.Fatalf("after Delete, List = %q", got)
	}
	_, err = get(t, s, "d/3", 0, -1)
	wantErr(t, "GetRange of a deleted key", err, objstore.ErrNotFound)
	if failed, err := s.Delete(ctx(t), nil); err != nil || len(failed) != 0 {
		t.Fatalf("Delete(nil) = %v, %v", failed, err)
	}
	// A deleted key may be written again (compaction never does, but a
	// repair re-upload under a fresh key must not trip on leftovers).
	put(t, s, "d/3", []byte("again"))
}

func testContext(t *testing.T, s objstore.Store, _ Config) {
	data := randomBytes(1<<20, 4)
	put(t, s, "c", data)
	ended, cancel := context.WithCancel(t.Context())
	cancel()
	check := func(what string, err error) {
		t.Helper()
		wantErr(t, what, err, objstore.ErrTransient, context.Canceled)
	}
	_, err := s.Stat(ended, "c")
	check("Stat", err)
	_, err = s.GetRange(ended, "c", 0, -1)
	check("GetRange", err)
	_, err = s.Put(ended, "c2", bytes.NewReader(data), int64(len(data)), nil)
	check("Put", err)
	check("PutIfAbsent", s.PutIfAbsent(ended, "c3", data))
	check("List", s.List(ended, "", "", func(objstore.ObjectInfo) bool { return true }))
	_, err = s.Delete(ended, []string{"c"})
	check("Delete", err)
	check("ListIncompleteUploads", s.ListIncompleteUploads(ended, "", func(objstore.UploadInfo) bool { return true }))
	for _, key := range []string{"c2", "c3"} {
		_, err = s.Stat(ctx(t), key)
		wantErr(t, "Stat after a cancelled Put", err, objstore.ErrNotFound)
	}

	// The reader of a GetRange reads under the call's ctx.
	readCtx, cancelRead := context.WithCancel(ctx(t))
	rc, err := s.GetRange(readCtx, "c", 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if _, err := io.ReadFull(rc, make([]byte, 10)); err != nil {
		t.Fatal(err)
	}
	cancelRead()
	_, err = io.Copy(io.Discard, rc)
	check("reading after cancel", err)
}

// testIncompleteUploads holds a streamed Put in the middle of its source,
// finds it listed, aborts it and checks that the Put then fails.
func testIncompleteUploads(t *testing.T, s objstore.Store, cfg Config) {
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := s.Put(ctx(t), "up/held", pr, -1, nil)
		done <- err
	}()
	// The pipe hands over bytes only as the store reads them: the upload
	// has begun once the write returns. LargeBytes spans several parts: a
	// store may send an object that fits in one part as one PUT, once its
	// source ends.
	if _, err := pw.Write(randomBytes(cfg.LargeBytes, 3)); err != nil {
		t.Fatal(err)
	}
	find := func(prefix string) objstore.UploadInfo {
		var found objstore.UploadInfo
		err := s.ListIncompleteUploads(ctx(t), prefix, func(u objstore.UploadInfo) bool {
			if u.Key == "up/held" {
				found = u
			}
			return true
		})
		if err != nil {
			t.Fatal(err)
		}
		return found
	}
	var found objstore.UploadInfo
	deadline := time.Now().Add(20 * time.Second)
	for found = find("up/held"); found.UploadID == ""; found = find("up/held") {
		if time.Now().After(deadline) {
			t.Fatal("the held Put never shows as an incomplete upload")
		}
		time.Sleep(20 * time.Millisecond) // polling a condition, with a deadline
	}
	if !cfg.UploadsListedByKeyOnly {
		if byPrefix := find("up/"); byPrefix != found {
			t.Fatalf("listing by prefix found %+v, by key %+v", byPrefix, found)
		}
	}
	if other := find("up/held-not"); other.UploadID != "" {
		t.Fatalf("listing another key found %+v", other)
	}
	if time.Since(found.Initiated) > time.Minute || time.Until(found.Initiated) > time.Minute {
		t.Fatalf("upload initiated %v, not about now", found.Initiated)
	}
	if err := s.AbortIncompleteUpload(ctx(t), "up/held", found.UploadID); err != nil {
		t.Fatal(err)
	}
	if err := s.AbortIncompleteUpload(ctx(t), "up/held", found.UploadID); err != nil {
		t.Fatalf("second abort: %v; an upload already gone counts as aborted", err)
	}
	pw.Close()
	if err := <-done; err == nil {
		t.Fatal("Put succeeded after its upload was aborted")
	}
	_, err := s.Stat(ctx(t), "up/held")
	wantErr(t, "Stat after the aborted Put", err, objstore.ErrNotFound)
	var left []objstore.UploadInfo
	if err := s.ListIncompleteUploads(ctx(t), "up/held", func(u objstore.UploadInfo) bool {
		left = append(left, u)
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Fatalf("uploads left after abort: %+v", left)
	}
}
