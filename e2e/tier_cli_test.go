package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/strata-log/strata/client"
	"github.com/strata-log/strata/internal/testwait"
)

// tierStatusRow is one partition of `strata tier status -o json`.
type tierStatusRow struct {
	Topic           string `json:"topic"`
	Partition       int32  `json:"partition"`
	Tiering         bool   `json:"tiering"`
	LogStartOffset  int64  `json:"log_start_offset"`
	TieredEndOffset int64  `json:"tiered_end_offset"`
	TieredObjects   int32  `json:"tiered_objects"`
	TieredBytes     int64  `json:"tiered_bytes"`
	LagLedgers      int    `json:"upload_lag_ledgers"`
	LagBytes        int64  `json:"upload_lag_bytes"`
}

// waitTierStatus polls `strata tier status TOPIC` until partition 0 is
// tiered to its high watermark (at least minEnd) in at least objects
// objects, with no upload lag.
func waitTierStatus(t *testing.T, env []string, cl *client.Client, topic string, minEnd int64, objects int32) tierStatusRow {
	t.Helper()
	var row tierStatusRow
	testwait.UntilNil(t, 120*time.Second, fmt.Sprintf("tier status to show %s tiered to %d+ in %d+ objects", topic, minEnd, objects), func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		d, err := cl.DescribeTopic(ctx, topic)
		if err != nil {
			return err
		}
		hw := d.Partitions[0].HighWatermark
		if hw < minEnd {
			return fmt.Errorf("high watermark %d", hw)
		}
		out, errOut, code := strata(t, env, "tier", "status", topic, "-o", "json")
		if code != 0 {
			return fmt.Errorf("exit %d: %s", code, errOut)
		}
		var st struct {
			Partitions []tierStatusRow `json:"partitions"`
		}
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		if len(st.Partitions) != 1 {
			return fmt.Errorf("partitions %+v", st.Partitions)
		}
		row = st.Partitions[0]
		if !row.Tiering || row.TieredEndOffset != hw || row.TieredObjects < objects || row.LagBytes != 0 || row.LagLedgers != 0 {
			return fmt.Errorf("status %+v", row)
		}
		return nil
	})
	return row
}

// TestTierCLI drives `strata tier status` and `strata tier scrub` against a
// real cluster tiering to a real MinIO: the status shows a topic tiered,
// scrub passes over sound objects, then names a deleted object and a
// corrupted one and exits 2.
func TestTierCLI(t *testing.T) {
	skipShort(t)
	c := startTierCluster(t) // sets AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, which strata inherits
	cl := c.client(t)
	env, storeURL := c.cliEnv(), c.storeURL()
	const topic = "scrubbed"
	createTopic(t, cl, topic, 1, map[string]string{"segment.bytes": "65536", "local.retention.ms": "0"})
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)

	// Two rounds, each tiered before the next, so there are two objects.
	produceTimed(t, cl, topic, "s", 0, 200, 1024, base)
	waitTierStatus(t, env, cl, topic, 200, 1)
	produceTimed(t, cl, topic, "s", 200, 200, 1024, base)
	row := waitTierStatus(t, env, cl, topic, 400, 2)
	t.Logf("tiered: %+v", row)

	// Every topic: a topic that is not tiered shows so.
	createTopic(t, cl, "kept", 1, map[string]string{"remote.storage.enable": "false"})
	out, errOut, code := strata(t, env, "tier", "status")
	if code != 0 || !strings.Contains(out, "TIERED END") || !strings.Contains(out, topic) || !strings.Contains(out, "off") {
		t.Fatalf("tier status: exit %d\n%s%s", code, out, errOut)
	}
	t.Logf("tier status:\n%s", out)
	out, errOut, code = strata(t, env, "tier", "status", "-o", "json")
	var all struct {
		Partitions []tierStatusRow `json:"partitions"`
	}
	if err := json.Unmarshal([]byte(out), &all); err != nil || code != 0 {
		t.Fatalf("tier status -o json: exit %d, %v\n%s%s", code, err, out, errOut)
	}
	tiering := map[string]bool{}
	for _, r := range all.Partitions {
		tiering[r.Topic] = r.Tiering
	}
	if len(tiering) != 2 || !tiering[topic] || tiering["kept"] {
		t.Fatalf("tier status -o json: %+v", all.Partitions)
	}

	out, errOut, code = strata(t, env, "tier", "scrub", "--store", storeURL)
	want := fmt.Sprintf("checked %d of %d objects", row.TieredObjects, row.TieredObjects)
	if code != 0 || out != "" || !strings.Contains(errOut, want) || !strings.Contains(errOut, "no problems") {
		t.Fatalf("scrub of sound objects: exit %d, stdout %q, stderr %q (want %q)", code, out, errOut, want)
	}
	t.Logf("scrub: %s", strings.TrimSpace(errOut))

	// Damage two objects behind Strata's back: delete one, and change one
	// byte of another.
	pl := storedPartitionLog(t, c.strataCluster, topic)
	deleted, corrupted := pl.Tiered[0].ObjectKey, pl.Tiered[1].ObjectKey
	mc, err := c.minio.Client()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := mc.RemoveObject(ctx, c.minio.Bucket, c.prefix+"/"+deleted, minio.RemoveObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	corruptObject(t, c.minio, c.prefix+"/"+corrupted, func(b []byte) int { return len(b) / 2 })

	out, errOut, code = strata(t, env, "tier", "scrub", "--store", storeURL, "--topic", topic, "--parallel", "2", "--progress")
	if code != 2 {
		t.Fatalf("scrub of damaged objects: exit %d, want 2\n%s%s", code, out, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("scrub printed %d problems, want 2:\n%s", len(lines), out)
	}
	for _, w := range []struct{ key, kind string }{{deleted, ": missing: "}, {corrupted, ": corrupt: segfile: corrupt segment"}} {
		found := false
		for _, l := range lines {
			found = found || strings.Contains(l, w.key) && strings.Contains(l, w.kind) && strings.HasPrefix(l, topic+"/0 offsets ")
		}
		if !found {
			t.Errorf("no line names %s as %q:\n%s", w.key, w.kind, out)
		}
	}
	if !strings.Contains(errOut, "\rscrub: ") || !strings.Contains(errOut, "2 problems (1 corrupt, 1 missing)") {
		t.Errorf("stderr shows no progress or summary: %q", errOut)
	}
	t.Logf("scrub of damaged objects:\n%s%s", out, errOut)

	out, errOut, code = strata(t, env, "tier", "scrub", "--store", storeURL, "-o", "json")
	var rep struct {
		Objects  int `json:"objects"`
		Damaged  int `json:"damaged"`
		Problems []struct {
			Key  string `json:"key"`
			Kind string `json:"kind"`
		} `json:"problems"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 2 {
		t.Fatalf("scrub -o json: exit %d, %v\n%s%s", code, err, out, errOut)
	}
	if rep.Damaged != 2 || int32(rep.Objects) != row.TieredObjects || len(rep.Problems) != 2 {
		t.Fatalf("scrub -o json: %+v", rep)
	}
	for _, p := range rep.Problems {
		if !(p.Key == deleted && p.Kind == "missing" || p.Key == corrupted && p.Kind == "corrupt") {
			t.Errorf("scrub -o json: problem %+v", p)
		}
	}
}
