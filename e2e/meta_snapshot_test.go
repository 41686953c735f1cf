package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/strata-log/strata/internal/proctest"
	"github.com/strata-log/strata/metad/metaclient"
)

// TestMetaSnapshotSaveRestore backs up a 3-member metad cluster with
// `strata meta snapshot save` while a writer keeps changing it, and
// restores the file into a new cluster with `strata meta snapshot
// restore`: every unleased key comes back with its value, leased keys are
// skipped, a second restore into the now non-empty cluster is refused
// unless --merge (which then writes nothing), and a damaged file is
// refused before anything is written.
func TestMetaSnapshotSaveRestore(t *testing.T) {
	skipShort(t)
	src := proctest.StartMetad(t, bins["metad"], 3)
	c := newMetaClient(t, src)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	want := map[string][]byte{}
	for i := range 2000 {
		key := fmt.Sprintf("/strata/test/%04d", i)
		value := bytes.Repeat([]byte{byte(i)}, 1+i%700)
		if _, err := c.Put(ctx, key, value); err != nil {
			t.Fatal(err)
		}
		want[key] = value
	}
	lease, err := c.Grant(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, "/strata/leased", []byte("owner"), metaclient.WithLease(lease)); err != nil {
		t.Fatal(err)
	}
	// A writer changes other keys during the save: the snapshot is one
	// revision whatever it does.
	writerCtx, stopWriter := context.WithCancel(ctx)
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		for i := 0; writerCtx.Err() == nil; i++ {
			_, _ = c.Put(writerCtx, fmt.Sprintf("/strata/busy/%d", i%50), []byte(fmt.Sprint(i)))
		}
	}()
	file := filepath.Join(t.TempDir(), "metad.snap")
	srcEnv := []string{"STRATA_METAD=" + strings.Join(src.Endpoints(), ",")}
	out, errOut, code := strata(t, srcEnv, "meta", "snapshot", "save", file)
	stopWriter()
	<-writerDone
	if code != 0 || !strings.Contains(out, "saved "+file) {
		t.Fatalf("save: exit %d\n%s%s", code, out, errOut)
	}
	t.Logf("save: %s", strings.TrimSpace(out))

	dst := proctest.StartMetad(t, bins["metad"], 3)
	dstEnv := []string{"STRATA_METAD=" + strings.Join(dst.Endpoints(), ",")}
	damaged, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	damaged[len(damaged)/2] ^= 0x40
	bad := filepath.Join(t.TempDir(), "damaged.snap")
	if err := os.WriteFile(bad, damaged, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := strata(t, dstEnv, "meta", "snapshot", "restore", bad); code == 0 || !strings.Contains(errOut, "checksum") {
		t.Fatalf("restore of a damaged file: exit %d, %s", code, errOut)
	}

	out, errOut, code = strata(t, dstEnv, "meta", "snapshot", "restore", file)
	if code != 0 || !strings.Contains(out, "keys written, 0 already present, 1 leased keys skipped") {
		t.Fatalf("restore: exit %d\n%s%s", code, out, errOut)
	}
	t.Logf("restore: %s", strings.TrimSpace(out))
	d := newMetaClient(t, dst)
	got, _, err := d.List(ctx, "/strata/")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, kv := range got {
		switch {
		case kv.Key == "/strata/leased":
			t.Fatalf("the leased key was restored")
		case strings.HasPrefix(kv.Key, "/strata/test/"):
			if !bytes.Equal(kv.Value, want[kv.Key]) {
				t.Fatalf("%s: %d bytes restored, want %d", kv.Key, len(kv.Value), len(want[kv.Key]))
			}
			n++
		}
	}
	if n != len(want) {
		t.Fatalf("%d of %d keys restored", n, len(want))
	}
	if _, errOut, code := strata(t, dstEnv, "meta", "snapshot", "restore", file); code == 0 || !strings.Contains(errOut, "holds keys") {
		t.Fatalf("restore into a non-empty cluster: exit %d, %s", code, errOut)
	}
	out, errOut, code = strata(t, dstEnv, "meta", "snapshot", "restore", "--merge", file)
	if code != 0 || !strings.Contains(out, " 0 keys written") {
		t.Fatalf("restore --merge over the same keys: exit %d\n%s%s", code, out, errOut)
	}
}
