package e2e

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"strings"
	"testing"
	"time"

	"github.com/strata-log/strata/client"
	"github.com/strata-log/strata/recordbatch"
	"github.com/strata-log/strata/tiering/segfile"
)

// TestTierObjectReplacedInBucketRefused: whoever can write the bucket
// (and nothing else) rewrites a record of a tiered object, with a valid
// batch CRC, so that every check but authentication passes. Against real
// processes with MinIO: the object was written authenticated and recorded
// so; after a broker restart (nothing cached) a consumer reading it gets
// a corruption error and none of its records, the failure is counted, the
// next object still reads, and `strata tier scrub` names the object as
// corrupt (MAC mismatch) and exits 2.
func TestTierObjectReplacedInBucketRefused(t *testing.T) {
	skipShort(t)
	c := startTierCluster(t)
	cl := c.client(t)
	env, storeURL := c.cliEnv(), c.storeURL()
	const topic = "forged"
	createTopic(t, cl, topic, 1, map[string]string{"segment.bytes": "65536", "local.retention.ms": "0"})
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	produceTimed(t, cl, topic, "f", 0, 200, 1024, base)
	waitTierStatus(t, env, cl, topic, 200, 1)
	produceTimed(t, cl, topic, "f", 200, 200, 1024, base)
	waitTierStatus(t, env, cl, topic, 400, 2)
	checkRecords(t, cl, topic, "f", 400, base) // a normal tiered read

	pl := storedPartitionLog(t, c.strataCluster, topic)
	for _, s := range pl.Tiered {
		if !s.Authenticated {
			t.Fatalf("object %s was not recorded as authenticated", s.ObjectKey)
		}
	}
	forged, next := pl.Tiered[0], pl.Tiered[1]
	forgeTierRecord(t, c, forged.ObjectKey)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c.brokers[0].Kill()
	c.brokers[0].Restart(t)
	if err := c.brokers[0].WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	tp := client.TopicPartition{Topic: topic, Partition: 0}
	cons, err := cl.NewConsumer(client.ConsumerConfig{MaxWait: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	if err := cons.Assign(ctx, map[client.TopicPartition]client.Offset{tp: client.OffsetAt(forged.BaseOffset)}); err != nil {
		t.Fatal(err)
	}
	for {
		recs, err := cons.Poll(ctx)
		if err != nil {
			if !strings.Contains(err.Error(), "corrupt") || !strings.Contains(err.Error(), "MAC mismatch") {
				t.Fatalf("reading the forged object: %v, want a corruption error (MAC mismatch)", err)
			}
			t.Logf("reading the forged object: %v", err)
			break
		}
		if len(recs) > 0 {
			t.Fatalf("records served from a forged object: offsets %d-%d", recs[0].Offset, recs[len(recs)-1].Offset)
		}
	}
	if n, err := metricValue("http://"+c.brokers[0].AdminAddr+"/metrics", "strata_broker_tier_read_errors_total"); err != nil || n < 1 {
		t.Fatalf("read errors counted: %v, %v", n, err)
	}

	// The next object is untouched and reads.
	good, err := cl.NewConsumer(client.ConsumerConfig{MaxWait: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	if err := good.Assign(ctx, map[client.TopicPartition]client.Offset{tp: client.OffsetAt(next.BaseOffset)}); err != nil {
		t.Fatal(err)
	}
	recs, err := good.Poll(ctx)
	if err != nil || len(recs) == 0 || recs[0].Offset != next.BaseOffset ||
		!bytes.HasPrefix(recs[0].Value, fmt.Appendf(nil, "f%d:", next.BaseOffset)) {
		t.Fatalf("reading the next object: %d records, %v", len(recs), err)
	}

	out, errOut, code := strata(t, env, "tier", "scrub", "--store", storeURL, "--topic", topic)
	if code != 2 || !strings.Contains(out, forged.ObjectKey) || !strings.Contains(out, ": corrupt: ") ||
		!strings.Contains(out, "MAC mismatch") || strings.Count(strings.TrimSpace(out), "\n") != 0 {
		t.Fatalf("scrub of the forged object: exit %d, want 2 and one line naming %s as corrupt (MAC mismatch)\n%s%s",
			code, forged.ObjectKey, out, errOut)
	}
	t.Logf("scrub: %s%s", out, errOut)
}

// forgeTierRecord rewrites, in the bucket, one byte of a record value in
// the first batch of the object under key (partition-relative key, as
// metad records it), and makes the batch's CRC right: a forgery that
// every check but authentication passes.
func forgeTierRecord(t *testing.T, c *tierCluster, key string) {
	t.Helper()
	rewriteObject(t, c.minio, c.prefix+"/"+key, func(b []byte) {
		batch := b[segfile.HeaderSize:]
		h, err := recordbatch.ParseHeader(batch)
		if err != nil {
			t.Fatal(err)
		}
		batch = batch[:h.Size()]
		at := bytes.Index(batch, []byte("xxxxxxxx"))
		if at < 0 {
			t.Fatal("no record padding in the first batch")
		}
		batch[at+4] = 'X'
		binary.BigEndian.PutUint32(batch[17:], crc32.Checksum(batch[21:], crc32.MakeTable(crc32.Castagnoli)))
		if _, err := recordbatch.Verify(batch); err != nil {
			t.Fatalf("the forged batch does not pass its own checks: %v", err)
		}
	})
}
