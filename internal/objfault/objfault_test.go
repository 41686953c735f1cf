package objfault_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/strata-log/strata/internal/miniotest"
	"github.com/strata-log/strata/internal/objfault"
	"github.com/strata-log/strata/internal/testwait"
	"github.com/strata-log/strata/tiering/objstore"
	"github.com/strata-log/strata/tiering/objstore/s3"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	code := miniotest.Main(m)
	if code == 0 {
		// The proxy and the stores close everything they start.
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

const maxAttempts = 3

// setup returns a proxy in front of the shared MinIO and an s3 store that
// talks through it, under a prefix of the test's own.
func setup(t *testing.T) (*objfault.Proxy, objstore.Store) {
	t.Helper()
	srv := miniotest.Shared(t)
	p := objfault.Start(t, srv.Endpoint)
	transport := &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 4}
	t.Cleanup(transport.CloseIdleConnections)
	st, err := s3.New(s3.Config{
		Endpoint: p.Endpoint, Bucket: srv.Bucket, Insecure: true,
		AccessKeyID: srv.AccessKey, SecretAccessKey: srv.SecretKey,
		PartSize: s3.MinPartSize, MaxAttempts: maxAttempts, Transport: transport,
	})
	if err != nil {
		t.Fatal(err)
	}
	s, err := objstore.WithPrefix(st, miniotest.Prefix(t))
	if err != nil {
		t.Fatal(err)
	}
	return p, s
}

func putBytes(t *testing.T, s objstore.Store, key string, b []byte) {
	t.Helper()
	if _, err := s.Put(t.Context(), key, bytes.NewReader(b), int64(len(b)), nil); err != nil {
		t.Fatalf("Put(%s): %v", key, err)
	}
}

func TestSlowDownIsTransientAndRetriesAreBounded(t *testing.T) {
	p, s := setup(t)
	putBytes(t, s, "k", []byte("data"))
	for _, method := range []string{http.MethodHead, http.MethodGet} {
		h := p.Add(objfault.Rule{Method: method, KeyContains: "/k", Status: http.StatusServiceUnavailable, Code: "SlowDown"})
		var err error
		if method == http.MethodHead {
			_, err = s.Stat(t.Context(), "k")
		} else {
			_, err = s.GetRange(t.Context(), "k", 0, -1)
		}
		if !errors.Is(err, objstore.ErrTransient) {
			t.Fatalf("%s under SlowDown: %v, want ErrTransient", method, err)
		}
		if h.Hits() != maxAttempts {
			t.Fatalf("%s: %d requests, want exactly MaxAttempts=%d", method, h.Hits(), maxAttempts)
		}
		h.Remove()
	}
	if _, err := s.Stat(t.Context(), "k"); err != nil {
		t.Fatalf("Stat after the rule is gone: %v", err)
	}
}

func TestAccessDeniedIsPermanentAndNotRetried(t *testing.T) {
	p, s := setup(t)
	h := p.Add(objfault.Rule{Method: http.MethodGet, Status: http.StatusForbidden})
	_, err := s.GetRange(t.Context(), "k", 0, -1)
	if !errors.Is(err, objstore.ErrPermanent) {
		t.Fatalf("GetRange under AccessDenied: %v, want ErrPermanent", err)
	}
	if h.Hits() != 1 {
		t.Fatalf("%d requests; a permanent error must not be retried", h.Hits())
	}
}

// TestOneFailedPartIsRetried: a 500 on one part of a multipart upload is
// retried inside the call (the part is buffered) and the Put succeeds.
func TestOneFailedPartIsRetried(t *testing.T) {
	p, s := setup(t)
	data := bytes.Repeat([]byte("0123456789abcdef"), (s3.MinPartSize+1<<20)/16)
	h := p.Add(objfault.Rule{Method: http.MethodPut, Query: []string{"uploadId", "partNumber=2"}, Status: 500, Times: 1})
	if _, err := s.Put(t.Context(), "multi", io.MultiReader(bytes.NewReader(data)), -1, nil); err != nil {
		t.Fatalf("Put with one failed part attempt: %v", err)
	}
	if h.Hits() != 1 {
		t.Fatalf("rule hit %d times, want 1", h.Hits())
	}
	info, err := s.Stat(t.Context(), "multi")
	if err != nil || info.Size != int64(len(data)) {
		t.Fatalf("Stat = %+v, %v", info, err)
	}
}

// TestFailingPartAbortsTheUpload: a part that keeps failing fails the Put
// with a transient error after MaxAttempts, leaves no object, and the
// multipart upload is aborted rather than left behind.
func TestFailingPartAbortsTheUpload(t *testing.T) {
	p, s := setup(t)
	data := bytes.Repeat([]byte{7}, s3.MinPartSize+1)
	h := p.Add(objfault.Rule{Method: http.MethodPut, Query: []string{"uploadId", "partNumber=2"}, Status: 500})
	_, err := s.Put(t.Context(), "doomed", io.MultiReader(bytes.NewReader(data)), -1, nil)
	if !errors.Is(err, objstore.ErrTransient) {
		t.Fatalf("Put with a failing part: %v, want ErrTransient", err)
	}
	if h.Hits() != maxAttempts {
		t.Fatalf("part 2 sent %d times, want MaxAttempts=%d", h.Hits(), maxAttempts)
	}
	if _, err := s.Stat(t.Context(), "doomed"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("Stat after the failed Put: %v, want ErrNotFound", err)
	}
	var left []objstore.UploadInfo
	if err := s.ListIncompleteUploads(t.Context(), "doomed", func(u objstore.UploadInfo) bool {
		left = append(left, u)
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Fatalf("the failed upload was left behind: %+v", left)
	}
}

func TestHangEndsAtTheCallersDeadline(t *testing.T) {
	p, s := setup(t)
	putBytes(t, s, "k", []byte("data"))
	h := p.Add(objfault.Rule{Method: http.MethodGet, Hang: true})
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := s.GetRange(ctx, "k", 0, -1)
	if !errors.Is(err, objstore.ErrTransient) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("hung GetRange: %v, want a transient deadline error", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("hung GetRange returned after %v, long past its 300ms deadline", took)
	}
	if h.Hits() != 1 {
		t.Fatalf("%d attempts; a call past its deadline must not retry", h.Hits())
	}
}

// TestHeldCompleteHidesTheObject holds CompleteMultipartUpload: until it
// is released the object does not exist, then the Put succeeds.
func TestHeldCompleteHidesTheObject(t *testing.T) {
	p, s := setup(t)
	h := p.Add(objfault.Rule{Method: http.MethodPost, Query: []string{"uploadId"}, Hang: true})
	done := make(chan error, 1)
	go func() {
		// More than one part: a streamed Put that fits in one is a single PUT.
		_, err := s.Put(t.Context(), "held", io.MultiReader(bytes.NewReader(bytes.Repeat([]byte{1}, s3.MinPartSize+1))), -1, nil)
		done <- err
	}()
	testwait.Until(t, 20*time.Second, "CompleteMultipartUpload to arrive", func() bool { return h.Hits() == 1 })
	if _, err := s.Stat(t.Context(), "held"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("Stat before Complete: %v, want ErrNotFound", err)
	}
	p.Release()
	if err := <-done; err != nil {
		t.Fatalf("Put after release: %v", err)
	}
	if _, err := s.Stat(t.Context(), "held"); err != nil {
		t.Fatalf("Stat after Complete: %v", err)
	}
}

func TestTruncatedBodyIsAnError(t *testing.T) {
	p, s := setup(t)
	data := bytes.Repeat([]byte("x"), 64<<10)
	putBytes(t, s, "big", data)
	for _, clean := range []bool{false, true} {
		h := p.Add(objfault.Rule{Method: http.MethodGet, TruncateBody: 1000, CleanTruncate: clean})
		rc, err := s.GetRange(t.Context(), "big", 100, -1)
		if err != nil {
			t.Fatalf("clean=%v: GetRange: %v", clean, err)
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		if !errors.Is(err, objstore.ErrTransient) || !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("clean=%v: reading a cut body: %d bytes, %v; want a transient unexpected EOF", clean, len(got), err)
		}
		if len(got) > 1000 || !bytes.Equal(got, data[100:100+len(got)]) {
			t.Fatalf("clean=%v: the bytes before the cut are wrong", clean)
		}
		h.Remove()
	}
}

func TestLatency(t *testing.T) {
	p, s := setup(t)
	putBytes(t, s, "k", []byte("data"))
	const latency = 200 * time.Millisecond
	p.Add(objfault.Rule{Method: http.MethodHead, Latency: latency})
	start := time.Now()
	if _, err := s.Stat(t.Context(), "k"); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < latency {
		t.Fatalf("Stat took %v, less than the injected %v", took, latency)
	}
}

func TestDownRefusesThenRecovers(t *testing.T) {
	p, s := setup(t)
	putBytes(t, s, "k", []byte("data"))
	if err := p.SetDown(true); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	before := p.Total()
	_, err := s.Stat(ctx, "k")
	if !errors.Is(err, objstore.ErrTransient) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stat while down: %v, want a transient error before the deadline", err)
	}
	if p.Total() != before {
		t.Fatal("a request reached the proxy while it was down")
	}
	if err := p.SetDown(false); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Stat(t.Context(), "k"); err != nil {
		t.Fatalf("Stat after recovery: %v", err)
	}
}

func TestRequestLog(t *testing.T) {
	p, s := setup(t)
	putBytes(t, s, "logged", []byte("data"))
	var puts int
	for _, r := range p.Requests() {
		if r.Method == http.MethodPut && bytes.HasSuffix([]byte(r.Key), []byte("/logged")) {
			puts++
		}
	}
	if puts != 1 {
		t.Fatalf("log holds %d PUTs of the key, want 1: %+v", puts, p.Requests())
	}
}
