package miniotest_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/strata-log/strata/internal/miniotest"
)

func TestMain(m *testing.M) { os.Exit(miniotest.Main(m)) }

func TestMissingBinarySaysHowToInstall(t *testing.T) {
	t.Setenv("STRATA_MINIO_BIN", "/nonexistent/minio")
	_, err := miniotest.Binary()
	if err == nil || !strings.Contains(err.Error(), "STRATA_MINIO_BIN") {
		t.Fatalf("Binary() with a wrong STRATA_MINIO_BIN: %v", err)
	}
	t.Setenv("STRATA_MINIO_BIN", "")
	t.Setenv("PATH", "")
	t.Setenv("GOPATH", t.TempDir())
	// `go env GOPATH` needs go itself; without PATH it cannot run, and
	// the search must still end with the install hint.
	if _, err := miniotest.Binary(); err == nil || !strings.Contains(err.Error(), "make minio") {
		t.Fatalf("Binary() with nothing installed: %v; want the `make minio` hint", err)
	}
}

func TestSharedServerAndPrefixes(t *testing.T) {
	a := miniotest.Shared(t)
	b := miniotest.Shared(t)
	if a != b {
		t.Fatal("Shared started a second server")
	}
	p1, p2 := miniotest.Prefix(t), miniotest.Prefix(t)
	if p1 == p2 || strings.Contains(p1, "/") {
		t.Fatalf("prefixes %q and %q: want distinct and without /", p1, p2)
	}
	client, err := a.Client()
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := client.BucketExists(t.Context(), a.Bucket); err != nil || !ok {
		t.Fatalf("bucket %s: exists=%v, %v", a.Bucket, ok, err)
	}
}

// TestStopAndRestartKeepDataAndPort is the outage a tiering test scripts:
// the server goes away, comes back on the same address, and still holds
// what it stored.
func TestStopAndRestartKeepDataAndPort(t *testing.T) {
	srv := miniotest.Start(t)
	client, err := srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if _, err := client.PutObject(ctx, srv.Bucket, "k", bytes.NewReader([]byte("kept")), 4, minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	endpoint := srv.Endpoint
	srv.Stop()
	if srv.Running() || srv.HealthLive(ctx) {
		t.Fatal("server still answers after Stop")
	}
	restartCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := srv.Restart(restartCtx); err != nil {
		t.Fatal(err)
	}
	if srv.Endpoint != endpoint || !srv.HealthLive(ctx) {
		t.Fatalf("restarted on %s (was %s), live=%v", srv.Endpoint, endpoint, srv.HealthLive(ctx))
	}
	obj, err := client.GetObject(ctx, srv.Bucket, "k", minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Close()
	if b, err := io.ReadAll(obj); err != nil || string(b) != "kept" {
		t.Fatalf("after restart the object holds %q, %v", b, err)
	}
}
