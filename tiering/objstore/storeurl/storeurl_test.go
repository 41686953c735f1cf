package storeurl_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/minio/minio-go/v7"
	"github.com/strata-log/strata/internal/miniotest"
	"github.com/strata-log/strata/tiering/objstore"
	"github.com/strata-log/strata/tiering/objstore/storeurl"
)

func TestMain(m *testing.M) { os.Exit(miniotest.Main(m)) }

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		url  string
		want storeurl.Location
	}{
		{"s3://strata-tier?endpoint=127.0.0.1:9000", storeurl.Location{Scheme: "s3", Bucket: "strata-tier", Endpoint: "127.0.0.1:9000"}},
		{"s3://b.example-1/a/b/?endpoint=minio:9000&region=eu-west-1&insecure=true",
			storeurl.Location{Scheme: "s3", Bucket: "b.example-1", Prefix: "a/b", Endpoint: "minio:9000", Region: "eu-west-1", Insecure: true}},
		{"s3://bkt/p?endpoint=s3.example.net&insecure=false", storeurl.Location{Scheme: "s3", Bucket: "bkt", Prefix: "p", Endpoint: "s3.example.net"}},
		{"file:///var/lib/strata/tier", storeurl.Location{Scheme: "file", Dir: "/var/lib/strata/tier"}},
		{"file:///var/lib/strata/../tier/", storeurl.Location{Scheme: "file", Dir: "/var/lib/tier"}},
	} {
		got, err := storeurl.Parse(tc.url)
		if err != nil || got != tc.want {
			t.Errorf("Parse(%q) = %+v, %v; want %+v", tc.url, got, err, tc.want)
			continue
		}
		// The canonical form parses back to the same location.
		if again, err := storeurl.Parse(got.String()); err != nil || again != got {
			t.Errorf("Parse(%q) = %+v, %v; want %+v", got.String(), again, err, got)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, raw := range []string{
		"", "bucket", "/abs/dir", "http://host/bucket", "gs://bucket?endpoint=h:1",
		"s3:bucket", "s3://bucket", "s3://bucket?endpoint=", "s3://Bucket?endpoint=h:1",
		"s3://b?endpoint=h:1", "s3://bucket?endpoint=http://h:1", "s3://bucket?endpoint=h:99999",
		"s3://bucket?endpoint=h:1&insecure=maybe", "s3://bucket?endpoint=h:1&endpoint=h:2",
		"s3://bucket?endpoint=h:1&regoin=x", "s3://ak:sk@bucket?endpoint=h:1",
		"s3://bucket/a/../b?endpoint=h:1", "s3://bucket/a//b?endpoint=h:1", "s3://bucket?endpoint=h:1#frag",
		"file://relative/dir", "file:relative", "file:///dir?x=1", "file://",
	} {
		if l, err := storeurl.Parse(raw); !errors.Is(err, storeurl.ErrInvalidURL) {
			t.Errorf("Parse(%q) = %+v, %v; want ErrInvalidURL", raw, l, err)
		}
	}
}

func TestOpenFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "new", "tier")
	s, err := storeurl.Open(t.Context(), "file://"+dir, storeurl.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.PutIfAbsent(t.Context(), "strata/c1/bucket.json", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "strata/c1/bucket.json")); err != nil {
		t.Fatalf("the object is not a file under the directory: %v", err)
	}
}

func TestOpenS3NeedsCredentials(t *testing.T) {
	t.Setenv(storeurl.EnvAccessKeyID, "")
	t.Setenv(storeurl.EnvSecretAccessKey, "")
	_, err := storeurl.Open(context.Background(), "s3://bucket?endpoint=127.0.0.1:1", storeurl.Options{})
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte(storeurl.EnvAccessKeyID)) {
		t.Fatalf("Open without credentials: %v; want an error naming %s", err, storeurl.EnvAccessKeyID)
	}
}

// TestOpenS3AppliesPrefix opens a MinIO bucket with credentials from the
// environment and checks that the URL's prefix is on every key in the
// bucket but invisible to the store's caller.
func TestOpenS3AppliesPrefix(t *testing.T) {
	srv := miniotest.Shared(t)
	t.Setenv(storeurl.EnvAccessKeyID, srv.AccessKey)
	t.Setenv(storeurl.EnvSecretAccessKey, srv.SecretKey)
	prefix := miniotest.Prefix(t) + "/cluster"
	s, err := storeurl.Open(t.Context(), "s3://"+srv.Bucket+"/"+prefix+"/?insecure=true&endpoint="+srv.Endpoint, storeurl.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.(io.Closer).Close()
	if _, err := s.Put(t.Context(), "t/1/seg", bytes.NewReader([]byte("data")), 4, nil); err != nil {
		t.Fatal(err)
	}
	client, err := srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	obj, err := client.GetObject(t.Context(), srv.Bucket, prefix+"/t/1/seg", minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Close()
	if b, err := io.ReadAll(obj); err != nil || string(b) != "data" {
		t.Fatalf("bucket key %s/t/1/seg holds %q, %v", prefix, b, err)
	}
	var keys []string
	if err := s.List(t.Context(), "", "", func(o objstore.ObjectInfo) bool { keys = append(keys, o.Key); return true }); err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 || keys[0] != "t/1/seg" {
		t.Fatalf("List through the store = %q, want the key without prefix", keys)
	}
}
