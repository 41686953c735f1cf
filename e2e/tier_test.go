package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"google.golang.org/protobuf/proto"

	"github.com/strata-log/strata/client"
	"github.com/strata-log/strata/internal/failpoint"
	"github.com/strata-log/strata/internal/miniotest"
	"github.com/strata-log/strata/internal/objfault"
	"github.com/strata-log/strata/internal/proctest"
	"github.com/strata-log/strata/internal/testwait"
	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/proto/brokerpb"
)

// tierCluster is a cluster of one broker tiering to its own MinIO.
type tierCluster struct {
	*strataCluster
	minio  *miniotest.Server
	prefix string
}

// startTierCluster starts MinIO and a cluster whose broker tiers to it
// quickly: objects of 4 MiB (or whatever closed ledgers there are after
// 1 s), checks every 200 ms, orphans swept after 2 s.
func startTierCluster(t *testing.T) *tierCluster {
	t.Helper()
	m := miniotest.Start(t)
	return startTierClusterAt(t, m, m.Endpoint)
}

// startTierClusterAt is startTierCluster with the brokers reaching MinIO
// at endpoint (a fault proxy), plus extra broker flags.
func startTierClusterAt(t *testing.T, m *miniotest.Server, endpoint string, extra ...string) *tierCluster {
	t.Helper()
	t.Setenv("AWS_ACCESS_KEY_ID", m.AccessKey) // the broker processes inherit them
	t.Setenv("AWS_SECRET_ACCESS_KEY", m.SecretKey)
	prefix := "tiertest"
	url := fmt.Sprintf("s3://%s/%s?endpoint=%s&insecure=true", m.Bucket, prefix, endpoint)
	args := append([]string{"--tier-store", url, "--tier-segment-bytes", "4194304", "--tier-max-delay", "1s",
		"--tier-check-interval", "200ms", "--tier-orphan-grace", "2s", "--tier-delete-delay", "1s", "--tier-cookie-check-interval", "100ms", "--idle-roll", "1s",
		"--retention-check-interval", "200ms", "--orphan-ledger-grace", "2s", "--orphan-ledger-interval", "200ms"}, extra...)
	c := startStrata(t, 1, args...)
	return &tierCluster{strataCluster: c, minio: m, prefix: prefix}
}

// cliEnv is the environment of a `strata` command against the cluster.
func (c *tierCluster) cliEnv() []string {
	return []string{"STRATA_METAD=" + strings.Join(c.meta.Endpoints(), ","), "STRATA_BROKER=" + strings.Join(c.brokerAddrs(), ",")}
}

// storeURL is the --store of `strata tier scrub`: the brokers' store.
func (c *tierCluster) storeURL() string {
	return fmt.Sprintf("s3://%s/%s?endpoint=%s&insecure=true", c.minio.Bucket, c.prefix, c.minio.Endpoint)
}

// objects lists the segment objects in the cluster's prefix of the bucket
// (not the bucket cookie).
func (c *tierCluster) objects(t *testing.T) []string {
	t.Helper()
	mc, err := c.minio.Client()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var keys []string
	for o := range mc.ListObjects(ctx, c.minio.Bucket, minio.ListObjectsOptions{Prefix: c.prefix + "/", Recursive: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		if strings.HasSuffix(o.Key, ".seg") {
			keys = append(keys, o.Key)
		}
	}
	return keys
}

// produceTimed writes n records of size bytes to partition 0 of topic,
// record i stamped base+i ms, value "<prefix><i>:" and padding.
func produceTimed(t *testing.T, cl *client.Client, topic, prefix string, from, n, size int, base time.Time) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	p, err := cl.NewProducer(client.ProducerConfig{Linger: 5 * time.Millisecond, BatchBytes: 256 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	pad := bytes.Repeat([]byte{'x'}, size)
	errs := make(chan error, 1024)
	for i := from; i < from+n; i++ {
		v := append([]byte(prefix+strconv.Itoa(i)+":"), pad...)
		rec := &client.Record{Topic: topic, Partition: 0, Value: v, Timestamp: base.Add(time.Duration(i) * time.Millisecond)}
		if err := p.Produce(ctx, rec, func(_ *client.Record, err error) {
			if err != nil {
				select {
				case errs <- err:
				default:
				}
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errs:
		t.Fatalf("produce: %v", err)
	default:
	}
}

// tiered waits until every record of the partition but the open ledger's
// (if one is open) is in objects and the bookies hold no closed ledger of
// it.
func tiered(t *testing.T, cl *client.Client, topic string) (hw int64) {
	t.Helper()
	testwait.UntilNil(t, 120*time.Second, "everything tiered and the bookie copies deleted", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		d, err := cl.DescribeTopic(ctx, topic)
		if err != nil {
			return err
		}
		p := d.Partitions[0]
		hw = p.HighWatermark
		if p.TieredEndOffset != hw || hasClosedLedger(p) {
			return fmt.Errorf("tiered to %d of %d; ledgers %d", p.TieredEndOffset, hw, len(p.Ledgers))
		}
		return nil
	})
	return hw
}

// hasClosedLedger reports whether a partition still lists a closed ledger
// (one not tiered yet, or a local copy not deleted yet).
func hasClosedLedger(p *brokerpb.PartitionDescription) bool {
	return slices.ContainsFunc(p.Ledgers, func(l *brokerpb.LedgerDescription) bool { return l.Closed })
}

// checkRecords reads partition 0 from the earliest offset to hw: each
// record exactly once, at its offset, with its value and timestamp.
func checkRecords(t *testing.T, cl *client.Client, topic, prefix string, hw int64, base time.Time) {
	t.Helper()
	recs := readFromEarliest(t, cl, topic)
	if int64(len(recs)) != hw {
		t.Fatalf("read %d records, want %d", len(recs), hw)
	}
	for _, r := range recs {
		if !bytes.HasPrefix(r.Value, []byte(prefix+strconv.FormatInt(r.Offset, 10)+":")) {
			t.Fatalf("offset %d holds %.24q", r.Offset, r.Value)
		}
		if want := base.Add(time.Duration(r.Offset) * time.Millisecond); !r.Timestamp.Equal(want) {
			t.Fatalf("offset %d stamped %s, want %s", r.Offset, r.Timestamp, want)
		}
	}
}

// TestTieredStorage: 200 MB through small ledgers end up in MinIO, the
// bookie copies go, and a consumer from the earliest offset, fetches at
// random offsets and lookups at random timestamps read them back exactly.
func TestTieredStorage(t *testing.T) {
	skipShort(t)
	c := startTierCluster(t)
	cl := c.client(t)
	ctx := context.Background()
	createTopic(t, cl, "history", 1, map[string]string{"segment.bytes": "1048576", "local.retention.ms": "0"})
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	const n, size = 3200, 64 << 10 // 200 MiB
	start := time.Now()
	produceTimed(t, cl, "history", "h", 0, n, size, base)
	produced := time.Since(start)
	hw := tiered(t, cl, "history")
	t.Logf("produced %d MiB in %s; tiered and local copies deleted %s after the start", n*size>>20, produced.Round(time.Millisecond),
		time.Since(start).Round(time.Millisecond))
	if hw != n {
		t.Fatalf("high watermark %d, want %d", hw, n)
	}
	keys := c.objects(t)
	if len(keys) < 40 {
		t.Fatalf("%d objects for 200 MiB in 4 MiB objects: %v", len(keys), keys)
	}
	env, _ := realLedgerEnv(t, c.meta)
	// The ledgers go after the CAS that unlinks them: wait.
	testwait.UntilNil(t, 30*time.Second, "the closed ledgers of the topic deleted", func() error {
		all, err := ledger.ListAll(ctx, env.Meta)
		if err != nil {
			return err
		}
		for _, md := range all {
			if md.Properties["topic"] == "history" && md.State.String() == "CLOSED" {
				return fmt.Errorf("closed ledger %d of the topic is still on the bookies", md.Id)
			}
		}
		return nil
	})
	testwait.UntilNil(t, 30*time.Second, "bookies to hold no copy of a deleted ledger", func() error { return bookieCopiesMatch(c.strataCluster, env) })

	// Catch-up reads (numbers for the note; nothing is asserted on time):
	// the whole history from the objects only, with a cold then a warm
	// chunk cache, beside a plain sequential GET of the same objects.
	coldStart := time.Now()
	checkRecords(t, cl, "history", "h", hw, base)
	cold := time.Since(coldStart)
	warmStart := time.Now()
	checkRecords(t, cl, "history", "h", hw, base)
	warm := time.Since(warmStart)
	getStart := time.Now()
	var got int64
	mc, err := c.minio.Client()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		obj, err := mc.GetObject(ctx, c.minio.Bucket, k, minio.GetObjectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		n, err := buf.ReadFrom(obj)
		obj.Close()
		if err != nil {
			t.Fatal(err)
		}
		got += n
	}
	plain := time.Since(getStart)
	mbps := func(d time.Duration) float64 { return float64(n*size) / (1 << 20) / d.Seconds() }
	t.Logf("catch-up read of %d MiB from objects: cold %.0f MB/s, warm %.0f MB/s; plain sequential GET of the %d objects (%d MiB) %.0f MB/s",
		n*size>>20, mbps(cold), mbps(warm), len(keys), got>>20, float64(got)/(1<<20)/plain.Seconds())

	tp := client.TopicPartition{Topic: "history", Partition: 0}
	cons, err := cl.NewConsumer(client.ConsumerConfig{MaxWait: 100 * time.Millisecond, PartitionMaxBytes: size + 1024})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	for range 30 {
		off := rng.Int64N(n)
		qctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		if err := cons.Seek(qctx, tp, client.OffsetAt(off)); err != nil {
			t.Fatal(err)
		}
		recs, err := cons.Poll(qctx)
		if err != nil || len(recs) == 0 || recs[0].Offset != off {
			t.Fatalf("fetch at %d: %d records, %v", off, len(recs), err)
		}
		lo, err := cl.ListOffsets(qctx, tp, base.Add(time.Duration(off)*time.Millisecond).UnixMilli())
		if err != nil || lo.Offset != off {
			t.Fatalf("offset for the time of record %d: %v, %v", off, lo, err)
		}
		cancel()
	}
	desc, err := cl.DescribeTopic(ctx, "history")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d objects, %d MiB in the store, %d bytes on the bookies", desc.Partitions[0].TieredSegments,
		desc.Partitions[0].TieredBytes>>20, desc.Partitions[0].Bytes)
}

// TestTieringCrashes: kill -9 the owner right after an upload (before its
// commit), right after a commit (before the bookie copies go), and right
// after the CAS that unlinks them (before they are deleted). Nothing is
// lost, no offset is in two objects, and the leftovers (an uncommitted
// object, unlisted ledgers) are collected.
func TestTieringCrashes(t *testing.T) {
	skipShort(t)
	c := startTierCluster(t)
	cl := c.client(t)
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	broker := c.brokers[0]
	for i, point := range []string{"tier.after_upload", "tier.after_commit", "tier.after_local_unlink"} {
		topic := fmt.Sprint("crash", i)
		createTopic(t, cl, topic, 1, map[string]string{"segment.bytes": "65536", "local.retention.ms": "0"})
		broker.Kill()
		broker.Env = []string{failpoint.EnvVar + "=" + point + "=kill"}
		broker.Restart(t)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := broker.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
		cancel()
		d, err := cl.DescribeTopic(context.Background(), topic)
		if err != nil {
			t.Fatal(err)
		}
		// Records to upload; the broker dies at the failpoint (the
		// producer may see it die: those records are written again below).
		produceUntilDeath(t, cl, topic, broker.Process, base)
		// What the crash left: an object the list does not name, or
		// ledgers the list no longer names.
		pl := storedPartitionLog(t, c.strataCluster, topic)
		inStore := 0
		for _, k := range c.objects(t) {
			if strings.Contains(k, "/"+d.Id+"/") {
				inStore++
			}
		}
		switch point {
		case "tier.after_upload":
			if inStore != len(pl.Tiered)+1 {
				t.Fatalf("%s: %d objects in the store, %d committed: want one uncommitted", point, inStore, len(pl.Tiered))
			}
		case "tier.after_commit":
			if inStore != len(pl.Tiered) || len(pl.Tiered) == 0 {
				t.Fatalf("%s: %d objects in the store, %d committed", point, inStore, len(pl.Tiered))
			}
		}
		broker.Env = nil
		broker.Restart(t)
		ctx, cancel = context.WithTimeout(context.Background(), 30*time.Second)
		if err := broker.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
		cancel()
		produceTimed(t, cl, topic, "c", 0, 10, 1024, base) // a fresh, complete run after the crash
		hw := tiered(t, cl, topic)
		recs := readFromEarliest(t, cl, topic)
		if int64(len(recs)) != hw {
			t.Fatalf("%s: read %d records, high watermark %d", point, len(recs), hw)
		}
		for j, r := range recs {
			if r.Offset != int64(j) {
				t.Fatalf("%s: record %d at offset %d", point, j, r.Offset)
			}
		}
		// Leftovers go: every object is named by the partition's list.
		testwait.UntilNil(t, 30*time.Second, point+": orphan objects swept", func() error {
			d, err := cl.DescribeTopic(context.Background(), topic)
			if err != nil {
				return err
			}
			var named int32
			for _, k := range c.objects(t) {
				if strings.Contains(k, "/"+d.Id+"/") {
					named++
				}
			}
			if named != d.Partitions[0].TieredSegments {
				return fmt.Errorf("%d objects of the topic in the store, %d committed", named, d.Partitions[0].TieredSegments)
			}
			return nil
		})
		t.Logf("%s: killed there, restarted; %d records read back, leftovers collected", point, len(recs))
	}
}

// produceUntilDeath produces small records until the broker process dies
// (at its failpoint), for at most a minute.
func produceUntilDeath(t *testing.T, cl *client.Client, topic string, broker *proctest.Process, base time.Time) {
	t.Helper()
	p, err := cl.NewProducer(client.ProducerConfig{Linger: time.Millisecond, DeliveryTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = p.Close(ctx)
	}()
	deadline := time.Now().Add(time.Minute)
	pad := bytes.Repeat([]byte{'y'}, 1024)
	for i := 0; broker.Running(); i++ {
		if time.Now().After(deadline) {
			t.Fatal("the broker did not reach its failpoint within a minute")
		}
		rec := &client.Record{Topic: topic, Partition: 0, Value: pad, Timestamp: base}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := p.Produce(ctx, rec, nil) // blocks while a dead broker's metadata is refreshed
		cancel()
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatal(err)
		}
		if i%64 == 0 {
			time.Sleep(10 * time.Millisecond) // pacing, not a wait for a condition
		}
	}
}

// storedPartitionLog reads partition 0's list from metad (when no broker
// answers).
func storedPartitionLog(t *testing.T, c *strataCluster, topic string) *brokerpb.PartitionLog {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := newMetaClient(t, c.meta).Get(ctx, fmt.Sprintf("/strata/partitions/%s/0", topic))
	if err != nil {
		t.Fatal(err)
	}
	var pl brokerpb.PartitionLog
	if err := proto.Unmarshal(kv.Value, &pl); err != nil {
		t.Fatal(err)
	}
	return &pl
}

// TestTieringStoreFaults: MinIO stopped for longer than local.retention.ms
// stops nothing but uploads (produce and tail reads go on, no bookie copy
// is deleted) and uploads catch up when it returns; an object corrupted
// in the store is refused at read, loudly and counted, never served.
func TestTieringStoreFaults(t *testing.T) {
	skipShort(t)
	c := startTierCluster(t)
	cl := c.client(t)
	ctx := context.Background()
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	createTopic(t, cl, "faults", 1, map[string]string{"segment.bytes": "65536", "local.retention.ms": "0"})
	produceTimed(t, cl, "faults", "f", 0, 500, 1024, base)
	before := tiered(t, cl, "faults")

	c.minio.Stop()
	produceTimed(t, cl, "faults", "f", 500, 500, 1024, base) // produce goes on
	metrics := "http://" + c.brokers[0].AdminAddr + "/metrics"
	testwait.UntilNil(t, 30*time.Second, "uploads to fail while the store is down", func() error {
		if n, err := metricValue(metrics, "strata_broker_tier_errors_total"); err != nil || n < 3 {
			return fmt.Errorf("tier errors %v, %v", n, err)
		}
		return nil
	})
	d, err := cl.DescribeTopic(ctx, "faults")
	if err != nil {
		t.Fatal(err)
	}
	if p := d.Partitions[0]; p.TieredEndOffset != before || len(p.Ledgers) < 3 {
		t.Fatalf("store down: tiered to %d (was %d), %d ledgers on the bookies; want nothing tiered or deleted", p.TieredEndOffset, before, len(p.Ledgers))
	}
	// Tail reads from the bookies go on.
	cons, err := cl.NewConsumer(client.ConsumerConfig{MaxWait: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	tp := client.TopicPartition{Topic: "faults", Partition: 0}
	qctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := cons.Assign(qctx, map[client.TopicPartition]client.Offset{tp: client.OffsetAt(before)}); err != nil {
		t.Fatal(err)
	}
	if recs, err := cons.Poll(qctx); err != nil || len(recs) == 0 || recs[0].Offset != before {
		t.Fatalf("tail read while the store is down: %d records, %v", len(recs), err)
	}

	if err := c.minio.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	hw := tiered(t, cl, "faults")
	checkRecords(t, cl, "faults", "f", hw, base)

	// Corrupt one object in place (a store that changed bytes behind our
	// back), restart the broker so nothing is cached, and read it.
	corruptObject(t, c.minio, c.objects(t)[0], func(b []byte) int { return 100 }) // inside the first batch
	mc, err := c.minio.Client()
	if err != nil {
		t.Fatal(err)
	}
	c.brokers[0].Kill()
	c.brokers[0].Restart(t)
	if err := c.brokers[0].WaitReady(qctx); err != nil {
		t.Fatal(err)
	}
	bad, err := cl.NewConsumer(client.ConsumerConfig{MaxWait: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	if err := bad.Assign(qctx, map[client.TopicPartition]client.Offset{tp: client.OffsetAt(0)}); err != nil {
		t.Fatal(err)
	}
	for {
		recs, err := bad.Poll(qctx)
		if err != nil {
			if !strings.Contains(err.Error(), "corrupt") {
				t.Fatalf("reading the corrupt object: %v, want a corruption error", err)
			}
			t.Logf("reading a corrupted object: %v", err)
			break
		}
		if len(recs) > 0 {
			t.Fatalf("records served from a corrupt object: first offset %d", recs[0].Offset)
		}
	}
	if n, err := metricValue(metrics, "strata_broker_tier_read_errors_total"); err != nil || n < 1 {
		t.Fatalf("read errors counted: %v, %v", n, err)
	}

	// The bucket is wiped: the bucket cookie is gone, so nothing more is
	// deleted (local copies of what is uploaded next stay), and reads of
	// the lost range fail clearly.
	for o := range mc.ListObjects(ctx, c.minio.Bucket, minio.ListObjectsOptions{Recursive: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		if err := mc.RemoveObject(ctx, c.minio.Bucket, o.Key, minio.RemoveObjectOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	produceTimed(t, cl, "faults", "f", int(hw), 300, 1024, base)
	testwait.UntilNil(t, 30*time.Second, "deletions to stop on a wiped bucket", func() error {
		if n, err := metricValue(metrics, "strata_broker_tier_bucket_identity_errors_total"); err != nil || n < 1 {
			return fmt.Errorf("identity errors %v, %v", n, err)
		}
		d, err := cl.DescribeTopic(ctx, "faults")
		if err != nil {
			return err
		}
		if p := d.Partitions[0]; p.TieredEndOffset <= hw {
			return fmt.Errorf("the new records are not uploaded yet (tiered to %d)", p.TieredEndOffset)
		}
		return nil
	})
	d, err = cl.DescribeTopic(ctx, "faults")
	if err != nil {
		t.Fatal(err)
	}
	var kept int
	for _, l := range d.Partitions[0].Ledgers {
		if l.Closed && l.LastOffset >= hw {
			kept++
		}
	}
	if kept == 0 {
		t.Fatalf("local copies of records uploaded after the wipe were deleted: ledgers %v", d.Partitions[0].Ledgers)
	}
	lost, err := cl.NewConsumer(client.ConsumerConfig{MaxWait: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer lost.Close()
	if err := lost.Assign(qctx, map[client.TopicPartition]client.Offset{tp: client.OffsetAt(0)}); err != nil {
		t.Fatal(err)
	}
	if _, err := lost.Poll(qctx); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("reading a range whose object is gone: %v, want a not-found error", err)
	}
	t.Logf("bucket wiped: %d local ledgers kept, reads of the lost range fail", kept)
}

// TestTieringThroughFaultyStore: the store answers 503s, hangs, and cuts
// bodies short (through internal/objfault). Every call ends at its
// deadline; uploads fail and catch up once the store heals, with nothing
// deleted meanwhile; a read whose object cannot be fetched whole is an
// error to the consumer, never wrong or missing records.
func TestTieringThroughFaultyStore(t *testing.T) {
	skipShort(t)
	m := miniotest.Start(t)
	proxy := objfault.Start(t, m.Endpoint)
	c := startTierClusterAt(t, m, proxy.Endpoint, "--tier-request-timeout", "2s", "--tier-upload-timeout", "5s")
	cl := c.client(t)
	ctx := context.Background()
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	createTopic(t, cl, "faulty", 1, map[string]string{"segment.bytes": "65536", "local.retention.ms": "0"})
	metrics := "http://" + c.brokers[0].AdminAddr + "/metrics"
	tierErrors := func() float64 {
		n, err := metricValue(metrics, "strata_broker_tier_errors_total")
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	notTiered := func(what string) {
		t.Helper()
		d, err := cl.DescribeTopic(ctx, "faulty")
		if err != nil {
			t.Fatal(err)
		}
		if p := d.Partitions[0]; p.TieredSegments != 0 || len(p.Ledgers) < 2 {
			t.Fatalf("%s: %d objects, %d ledgers; want none tiered, every ledger kept", what, p.TieredSegments, len(p.Ledgers))
		}
	}

	// Uploads answered with 503 SlowDown: they fail, nothing is deleted.
	slow := proxy.Add(objfault.Rule{Method: "PUT", Status: 503})
	produceTimed(t, cl, "faulty", "q", 0, 300, 1024, base)
	before := tierErrors()
	testwait.UntilNil(t, 30*time.Second, "uploads to fail on 503", func() error {
		if n := tierErrors(); n < before+3 {
			return fmt.Errorf("%v tier errors", n)
		}
		return nil
	})
	notTiered("503s")
	slow.Remove()

	// Uploads that hang: each ends at --tier-upload-timeout.
	hang := proxy.Add(objfault.Rule{Method: "PUT", Hang: true})
	before = tierErrors()
	start := time.Now()
	testwait.UntilNil(t, 30*time.Second, "hanging uploads to end at their deadline", func() error {
		if n := tierErrors(); n < before+1 {
			return fmt.Errorf("%v tier errors", n)
		}
		return nil
	})
	t.Logf("a hanging upload ended after %s (upload timeout 5s)", time.Since(start).Round(time.Millisecond))
	notTiered("hanging uploads")
	hang.Remove()
	proxy.Release()

	hw := tiered(t, cl, "faulty") // healed: everything catches up
	checkRecords(t, cl, "faulty", "q", hw, base)

	// Reads: restart the broker so nothing is cached, then a GET that
	// hangs, a body cut short, a 500: the broker answers each fetch within
	// its bounds with a retryable error, so the consumer gets no record
	// (never a wrong one) and carries on by itself once the store heals.
	rctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	tp := client.TopicPartition{Topic: "faulty", Partition: 0}
	unavailable := func() float64 {
		n, _ := metricValue(metrics, "strata_broker_tier_read_errors_total")
		return n
	}
	for _, fault := range []objfault.Rule{
		{Method: "GET", KeyContains: ".seg", Hang: true},
		{Method: "GET", KeyContains: ".seg", TruncateBody: 100},
		{Method: "GET", KeyContains: ".seg", Status: 500},
	} {
		c.brokers[0].Kill() // an empty chunk cache
		c.brokers[0].Restart(t)
		if err := c.brokers[0].WaitReady(rctx); err != nil {
			t.Fatal(err)
		}
		h := proxy.Add(fault)
		errsBefore := unavailable()
		cons, err := cl.NewConsumer(client.ConsumerConfig{MaxWait: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if err := cons.Assign(rctx, map[client.TopicPartition]client.Offset{tp: client.OffsetAt(0)}); err != nil {
			t.Fatal(err)
		}
		pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
		recs, err := cons.Poll(pctx)
		pcancel()
		if len(recs) > 0 || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%+v: %d records, %v; want none while the store fails", fault, len(recs), err)
		}
		if unavailable() <= errsBefore {
			t.Fatalf("%+v: no failed read counted", fault)
		}
		h.Remove()
		proxy.Release()
		pctx, pcancel = context.WithTimeout(ctx, 30*time.Second)
		recs, err = cons.Poll(pctx)
		pcancel()
		if err != nil || len(recs) == 0 || recs[0].Offset != 0 || !bytes.HasPrefix(recs[0].Value, []byte("q0:")) {
			t.Fatalf("%+v healed: %d records, %v", fault, len(recs), err)
		}
		cons.Close()
		t.Logf("%+v: no record while it lasted, the consumer resumed by itself", fault)
	}
	checkRecords(t, cl, "faulty", "q", hw, base) // healed: read back exactly
}

// TestTieringStaleOwner: the owner pauses (SIGSTOP, at its failpoint) right
// after uploading an object and before committing it; the other broker
// takes the partition over and tiers it itself; when the zombie resumes,
// its commit fails on the list's version (T7), its object never becomes
// readable and is deleted, and the log reads back exactly.
func TestTieringStaleOwner(t *testing.T) {
	skipShort(t)
	m := miniotest.Start(t)
	t.Setenv("AWS_ACCESS_KEY_ID", m.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", m.SecretKey)
	url := fmt.Sprintf("s3://%s/tiertest?endpoint=%s&insecure=true", m.Bucket, m.Endpoint)
	args := []string{"--tier-store", url, "--tier-segment-bytes", "4194304", "--tier-max-delay", "1s",
		"--tier-check-interval", "200ms", "--tier-orphan-grace", "2s", "--tier-delete-delay", "1s", "--tier-cookie-check-interval", "100ms",
		"--idle-roll", "1s"}
	c := &strataCluster{meta: proctest.StartMetad(t, bins["metad"], 3)}
	for i := 1; i <= 3; i++ {
		c.bookies = append(c.bookies, proctest.StartBookie(t, bins["bookie"], c.meta, fmt.Sprintf("b%d", i)))
	}
	// Only the first broker pauses at the failpoint; it is alone when the
	// topic is created, so it owns the partition.
	t.Setenv(failpoint.EnvVar, "tier.after_upload=stop")
	zombie := proctest.StartBroker(t, bins["broker"], c.meta, "k1", args...)
	c.brokers = append(c.brokers, zombie)
	cl := c.client(t)
	ctx := context.Background()
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	createTopic(t, cl, "zombie", 1, map[string]string{"segment.bytes": "65536", "local.retention.ms": "0"})
	t.Setenv(failpoint.EnvVar, "")
	other := proctest.StartBroker(t, bins["broker"], c.meta, "k2", args...)
	c.brokers = append(c.brokers, other)
	cl = c.client(t) // bootstrapped from both: the first one will hang

	produceTimed(t, cl, "zombie", "z", 0, 200, 1024, base)
	testwait.UntilNil(t, 30*time.Second, "the owner to pause after its upload", func() error {
		if state := procState(zombie.Pid()); state != "T" {
			return fmt.Errorf("state %q", state)
		}
		return nil
	})
	testwait.UntilNil(t, 30*time.Second, "the other broker to serve the partition", func() error {
		octx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		owner, err := ownerOf(octx, cl, "zombie", 0)
		if err != nil || owner != other.Listen {
			return fmt.Errorf("owner %q, %v", owner, err)
		}
		return nil
	})
	hw := tiered(t, cl, "zombie") // tiered again by the new owner
	zombie.Resume()
	// The zombie's commit fails; the list names only the new owner's
	// objects, and the store ends up holding exactly those.
	testwait.UntilNil(t, 30*time.Second, "only committed objects in the store", func() error {
		pl := storedPartitionLog(t, c, "zombie")
		named := map[string]bool{}
		for i, s := range pl.Tiered {
			named[s.ObjectKey] = true
			if i > 0 && s.BaseOffset != pl.Tiered[i-1].LastOffset+1 {
				return fmt.Errorf("objects %d and %d are not contiguous", i-1, i)
			}
		}
		mc, err := m.Client()
		if err != nil {
			return err
		}
		for o := range mc.ListObjects(ctx, m.Bucket, minio.ListObjectsOptions{Prefix: "tiertest/", Recursive: true}) {
			if o.Err != nil {
				return o.Err
			}
			// The store URL's prefix is not part of the recorded keys.
			if key := strings.TrimPrefix(o.Key, "tiertest/"); strings.HasSuffix(key, ".seg") && !named[key] {
				return fmt.Errorf("object %s is in the store but not in the list", o.Key)
			}
		}
		return nil
	})
	// (The controller may give the partition back to the resumed broker:
	// it is a healthy member again.)
	checkRecords(t, cl, "zombie", "z", hw, base)
}

// procState is the state letter of a process (R, S, T for stopped...).
func procState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	// pid (comm) state ...: comm may hold spaces, so cut after the last ')'.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2 : i+3]
	}
	return ""
}

// corruptObject flips one bit of an object in the store (bucket-relative
// key), at the position at picks: a store that changed bytes behind
// Strata's back.
func corruptObject(t *testing.T, m *miniotest.Server, key string, at func([]byte) int) {
	t.Helper()
	rewriteObject(t, m, key, func(b []byte) { b[at(b)] ^= 0x40 })
}

// rewriteObject downloads an object (bucket-relative key), lets change
// modify its bytes, and puts them back in its place, as whoever can write
// the bucket can.
func rewriteObject(t *testing.T, m *miniotest.Server, key string, change func([]byte)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	mc, err := m.Client()
	if err != nil {
		t.Fatal(err)
	}
	obj, err := mc.GetObject(ctx, m.Bucket, key, minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	_, err = buf.ReadFrom(obj)
	obj.Close()
	if err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	change(b)
	if _, err := mc.PutObject(ctx, m.Bucket, key, bytes.NewReader(b), int64(len(b)), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestTierDiskCache: a broker with --tier-cache-dir keeps the object
// chunks it downloads on disk, within --tier-disk-cache-bytes; after a
// kill -9 and a restart (its memory cache empty) a catch-up read of the
// tiered history is served from that disk, with no GET of the objects,
// and reads every record exactly.
func TestTierDiskCache(t *testing.T) {
	skipShort(t)
	dir := t.TempDir()
	m := miniotest.Start(t)
	c := startTierClusterAt(t, m, m.Endpoint, "--tier-cache-dir", dir, "--tier-disk-cache-bytes", "268435456",
		"--tier-cache-bytes", "8388608")
	cl := c.client(t)
	createTopic(t, cl, "cached", 1, map[string]string{"segment.bytes": "1048576", "local.retention.ms": "0"})
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	const n, size = 640, 64 << 10 // 40 MiB
	produceTimed(t, cl, "cached", "c", 0, n, size, base)
	hw := tiered(t, cl, "cached")
	broker := c.brokers[0]
	metrics := "http://" + broker.AdminAddr + "/metrics"
	value := func(series string) float64 {
		t.Helper()
		v, err := metricValue(metrics, series)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	checkRecords(t, cl, "cached", "c", hw, base) // downloads, fills the disk cache
	if b := value("strata_broker_tier_disk_cache_bytes"); b < 32<<20 || b > 256<<20 {
		t.Fatalf("disk cache holds %v bytes after reading 40 MiB of objects, want them (within the bound)", b)
	}
	var files int
	if err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			files++
		}
		return err
	}); err != nil || files == 0 {
		t.Fatalf("%d files in --tier-cache-dir, %v", files, err)
	}

	// A chunk downloaded while the cache's writer was behind is not kept.
	skipped := value("strata_broker_tier_disk_cache_skipped_total")

	broker.Kill()
	broker.Restart(t)
	rctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := broker.WaitReady(rctx); err != nil {
		t.Fatal(err)
	}
	checkRecords(t, cl, "cached", "c", hw, base)
	hits, gets, got := value("strata_broker_tier_disk_cache_hits_total"), value("strata_broker_tier_remote_reads_total"),
		value("strata_broker_tier_remote_read_bytes_total")
	t.Logf("after the restart: %d files in the cache dir, %v disk-cache hits, %v GETs of objects (%v bytes); %v chunks were not cached before it",
		files, hits, gets, got, skipped)
	if hits == 0 {
		t.Fatal("the restarted broker read nothing from its disk cache")
	}
	// Each object's tail (footer and index) is read again (it is cached in
	// memory only), and the chunks the cache skipped; every other chunk
	// comes from the disk.
	if objects := len(c.objects(t)); gets > float64(objects)+skipped {
		t.Fatalf("the restarted broker made %v GETs of %d objects, %v chunks of which were not cached: the disk cache served too little", gets, objects, skipped)
	}
}
