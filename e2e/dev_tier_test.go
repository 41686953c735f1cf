package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/strata-log/strata/cmd/strata/devcluster"
	"github.com/strata-log/strata/internal/miniotest"
)

// TestDevMinIO runs `strata dev` with a minio binary on PATH: MinIO runs as
// a node of the cluster with the bucket made, every broker tiers to it
// with the credentials in its environment (and nowhere in the user's
// profile), `dev kill minio` and `dev start minio` work like for any node
// and keep the data, and Ctrl-C stops MinIO too.
func TestDevMinIO(t *testing.T) {
	skipShort(t)
	bin, err := miniotest.Binary() // fails rather than skips: CI must run this
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	// PATH comes before GOPATH in the lookup: a symlink named minio there
	// is what strata dev must find, whatever STRATA_MINIO_BIN names.
	pathDir := filepath.Join(dir, "path")
	if err := os.Mkdir(pathDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(bin, filepath.Join(pathDir, "minio")); err != nil {
		t.Fatal(err)
	}
	profile := filepath.Join(dir, "profile.json")
	env := []string{"STRATA_PROFILE=" + profile, "STRATA_METAD=", "PATH=" + pathDir + string(os.PathListSeparator) + os.Getenv("PATH")}
	clusterDir := filepath.Join(dir, "cluster")
	ports, minioPort := devPortFlags(t)
	start := time.Now()
	d := startDev(t, clusterDir, env, append(ports, "--metad", "1")...)
	d.waitFor("cluster ready", 30*time.Second)
	t.Logf("strata dev with MinIO ready in %s", time.Since(start).Round(time.Millisecond))
	store := fmt.Sprintf("s3://strata/dev?endpoint=127.0.0.1:%d&insecure=true", minioPort)
	d.waitFor("objects: "+store+" (MinIO", 5*time.Second)

	st, err := devcluster.LoadState(clusterDir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.Node("minio")
	if err != nil {
		t.Fatal(err)
	}
	if m.Bin != filepath.Join(pathDir, "minio") || m.DataDir != filepath.Join(clusterDir, "minio") {
		t.Fatalf("minio node %+v: want the binary on PATH and data in the dev dir", m)
	}
	brokerLogsSay(t, clusterDir, `msg="tiered storage"`, store)
	for _, n := range st.Nodes {
		if n.Role != devcluster.RoleBroker {
			continue
		}
		environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", n.PID))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(strings.Split(string(environ), "\x00"), "AWS_ACCESS_KEY_ID=strata-dev") {
			t.Fatalf("%s has no AWS_ACCESS_KEY_ID for MinIO in its environment", n.Name)
		}
	}
	if data, err := os.ReadFile(profile); err != nil || bytes.Contains(data, []byte("secret")) {
		t.Fatalf("user profile %s: %v\n%s", profile, err, data)
	}

	mc, err := devcluster.MinIOClient(*m)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	body := "written before kill -9"
	if _, err := mc.PutObject(ctx, devcluster.MinIOBucket, "e2e/probe", strings.NewReader(body), int64(len(body)),
		minio.PutObjectOptions{}); err != nil {
		t.Fatalf("put into the dev bucket: %v", err)
	}
	out, _, code := strata(t, env, "dev", "status", "--dir", clusterDir)
	running := 0
	for _, l := range strings.Split(out, "\n") {
		// NODE ROLE PID RUNNING LISTEN ...
		if f := strings.Fields(l); len(f) > 4 && f[3] == "true" {
			running++
			if f[0] == "minio" && (f[1] != "minio" || f[4] != m.Listen) {
				t.Fatalf("dev status lists minio as %q", l)
			}
		}
	}
	if code != 0 || running != len(st.Nodes) {
		t.Fatalf("dev status: exit %d, %d of %d running\n%s", code, running, len(st.Nodes), out)
	}

	devDir := []string{"--dir", clusterDir}
	if _, errOut, code := strata(t, env, append([]string{"dev", "kill", "minio"}, devDir...)...); code != 0 {
		t.Fatalf("dev kill minio: %s", errOut)
	}
	d.waitFor("minio (pid", 5*time.Second) // the supervisor notices
	out, errOut, code := strata(t, env, append([]string{"dev", "start", "minio"}, devDir...)...)
	if code != 0 || !strings.Contains(out, "ready") {
		t.Fatalf("dev start minio: exit %d %s %s", code, out, errOut)
	}
	d.waitFor("minio is running again", 5*time.Second)
	obj, err := mc.GetObject(ctx, devcluster.MinIOBucket, "e2e/probe", minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(obj)
	obj.Close()
	if err != nil || string(got) != body {
		t.Fatalf("after kill -9 and start: %q, %v; want %q", got, err, body)
	}
	d.interrupt()
}
