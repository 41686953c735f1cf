package s3_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/strata-log/strata/internal/miniotest"
	"github.com/strata-log/strata/tiering/objstore"
	"github.com/strata-log/strata/tiering/objstore/objstoretest"
	"github.com/strata-log/strata/tiering/objstore/s3"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	code := miniotest.Main(m)
	if code == 0 {
		// Every store is closed by its test: no connection goroutines stay.
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// newStore returns a store on the shared server, keyed under a prefix of
// the test's own.
func newStore(t *testing.T, mutate func(*s3.Config)) objstore.Store {
	t.Helper()
	srv := miniotest.Shared(t)
	cfg := s3.Config{
		Endpoint: srv.Endpoint, Bucket: srv.Bucket, Insecure: true,
		AccessKeyID: srv.AccessKey, SecretAccessKey: srv.SecretKey,
		PartSize: s3.MinPartSize, // several parts with a few MiB
	}
	if mutate != nil {
		mutate(&cfg)
	}
	st, err := s3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	s, err := objstore.WithPrefix(st, miniotest.Prefix(t))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConformance(t *testing.T) {
	objstoretest.Run(t, objstoretest.Config{
		New: func(t *testing.T) objstore.Store { return newStore(t, nil) },
		// Three parts of 5 MiB (the last one short).
		LargeBytes:             2*s3.MinPartSize + 1<<20,
		UploadsListedByKeyOnly: true, // MinIO
	})
}

func TestConformanceOneThread(t *testing.T) {
	if testing.Short() {
		t.Skip("the sequential part upload is the same protocol; -short runs the default")
	}
	cfg := objstoretest.Config{
		New: func(t *testing.T) objstore.Store {
			return newStore(t, func(c *s3.Config) { c.PartConcurrency = 1 })
		},
		LargeBytes:             s3.MinPartSize + 1<<20,
		UploadsListedByKeyOnly: true, // MinIO
	}
	objstoretest.Run(t, cfg)
}

func TestWrongBucketIsPermanent(t *testing.T) {
	s := newStore(t, func(c *s3.Config) { c.Bucket = "no-such-bucket" })
	_, err := s.GetRange(t.Context(), "k", 0, -1)
	if !errors.Is(err, objstore.ErrPermanent) {
		t.Fatalf("GetRange on a missing bucket: %v, want ErrPermanent", err)
	}
	_, err = s.Put(t.Context(), "k", bytes.NewReader([]byte("x")), 1, nil)
	if !errors.Is(err, objstore.ErrPermanent) {
		t.Fatalf("Put on a missing bucket: %v, want ErrPermanent", err)
	}
	// MinIO names the error of a HEAD in a header (doc.go: AWS does not).
	if _, err = s.Stat(t.Context(), "k"); !errors.Is(err, objstore.ErrPermanent) {
		t.Fatalf("Stat on a missing bucket: %v, want ErrPermanent", err)
	}
}

func TestWrongCredentialsArePermanent(t *testing.T) {
	s := newStore(t, func(c *s3.Config) { c.SecretAccessKey = "wrong-secret-key" })
	err := s.List(t.Context(), "", "", func(objstore.ObjectInfo) bool { return true })
	if !errors.Is(err, objstore.ErrPermanent) {
		t.Fatalf("List with a wrong secret: %v, want ErrPermanent", err)
	}
}

func TestConfig(t *testing.T) {
	ok := s3.Config{Endpoint: "127.0.0.1:9000", Bucket: "b", AccessKeyID: "AK", SecretAccessKey: "very-secret"}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	if s := ok.String(); strings.Contains(s, "very-secret") || !strings.Contains(s, "part-size=16777216") {
		t.Fatalf("String() = %s: must hide the secret and show the defaults", s)
	}
	for name, mutate := range map[string]func(*s3.Config){
		"scheme in endpoint": func(c *s3.Config) { c.Endpoint = "http://127.0.0.1:9000" },
		"no endpoint":        func(c *s3.Config) { c.Endpoint = "" },
		"no bucket":          func(c *s3.Config) { c.Bucket = "" },
		"no secret":          func(c *s3.Config) { c.SecretAccessKey = "" },
		"small parts":        func(c *s3.Config) { c.PartSize = 1 << 20 },
		"negative attempts":  func(c *s3.Config) { c.MaxAttempts = -1 },
	} {
		c := ok
		mutate(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: Validate accepted %+v", name, c)
		}
		if _, err := s3.New(c); err == nil {
			t.Errorf("%s: New accepted %+v", name, c)
		}
	}
}

// countingTransport counts the requests by method and whether they
// belong to a multipart upload.
type countingTransport struct {
	base            *http.Transport
	mu              sync.Mutex
	puts, multipart int
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.mu.Lock()
	if r.URL.Query().Has("uploads") || r.URL.Query().Has("uploadId") {
		c.multipart++
	} else if r.Method == http.MethodPut {
		c.puts++
	}
	c.mu.Unlock()
	return c.base.RoundTrip(r)
}

// A streamed Put (size -1) whose source ends within one part is one PUT;
// a longer one is a multipart upload, and both store every byte.
func TestStreamedPutOfOnePartIsOnePUT(t *testing.T) {
	tr := &countingTransport{base: http.DefaultTransport.(*http.Transport).Clone()}
	t.Cleanup(tr.base.CloseIdleConnections)
	s := newStore(t, func(c *s3.Config) { c.Transport = tr })
	small := bytes.Repeat([]byte("x"), 100<<10)
	if _, err := s.Put(t.Context(), "stream/small", bytes.NewBuffer(small), -1, nil); err != nil {
		t.Fatal(err)
	}
	tr.mu.Lock()
	puts, multipart := tr.puts, tr.multipart
	tr.mu.Unlock()
	if puts != 1 || multipart != 0 {
		t.Fatalf("a 100 KiB streamed Put sent %d PUTs and %d multipart requests, want 1 and 0", puts, multipart)
	}
	large := bytes.Repeat([]byte("y"), s3.MinPartSize+1)
	if _, err := s.Put(t.Context(), "stream/large", bytes.NewBuffer(large), -1, nil); err != nil {
		t.Fatal(err)
	}
	tr.mu.Lock()
	multipart = tr.multipart
	tr.mu.Unlock()
	if multipart < 3 { // initiate, parts, complete
		t.Fatalf("a streamed Put longer than a part sent %d multipart requests", multipart)
	}
	for key, want := range map[string][]byte{"stream/small": small, "stream/large": large} {
		rc, err := s.GetRange(t.Context(), key, 0, -1)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s: read back %d bytes, %v; want %d", key, len(got), err, len(want))
		}
	}
}
