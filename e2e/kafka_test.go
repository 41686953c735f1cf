package e2e

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-log/strata/client"
	"github.com/strata-log/strata/e2e/loadtest"
	"github.com/strata-log/strata/internal/testwait"
)

// kafkaAddrs lists the brokers' Kafka listeners.
func (c *strataCluster) kafkaAddrs() []string {
	var out []string
	for _, b := range c.brokers {
		out = append(out, b.KafkaAddr)
	}
	return out
}

// kafkaClient is a franz-go client seeded with addrs, closed by the
// test's cleanup.
func kafkaClient(t testing.TB, addrs []string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addrs...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// kafkaProducer is a franz-go client as a loadtest.Producer: records keyed
// by the load go where kgo's murmur2 partitioner puts them.
type kafkaProducer struct{ cl *kgo.Client }

func (p kafkaProducer) Produce(ctx context.Context, r *client.Record, done func(*client.Record, error)) error {
	p.cl.Produce(ctx, &kgo.Record{Topic: r.Topic, Key: r.Key, Value: r.Value}, func(kr *kgo.Record, err error) {
		out := *r
		out.Partition, out.Offset = kr.Partition, kr.Offset
		done(&out, err)
	})
	return nil
}

// Close waits for every record's answer.
func (p kafkaProducer) Close(ctx context.Context) error { return p.cl.Flush(ctx) }

// kafkaEnds are the high watermarks of topic's partitions, over Kafka.
func kafkaEnds(t testing.TB, addrs []string, topic string) map[int32]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ends, err := kadm.NewClient(kafkaClient(t, addrs)).ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		t.Fatalf("list end offsets of %s: %v", topic, err)
	}
	out := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out
}

// kafkaReadAll reads every partition of topic over Kafka from offset 0 to
// its high watermark at the time of the call.
func kafkaReadAll(t testing.TB, addrs []string, topic string) map[int32][]*kgo.Record {
	t.Helper()
	ends := kafkaEnds(t, addrs, topic)
	assign := map[int32]kgo.Offset{}
	for p, end := range ends {
		if end > 0 {
			assign[p] = kgo.NewOffset().At(0)
		}
	}
	out := map[int32][]*kgo.Record{}
	if len(assign) == 0 {
		return out
	}
	cl := kafkaClient(t, addrs, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: assign}))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	for !loadtest.Reached(ends, out, func(r *kgo.Record) int64 { return r.Offset }) {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("consume %s over Kafka: %v (have %v of ends %v)", topic, err, loadtest.Counts(clientLog(out)), ends)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset < ends[r.Partition] {
				out[r.Partition] = append(out[r.Partition], r)
			}
		})
	}
	return out
}

// clientLog is a log read over Kafka as Strata client records.
func clientLog(log map[int32][]*kgo.Record) map[int32][]*client.Record {
	out := map[int32][]*client.Record{}
	for p, recs := range log {
		for _, r := range recs {
			cr := &client.Record{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value, Timestamp: r.Timestamp}
			for _, h := range r.Headers {
				cr.Headers = append(cr.Headers, client.Header{Key: h.Key, Value: h.Value})
			}
			out[p] = append(out[p], cr)
		}
	}
	return out
}

// kafkaFollower is a franz-go consumer of assigned partitions (no group)
// that keeps every record it reads, and everything that would betray an
// offset reset: the requests it sent by API key (a reset lists offsets;
// a validation after a leader change asks OffsetForLeaderEpoch), errors
// in its fetches (ErrDataLoss among them) and the client's warnings about
// out-of-range offsets.
type kafkaFollower struct {
	cl       *kgo.Client
	requests [128]atomic.Int64
	cancel   context.CancelFunc
	done     chan struct{}

	mu       sync.Mutex
	records  []*kgo.Record
	errs     []error
	warnings []string
}

func (f *kafkaFollower) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if err == nil && key >= 0 && int(key) < len(f.requests) {
		f.requests[key].Add(1)
	}
}

func (f *kafkaFollower) Level() kgo.LogLevel { return kgo.LogLevelWarn }

func (f *kafkaFollower) Log(_ kgo.LogLevel, msg string, keyvals ...any) {
	if strings.Contains(msg, "OFFSET_OUT_OF_RANGE") {
		f.mu.Lock()
		f.warnings = append(f.warnings, fmt.Sprint(append([]any{msg}, keyvals...)...))
		f.mu.Unlock()
	}
}

// followKafka starts a kafkaFollower of topic's partitions from offset 0;
// a reset would start again from the log start.
func followKafka(t *testing.T, addrs []string, topic string, partitions ...int32) *kafkaFollower {
	t.Helper()
	f := &kafkaFollower{done: make(chan struct{})}
	assign := map[int32]kgo.Offset{}
	for _, p := range partitions {
		assign[p] = kgo.NewOffset().At(0)
	}
	f.cl = kafkaClient(t, addrs, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: assign}),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(500*time.Millisecond),
		kgo.WithHooks(f), kgo.WithLogger(f))
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	go func() {
		defer close(f.done)
		for ctx.Err() == nil {
			fs := f.cl.PollFetches(ctx)
			f.mu.Lock()
			fs.EachError(func(topic string, p int32, err error) {
				if ctx.Err() == nil {
					f.errs = append(f.errs, fmt.Errorf("%s/%d: %w", topic, p, err))
				}
			})
			f.records = append(f.records, fs.Records()...)
			f.mu.Unlock()
		}
	}()
	t.Cleanup(f.stop)
	return f
}

func (f *kafkaFollower) stop() {
	f.cancel()
	<-f.done
}

// read returns the records read so far of partition p.
func (f *kafkaFollower) read(p int32) []*kgo.Record {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*kgo.Record
	for _, r := range f.records {
		if r.Partition == p {
			out = append(out, r)
		}
	}
	return out
}

// TestKafkaBrokerKill: a franz-go producer with its defaults (idempotent,
// acks=all) writes keyed records to a 4-partition topic while the broker
// owning partition 0 is killed with SIGKILL and later restarted, and a
// franz-go consumer of partition 0 (assigned, no group) reads on across
// the failover. No record fails; every acknowledged record is read back
// over Kafka exactly once, at its acknowledged offset, in per-key order;
// the consumer read partition 0 exactly once in offset order, validated
// its position with OffsetForLeaderEpoch after the leader changed and
// never listed offsets (which any reset would), nor saw data loss or an
// out-of-range offset.
func TestKafkaBrokerKill(t *testing.T) {
	skipShort(t)
	c := startStrata(t, 2)
	cl := c.client(t)
	ctx := context.Background()
	createTopic(t, cl, "kafka-orders", 4, nil)
	follower := followKafka(t, c.kafkaAddrs(), "kafka-orders", 0)
	producer := kafkaClient(t, c.kafkaAddrs(), kgo.StopProducerOnDataLossDetected())
	load := loadtest.StartWith(t, kafkaProducer{producer}, loadtest.Config{Topic: "kafka-orders", Keys: 20, Rate: 400})
	load.AwaitAcks(t, 300, "the load before the kill")
	testwait.Until(t, 30*time.Second, "the consumer reading partition 0", func() bool { return len(follower.read(0)) > 0 })

	owner, err := ownerOf(ctx, cl, "kafka-orders", 0)
	if err != nil {
		t.Fatal(err)
	}
	victim := c.brokerAt(owner)
	victim.Kill()
	killed := time.Now()
	atKill := acksOn(load.Acks(), 0)
	t.Logf("killed %s (owner of kafka-orders/0) with %d records of partition 0 acknowledged", victim.ID, atKill)
	testwait.UntilNil(t, 60*time.Second, "partition 0 acknowledging over Kafka again", func() error {
		if n := acksOn(load.Acks(), 0); n < atKill+100 {
			return fmt.Errorf("%d acknowledged on partition 0 since the kill", n-atKill)
		}
		return nil
	})
	t.Logf("partition 0 acknowledging again %s after the kill", time.Since(killed).Round(time.Millisecond))

	victim.Restart(t)
	rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
	defer rcancel()
	if err := victim.WaitReady(rctx); err != nil {
		t.Fatal(err)
	}
	load.AwaitAcks(t, 300, "the load after the restart")
	acks := load.Finish(t).Acks

	log := kafkaReadAll(t, c.kafkaAddrs(), "kafka-orders")
	loadtest.CheckExactlyOnce(t, clientLog(log), acks)
	t.Logf("%d records acknowledged over Kafka, all read back exactly once at their offsets", len(acks))
	checkFollowed(t, follower, log[0])
}

// acksOn counts the acknowledgements on partition p.
func acksOn(acks []loadtest.Ack, p int32) int {
	n := 0
	for _, a := range acks {
		if a.Partition == p {
			n++
		}
	}
	return n
}

// checkFollowed waits until the follower has read all of want (partition
// 0's log) and checks it read exactly that, once each, in order, without
// a reset.
func checkFollowed(t *testing.T, f *kafkaFollower, want []*kgo.Record) {
	t.Helper()
	testwait.UntilNil(t, 60*time.Second, "the consumer reaching the end of partition 0", func() error {
		if got := len(f.read(0)); got < len(want) {
			return fmt.Errorf("read %d of %d records", got, len(want))
		}
		return nil
	})
	f.stop()
	got := f.read(0)
	for i, r := range got {
		if i >= len(want) {
			t.Fatalf("the consumer read %d records, more than the %d of the log: offset %d again?", len(got), len(want), r.Offset)
		}
		if r.Offset != int64(i) || r.Offset != want[i].Offset || string(r.Value) != string(want[i].Value) {
			t.Fatalf("the consumer's record %d: offset %d %q; the log has offset %d %q", i, r.Offset, r.Value, want[i].Offset, want[i].Value)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.errs) > 0 || len(f.warnings) > 0 {
		t.Fatalf("the consumer saw errors %v and warnings %v", f.errs, f.warnings)
	}
	lists, validations := f.requests[2].Load(), f.requests[23].Load()
	if lists != 0 {
		t.Errorf("the consumer sent %d ListOffsets requests: its position was reset", lists)
	}
	if validations == 0 {
		t.Error("the consumer never validated its position with OffsetForLeaderEpoch after the leader changed")
	}
	t.Logf("the consumer read partition 0's %d records once each, in order; %d OffsetForLeaderEpoch requests, no ListOffsets", len(got), validations)
}

// cliJSON runs the strata CLI against c with --output json and returns its
// standard output.
func cliJSON(t *testing.T, c *strataCluster, stdin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bins["strata"], append(append([]string{"--broker", c.brokers[0].Listen,
		"--metad", strings.Join(c.meta.Endpoints(), ","), "--timeout", "20s"}, args...), "--output", "json")...)
	cmd.Env = append(cmd.Environ(), "STRATA_PROFILE="+filepath.Join(t.TempDir(), "none.json"), "STRATA_BROKER=", "STRATA_METAD=")
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("strata %v: %v\n%s", args, err, stderr.String())
	}
	return stdout.String()
}

// cliRecord is a record as `strata consume --output json` prints it.
type cliRecord struct {
	Topic       string  `json:"topic"`
	Partition   int32   `json:"partition"`
	Offset      int64   `json:"offset"`
	Timestamp   int64   `json:"timestamp"`
	Key         *string `json:"key"`
	KeyBase64   bool    `json:"key_base64"`
	Value       *string `json:"value"`
	ValueBase64 bool    `json:"value_base64"`
	Headers     []struct {
		Key         string  `json:"key"`
		Value       *string `json:"value"`
		ValueBase64 bool    `json:"value_base64"`
	} `json:"headers"`
}

// cliTopic is what `strata topic describe --output json` prints (the
// fields checked here).
type cliTopic struct {
	Name       string `json:"name"`
	ID         string `json:"id"`
	Count      int32  `json:"partition_count"`
	Partitions []struct {
		Partition       int32       `json:"partition"`
		OwnerID         string      `json:"owner_id"`
		HighWatermark   int64       `json:"high_watermark"`
		TieredSegments  int32       `json:"tiered_segments"`
		TieredEndOffset int64       `json:"tiered_end_offset"`
		Ledgers         []cliLedger `json:"ledgers"`
	} `json:"partitions"`
	Configs []cliConfig `json:"configs"`
}

type cliLedger struct {
	Closed bool `json:"closed"`
}

type cliConfig struct {
	Name    string `json:"name"`
	Value   string `json:"value"`
	Default bool   `json:"default"`
}

// cliRecords is `strata consume --output json`'s records.
func cliRecords(t *testing.T, out string) []cliRecord {
	t.Helper()
	var recs []cliRecord
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var r cliRecord
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("strata consume line %q: %v", line, err)
		}
		recs = append(recs, r)
	}
	return recs
}

// sameRecord compares a record read over Kafka with one `strata consume`
// printed: partition, offset, timestamp, key, value (null or not) and
// headers in order.
func sameRecord(k *kgo.Record, j cliRecord) error {
	str := func(b []byte) *string {
		if b == nil {
			return nil
		}
		s := string(b)
		return &s
	}
	eq := func(a, b *string) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }
	ok := k.Topic == j.Topic && k.Partition == j.Partition && k.Offset == j.Offset && k.Timestamp.UnixMilli() == j.Timestamp &&
		eq(str(k.Key), j.Key) && eq(str(k.Value), j.Value) && len(k.Headers) == len(j.Headers) && !j.KeyBase64 && !j.ValueBase64
	for i := 0; ok && i < len(k.Headers); i++ {
		ok = k.Headers[i].Key == j.Headers[i].Key && eq(str(k.Headers[i].Value), j.Headers[i].Value) && !j.Headers[i].ValueBase64
	}
	if !ok {
		return fmt.Errorf("over Kafka %s/%d@%d ts %d key %q value %q headers %v; strata consume %+v",
			k.Topic, k.Partition, k.Offset, k.Timestamp.UnixMilli(), k.Key, k.Value, k.Headers, j)
	}
	return nil
}

// TestKafkaCLI: a topic created over Kafka (kadm) is described by `strata
// topic describe` with its partitions, id and configs; records produced
// over Kafka (keys, a tombstone, headers with a null value, set
// timestamps) are printed by `strata consume --output json` with the same
// partition, offset, timestamp, key, value and headers, and records
// produced by `strata produce` are read over Kafka the same as `strata
// consume` prints them.
func TestKafkaCLI(t *testing.T) {
	skipShort(t)
	c := startStrata(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	kc := kafkaClient(t, c.kafkaAddrs(), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	created, err := kadm.NewClient(kc).CreateTopic(ctx, 3, -1, map[string]*string{
		"retention.ms": kmsg.StringPtr("7200000"), "max.message.bytes": kmsg.StringPtr("524288")}, "kafka-cli")
	if err == nil {
		err = created.Err
	}
	if err != nil {
		t.Fatalf("create over Kafka: %v", err)
	}
	var d cliTopic
	testwait.UntilNil(t, 20*time.Second, "every partition of kafka-cli owned", func() error {
		if err := json.Unmarshal([]byte(cliJSON(t, c, "", "topic", "describe", "kafka-cli")), &d); err != nil {
			return err
		}
		for _, p := range d.Partitions {
			if p.OwnerID == "" {
				return fmt.Errorf("partition %d has no owner", p.Partition)
			}
		}
		return nil
	})
	configs := map[string]cliConfig{}
	for _, cfg := range d.Configs {
		configs[cfg.Name] = cfg
	}
	if d.Count != 3 || len(d.Partitions) != 3 || d.ID != hex.EncodeToString(created.ID[:]) ||
		configs["retention.ms"] != (cliConfig{Name: "retention.ms", Value: "7200000"}) ||
		configs["max.message.bytes"] != (cliConfig{Name: "max.message.bytes", Value: "524288"}) ||
		!configs["cleanup.policy"].Default {
		t.Fatalf("strata topic describe: %+v; Kafka created id %x", d, created.ID)
	}

	t.Run("Kafka to strata consume", func(t *testing.T) {
		ts := time.UnixMilli(1_700_000_123_000)
		sent := []*kgo.Record{
			{Topic: "kafka-cli", Partition: 1, Key: []byte("k1"), Value: []byte("hello"), Timestamp: ts,
				Headers: []kgo.RecordHeader{{Key: "trace", Value: []byte("t-1")}, {Key: "nil", Value: nil}, {Key: "trace", Value: []byte("t-2")}}},
			{Topic: "kafka-cli", Partition: 1, Key: nil, Value: []byte("no key"), Timestamp: ts.Add(time.Second)},
			{Topic: "kafka-cli", Partition: 1, Key: []byte("k1"), Value: nil, Timestamp: ts.Add(2 * time.Second)}, // a tombstone
		}
		if err := kc.ProduceSync(ctx, sent...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		got := cliRecords(t, cliJSON(t, c, "", "consume", "kafka-cli", "-p", "1", "-e"))
		if len(got) != len(sent) {
			t.Fatalf("strata consume printed %d records, want %d", len(got), len(sent))
		}
		for i, r := range sent {
			if err := sameRecord(r, got[i]); err != nil || r.Offset != int64(i) {
				t.Fatalf("record %d: %v", i, err)
			}
		}
	})

	t.Run("strata produce to Kafka", func(t *testing.T) {
		cliJSON(t, c, "ck1:first\nck2:second\n", "produce", "kafka-cli", "-p", "0", "-K:", "-H", "origin=cli", "-H", "empty=")
		printed := cliRecords(t, cliJSON(t, c, "", "consume", "kafka-cli", "-p", "0", "-e"))
		read := kafkaReadAll(t, c.kafkaAddrs(), "kafka-cli")[0]
		if len(printed) != 2 || len(read) != 2 {
			t.Fatalf("strata consume printed %d records, Kafka read %d; want 2", len(printed), len(read))
		}
		for i, want := range []string{"ck1=first", "ck2=second"} {
			k := read[i]
			if string(k.Key)+"="+string(k.Value) != want || len(k.Headers) != 2 || k.Headers[0].Key != "origin" ||
				string(k.Headers[0].Value) != "cli" || k.Headers[1].Key != "empty" || k.Headers[1].Value == nil || len(k.Headers[1].Value) != 0 {
				t.Fatalf("record %d over Kafka: key %q value %q headers %+v; want %s with origin=cli and an empty header", i, k.Key, k.Value, k.Headers, want)
			}
			if err := sameRecord(k, printed[i]); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// TestKafkaTiered: a topic with small ledgers and local.retention.ms=0,
// written over Kafka, whose whole history moved to the object store (MinIO)
// and off the bookies, is read over Kafka from offset 0: every record, at
// its offset, with its value and timestamp (franz-go, and kcat), across
// the objects' boundary.
func TestKafkaTiered(t *testing.T) {
	skipShort(t)
	c := startTierCluster(t)
	cl := c.client(t)
	createTopic(t, cl, "kafka-tiered", 1, map[string]string{"segment.bytes": "262144", "local.retention.ms": "0"})
	const n = 3000 // about 6 MiB: two tiered objects of at most 4 MiB
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	value := func(i int64) string { return fmt.Sprintf("t%d:%s", i, strings.Repeat("x", 2048)) }
	p := kafkaClient(t, c.kafkaAddrs(), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(5*time.Millisecond),
		kgo.ProducerBatchCompression(kgo.NoCompression()))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var recs []*kgo.Record
	for i := range int64(n) {
		recs = append(recs, &kgo.Record{Topic: "kafka-tiered", Value: []byte(value(i)), Timestamp: base.Add(time.Duration(i) * time.Millisecond)})
	}
	if err := p.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if hw := tiered(t, cl, "kafka-tiered"); hw != n {
		t.Fatalf("high watermark %d, want %d", hw, n)
	}
	var d cliTopic
	if err := json.Unmarshal([]byte(cliJSON(t, c.strataCluster, "", "topic", "describe", "kafka-tiered")), &d); err != nil {
		t.Fatal(err)
	}
	if part := d.Partitions[0]; part.TieredSegments < 2 || part.TieredEndOffset != n || slices.ContainsFunc(part.Ledgers, func(l cliLedger) bool { return l.Closed }) {
		t.Fatalf("strata topic describe: %+v; want every record in tiered segments and no closed ledger left", part)
	}
	t.Logf("%d records in %d tiered segments, no closed ledger on the bookies", n, d.Partitions[0].TieredSegments)

	read := kafkaReadAll(t, c.kafkaAddrs(), "kafka-tiered")[0]
	if len(read) != n {
		t.Fatalf("read %d records over Kafka, want %d", len(read), n)
	}
	for i, r := range read {
		if r.Offset != int64(i) || string(r.Value) != value(int64(i)) || !r.Timestamp.Equal(base.Add(time.Duration(i)*time.Millisecond)) {
			t.Fatalf("record %d over Kafka: offset %d value %.12q timestamp %s", i, r.Offset, r.Value, r.Timestamp)
		}
	}
	t.Run("kcat", func(t *testing.T) {
		got := kcatConsume(t, "-b", c.brokers[0].KafkaAddr, "-t", "kafka-tiered")
		if len(got) != n {
			t.Fatalf("kcat read %d records, want %d", len(got), n)
		}
		for i, r := range got {
			if r.Offset != int64(i) || r.Payload == nil || *r.Payload != value(int64(i)) || r.Ts != base.Add(time.Duration(i)*time.Millisecond).UnixMilli() {
				t.Fatalf("kcat record %d: offset %d ts %d", i, r.Offset, r.Ts)
			}
		}
	})
}
