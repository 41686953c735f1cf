package kafka_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-log/strata/broker"
	"github.com/strata-log/strata/broker/brokertest"
	"github.com/strata-log/strata/client"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// kafkaCluster is an in-process cluster whose brokers serve Kafka.
func kafkaCluster(t *testing.T, brokers int) *brokertest.Cluster {
	t.Helper()
	return brokertest.Start(t, brokertest.Options{Kafka: true, Brokers: brokers})
}

func kgoClient(t *testing.T, c *brokertest.Cluster, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.KafkaAddrs()...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// consumeAll reads n records of topic from the start with kgo.
func consumeAll(t *testing.T, c *brokertest.Cluster, topic string, n int) []*kgo.Record {
	t.Helper()
	cl := kgoClient(t, c, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	ctx := testCtx(t)
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("consuming %s: %v (after %d of %d records)", topic, err, len(out), n)
		}
		out = append(out, fs.Records()...)
	}
	return out
}

// testRecords are what every codec round-trips: keys and null keys,
// values and tombstones, headers (one with a null value), timestamps.
func testRecords(topic string) []*kgo.Record {
	base := time.UnixMilli(1_700_000_000_000)
	var out []*kgo.Record
	for i := range 20 {
		r := &kgo.Record{Topic: topic, Partition: 0, Timestamp: base.Add(time.Duration(i) * time.Second),
			Value: bytes.Repeat([]byte(fmt.Sprintf("value-%d ", i)), 50)}
		if i%3 != 0 {
			r.Key = []byte(fmt.Sprintf("key-%d", i%5))
		}
		if i%7 == 6 {
			r.Value = nil // a tombstone
		}
		if i%2 == 0 {
			r.Headers = []kgo.RecordHeader{{Key: "h1", Value: []byte("x")}, {Key: "empty", Value: nil}}
		}
		out = append(out, r)
	}
	return out
}

// Every compression codec, headers, null keys and tombstones survive a
// produce and a consume over Kafka unchanged, with the timestamps the
// producer set; and the Go client reads the same records at the same
// offsets (a record produced over Kafka is a Strata record).
func TestCodecsRoundTrip(t *testing.T) {
	c := kafkaCluster(t, 1)
	codecs := map[string]kgo.CompressionCodec{"none": kgo.NoCompression(), "gzip": kgo.GzipCompression(),
		"snappy": kgo.SnappyCompression(), "lz4": kgo.Lz4Compression(), "zstd": kgo.ZstdCompression()}
	for name, codec := range codecs {
		t.Run(name, func(t *testing.T) {
			topic := "codec-" + name
			c.CreateTopic(topic, 1, nil)
			p := kgoClient(t, c, kgo.ProducerBatchCompression(codec), kgo.RecordPartitioner(kgo.ManualPartitioner()))
			want := testRecords(topic)
			if err := p.ProduceSync(testCtx(t), want...).FirstErr(); err != nil {
				t.Fatalf("produce: %v", err)
			}
			got := consumeAll(t, c, topic, len(want))
			for i, r := range got {
				w := want[i]
				if r.Offset != int64(i) || !bytes.Equal(r.Key, w.Key) || (r.Key == nil) != (w.Key == nil) ||
					!bytes.Equal(r.Value, w.Value) || (r.Value == nil) != (w.Value == nil) ||
					!r.Timestamp.Equal(w.Timestamp) || len(r.Headers) != len(w.Headers) {
					t.Fatalf("record %d: got %+v\nwant %+v", i, r, w)
				}
				for j, h := range r.Headers {
					if h.Key != w.Headers[j].Key || !bytes.Equal(h.Value, w.Headers[j].Value) {
						t.Fatalf("record %d header %d: %+v, want %+v", i, j, h, w.Headers[j])
					}
				}
			}
			checkGoClientReads(t, c, topic, want)
		})
	}
}

// checkGoClientReads reads topic/0 with Strata's Go client and compares.
func checkGoClientReads(t *testing.T, c *brokertest.Cluster, topic string, want []*kgo.Record) {
	t.Helper()
	ctx := testCtx(t)
	cl, err := client.New(ctx, client.Config{Brokers: c.Addrs()})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	cons, err := cl.NewConsumer(client.ConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	if err := cons.Assign(ctx, map[client.TopicPartition]client.Offset{{Topic: topic}: client.OffsetEarliest()}); err != nil {
		t.Fatal(err)
	}
	var got []*client.Record
	for len(got) < len(want) {
		recs, err := cons.Poll(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, recs...)
	}
	for i, r := range got {
		w := want[i]
		if r.Offset != int64(i) || !bytes.Equal(r.Key, w.Key) || (r.Key == nil) != (w.Key == nil) ||
			(r.Value == nil) != (w.Value == nil) || !bytes.Equal(r.Value, w.Value) || !r.Timestamp.Equal(w.Timestamp) ||
			len(r.Headers) != len(w.Headers) {
			t.Fatalf("Go client record %d: %+v, want %+v", i, r, w)
		}
	}
}

// A record the Go client produces is read over Kafka with the same key,
// value, headers, timestamp and offset.
func TestGoClientToKafka(t *testing.T) {
	c := kafkaCluster(t, 1)
	c.CreateTopic("from-grpc", 1, nil)
	ctx := testCtx(t)
	cl, err := client.New(ctx, client.Config{Brokers: c.Addrs()})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	p, err := cl.NewProducer(client.ProducerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	ts := time.UnixMilli(1_700_000_123_000)
	sent := []*client.Record{
		{Topic: "from-grpc", Key: []byte("k"), Value: []byte("v"), Timestamp: ts, Headers: []client.Header{{Key: "a", Value: []byte("b")}}},
		{Topic: "from-grpc", Key: nil, Value: nil, Timestamp: ts.Add(time.Second)},
	}
	for _, r := range sent {
		if _, err := p.ProduceSync(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	got := consumeAll(t, c, "from-grpc", 2)
	for i, r := range got {
		s := sent[i]
		if r.Offset != int64(i) || !bytes.Equal(r.Key, s.Key) || (r.Key == nil) != (s.Key == nil) || !bytes.Equal(r.Value, s.Value) ||
			(r.Value == nil) != (s.Value == nil) || !r.Timestamp.Equal(s.Timestamp) || len(r.Headers) != len(s.Headers) {
			t.Fatalf("record %d over Kafka: %+v, want %+v", i, r, s)
		}
	}
}

// rawRequest sends req at its own version (kgo would raise it to the
// highest both sides know) on a new connection to addr and decodes the
// answer.
func rawRequest[R kmsg.Response](t *testing.T, addr string, req kmsg.Request) R {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(30 * time.Second))
	frame := kmsg.NewRequestFormatter(kmsg.FormatterClientID("raw-test")).AppendRequest(nil, req, 7)
	if _, err := nc.Write(frame); err != nil {
		t.Fatal(err)
	}
	var size [4]byte
	if _, err := io.ReadFull(nc, size[:]); err != nil {
		t.Fatalf("%s v%d: %v", kmsg.NameForKey(req.Key()), req.GetVersion(), err)
	}
	b := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(nc, b); err != nil {
		t.Fatal(err)
	}
	b = b[4:] // correlation id
	resp := req.ResponseKind()
	if resp.IsFlexible() && req.Key() != 18 {
		b = b[1:] // the response header's empty tag section
	}
	if err := resp.ReadFrom(b); err != nil {
		t.Fatalf("decoding %s v%d: %v", kmsg.NameForKey(req.Key()), req.GetVersion(), err)
	}
	return resp.(R)
}

// MESSAGE_TOO_LARGE for a batch over max.message.bytes; OFFSET_OUT_OF_RANGE
// for a fetch past the high watermark, with the bounds; a fetch at the
// high watermark is an empty, non-null record set.
func TestProduceAndFetchErrors(t *testing.T) {
	c := kafkaCluster(t, 1)
	c.CreateTopic("small", 1, map[string]string{"max.message.bytes": "2048"})
	p := kgoClient(t, c, kgo.ProducerBatchMaxBytes(1<<20), kgo.RecordRetries(0))
	big := make([]byte, 8192)
	rand.Read(big)
	err := p.ProduceSync(testCtx(t), &kgo.Record{Topic: "small", Value: big}).FirstErr()
	if !errors.Is(err, kerr.MessageTooLarge) {
		t.Fatalf("a batch over max.message.bytes: %v, want MESSAGE_TOO_LARGE", err)
	}
	if err := p.ProduceSync(testCtx(t), &kgo.Record{Topic: "small", Value: []byte("fits")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	fetch := func(offset int64) kmsg.FetchResponseTopicPartition {
		req := kmsg.NewPtrFetchRequest()
		req.Version, req.MaxWaitMillis, req.MaxBytes = 11, 10, 1<<20
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = "small"
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.FetchOffset, rp.PartitionMaxBytes = offset, 1<<20
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		return rawRequest[*kmsg.FetchResponse](t, c.KafkaAddrs()[0], req).Topics[0].Partitions[0]
	}
	if r := fetch(5); r.ErrorCode != kerr.OffsetOutOfRange.Code || r.HighWatermark != 1 || r.LogStartOffset != 0 {
		t.Fatalf("fetch past the end: code %d hw %d start %d", r.ErrorCode, r.HighWatermark, r.LogStartOffset)
	}
	if r := fetch(1); r.ErrorCode != 0 || r.RecordBatches == nil || len(r.RecordBatches) != 0 || r.LastStableOffset != 1 {
		t.Fatalf("fetch at the end: %+v", r)
	}
	if r := fetch(0); r.ErrorCode != 0 || len(r.RecordBatches) == 0 || r.HighWatermark != 1 {
		t.Fatalf("fetch from 0: code %d, %d bytes", r.ErrorCode, len(r.RecordBatches))
	}
}

// ListOffsets by time answers what the gRPC API answers (the first
// record at or after the time), across partitions; latest, earliest and
// max timestamp are the high watermark, the log start and the newest
// record.
func TestListOffsetsMatchesGRPC(t *testing.T) {
	c := kafkaCluster(t, 1)
	c.CreateTopic("times", 1, nil)
	p := kgoClient(t, c, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	recs := testRecords("times")
	// The newest timestamp in the middle: max timestamp is not the last.
	recs[10].Timestamp = recs[19].Timestamp.Add(time.Hour)
	if err := p.ProduceSync(testCtx(t), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	gc, err := client.New(ctx, client.Config{Brokers: c.Addrs()})
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	list := func(version int16, ts int64) kmsg.ListOffsetsResponseTopicPartition {
		req := kmsg.NewPtrListOffsetsRequest()
		req.Version = version
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = "times"
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Timestamp, rp.MaxNumOffsets = ts, 1
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		return rawRequest[*kmsg.ListOffsetsResponse](t, c.KafkaAddrs()[0], req).Topics[0].Partitions[0]
	}
	for _, ts := range []int64{0, recs[4].Timestamp.UnixMilli(), recs[4].Timestamp.UnixMilli() + 1, recs[19].Timestamp.UnixMilli()} {
		k := list(8, ts)
		g, err := gc.ListOffsets(ctx, client.TopicPartition{Topic: "times"}, ts)
		if err != nil {
			t.Fatal(err)
		}
		if k.ErrorCode != 0 || k.Offset != g.Offset || k.Timestamp != g.Timestamp {
			t.Fatalf("time %d: Kafka %d@%d (code %d), gRPC %d@%d", ts, k.Offset, k.Timestamp, k.ErrorCode, g.Offset, g.Timestamp)
		}
	}
	if k := list(8, recs[10].Timestamp.UnixMilli()+1); k.Offset != -1 || k.Timestamp != -1 {
		t.Fatalf("after every record: %d@%d, want -1@-1", k.Offset, k.Timestamp)
	}
	if k := list(8, -1); k.Offset != 20 {
		t.Fatalf("latest %d, want 20", k.Offset)
	}
	if k := list(8, -2); k.Offset != 0 {
		t.Fatalf("earliest %d, want 0", k.Offset)
	}
	if k := list(8, -3); k.Offset != 10 || k.Timestamp != recs[10].Timestamp.UnixMilli() {
		t.Fatalf("max timestamp %d@%d, want 10@%d", k.Offset, k.Timestamp, recs[10].Timestamp.UnixMilli())
	}
	if k := list(6, -3); k.ErrorCode != kerr.UnsupportedVersion.Code {
		t.Fatalf("max timestamp at v6: code %d, want UNSUPPORTED_VERSION", k.ErrorCode)
	}
	if k := list(0, -1); !slices.Equal(k.OldStyleOffsets, []int64{20}) {
		t.Fatalf("v0 latest: %v", k.OldStyleOffsets)
	}
}

// KIP-320: a fetch or list-offsets naming an older owner epoch than the
// partition's is FENCED_LEADER_EPOCH, a newer one UNKNOWN_LEADER_EPOCH,
// the current one is served; a transactional produce is refused with a
// message.
func TestLeaderEpochChecks(t *testing.T) {
	c := kafkaCluster(t, 1)
	c.CreateTopic("epochs", 1, nil)
	md := rawRequest[*kmsg.MetadataResponse](t, c.KafkaAddrs()[0], func() kmsg.Request {
		req := kmsg.NewPtrMetadataRequest()
		req.Version = 12
		name := "epochs"
		req.Topics = []kmsg.MetadataRequestTopic{{Topic: &name}}
		return req
	}())
	epoch := md.Topics[0].Partitions[0].LeaderEpoch
	if epoch < 1 {
		t.Fatalf("leader epoch %d", epoch)
	}
	fetch := func(e int32) int16 {
		req := kmsg.NewPtrFetchRequest()
		req.Version, req.MaxWaitMillis = 12, 1
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = "epochs"
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.CurrentLeaderEpoch, rp.PartitionMaxBytes = e, 1<<20
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		return rawRequest[*kmsg.FetchResponse](t, c.KafkaAddrs()[0], req).Topics[0].Partitions[0].ErrorCode
	}
	for _, tc := range []struct {
		epoch int32
		want  int16
	}{{epoch, 0}, {-1, 0}, {epoch - 1, kerr.FencedLeaderEpoch.Code}, {epoch + 1, kerr.UnknownLeaderEpoch.Code}} {
		if got := fetch(tc.epoch); got != tc.want {
			t.Errorf("fetch at epoch %d (current %d): code %d, want %d", tc.epoch, epoch, got, tc.want)
		}
	}
	req := kmsg.NewPtrProduceRequest()
	req.Version, req.Acks, req.TimeoutMillis = 9, -1, 5000
	txn := "txn-1"
	req.TransactionID = &txn
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = "epochs"
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = make([]byte, 70)
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	pr := rawRequest[*kmsg.ProduceResponse](t, c.KafkaAddrs()[0], req).Topics[0].Partitions[0]
	if pr.ErrorCode != kerr.InvalidRequest.Code || pr.ErrorMessage == nil {
		t.Fatalf("a transactional produce: code %d message %v", pr.ErrorCode, pr.ErrorMessage)
	}
}

// With --kafka-auto-create-topics a producer's Metadata request creates
// the topic (answered LEADER_NOT_AVAILABLE first, then served); without
// it the topic stays unknown.
func TestAutoCreateTopics(t *testing.T) {
	on := brokertest.Start(t, brokertest.Options{Kafka: true, Configure: func(_ int, cfg *broker.Config) {
		cfg.KafkaAutoCreateTopics, cfg.KafkaDefaultPartitions = true, 3
	}})
	p := kgoClient(t, on, kgo.AllowAutoTopicCreation())
	if err := p.ProduceSync(testCtx(t), &kgo.Record{Topic: "made-on-demand", Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatalf("produce to an auto-created topic: %v", err)
	}
	adm := kadm.NewClient(p)
	md, err := adm.Metadata(testCtx(t), "made-on-demand")
	if err != nil || len(md.Topics["made-on-demand"].Partitions) != 3 {
		t.Fatalf("auto-created topic: %+v %v", md.Topics["made-on-demand"], err)
	}
	off := kafkaCluster(t, 1)
	q := kgoClient(t, off, kgo.AllowAutoTopicCreation(), kgo.RecordDeliveryTimeout(2*time.Second))
	if err := q.ProduceSync(testCtx(t), &kgo.Record{Topic: "never-made", Value: []byte("x")}).FirstErr(); err == nil {
		t.Fatal("a produce created a topic with auto-creation off")
	}
}
