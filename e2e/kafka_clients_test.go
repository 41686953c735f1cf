package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/strata-log/strata/client"
	"github.com/strata-log/strata/internal/pki"
	"github.com/strata-log/strata/internal/testtool"
	"github.com/strata-log/strata/internal/testwait"
	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/recordbatch"
)

// runKcat runs kcat with args, stdin as its input, and returns its
// standard output; an error carries its standard error.
func runKcat(t *testing.T, stdin string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, testtool.Kcat(t), args...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("kcat %v: %w\n%s", args, err, stderr.String())
	}
	return stdout.String(), nil
}

func mustKcat(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	out, err := runKcat(t, stdin, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// kcatMetadata is `kcat -L -J`'s answer.
type kcatMetadata struct {
	ControllerID int32 `json:"controllerid"`
	Brokers      []struct {
		ID   int32  `json:"id"`
		Name string `json:"name"`
	} `json:"brokers"`
	Topics []kcatTopic `json:"topics"`
}

type kcatTopic struct {
	Topic      string `json:"topic"`
	Partitions []struct {
		Partition int32                `json:"partition"`
		Leader    int32                `json:"leader"`
		Replicas  []struct{ ID int32 } `json:"replicas"`
		ISRs      []struct{ ID int32 } `json:"isrs"`
	} `json:"partitions"`
}

// kcatRecord is one record of `kcat -C -J`.
type kcatRecord struct {
	Topic     string   `json:"topic"`
	Partition int32    `json:"partition"`
	Offset    int64    `json:"offset"`
	TsType    string   `json:"tstype"`
	Ts        int64    `json:"ts"`
	Headers   []string `json:"headers"` // name, value, name, value...
	Key       *string  `json:"key"`
	Payload   *string  `json:"payload"`
}

// kcatConsume reads topic from the beginning to its end with kcat -J.
func kcatConsume(t *testing.T, args ...string) []kcatRecord {
	t.Helper()
	out := mustKcat(t, "", append([]string{"-C", "-e", "-o", "beginning", "-J", "-q"}, args...)...)
	var recs []kcatRecord
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		var r kcatRecord
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("kcat -C -J line %q: %v", line, err)
		}
		recs = append(recs, r)
	}
	return recs
}

// grpcMetadata is the broker's own Metadata answer over gRPC.
func grpcMetadata(t *testing.T, addr string, topics ...string) *brokerpb.MetadataResponse {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	md, err := brokerpb.NewBrokerClient(conn).Metadata(ctx, &brokerpb.MetadataRequest{Topics: topics})
	if err != nil {
		t.Fatal(err)
	}
	return md
}

// TestKafkaKcat drives kcat (librdkafka) against two brokers: -L lists
// both with the node ids and Kafka addresses the brokers registered and
// each partition led by its owner's node; -P with -K: keys and -H headers
// through every -z codec, read back by -C (with -K: and -J) unchanged, at
// the offsets and timestamps franz-go reads, and stored in batches of
// that codec; -Q (offsets for times) answers what the gRPC ListOffsets
// answers.
func TestKafkaKcat(t *testing.T) {
	skipShort(t)
	testtool.Kcat(t)
	c := startStrata(t, 2)
	cl := c.client(t)
	createTopic(t, cl, "kcat-codecs", 4, nil)
	bootstrap := strings.Join(c.kafkaAddrs(), ",")

	t.Run("metadata", func(t *testing.T) {
		testwait.UntilNil(t, 20*time.Second, "kcat -L to agree with the gRPC metadata", func() error {
			return kcatAgrees(t, bootstrap, c.brokers[0].Listen, "kcat-codecs")
		})
	})

	codecs := []string{"gzip", "snappy", "lz4", "zstd"}
	t.Run("codecs", func(t *testing.T) {
		for i, codec := range codecs {
			var in strings.Builder
			for j := range 20 {
				fmt.Fprintf(&in, "key-%d:%s\n", j, strings.Repeat(fmt.Sprintf("%s value %d ", codec, j), 40))
			}
			mustKcat(t, in.String(), "-b", bootstrap, "-P", "-t", "kcat-codecs", "-p", strconv.Itoa(i), "-K:",
				"-H", "trace=abc-123", "-H", "codec="+codec, "-z", codec)
		}
		recs := kcatConsume(t, "-b", bootstrap, "-t", "kcat-codecs")
		byKafka := kafkaReadAll(t, c.kafkaAddrs(), "kcat-codecs")
		if len(recs) != 4*20 {
			t.Fatalf("kcat read %d records, want 80", len(recs))
		}
		for _, r := range recs {
			codec, j := codecs[r.Partition], int(r.Offset)
			wantValue := strings.Repeat(fmt.Sprintf("%s value %d ", codec, j), 40)
			if r.Key == nil || *r.Key != "key-"+strconv.Itoa(j) || r.Payload == nil || *r.Payload != wantValue ||
				!slices.Equal(r.Headers, []string{"trace", "abc-123", "codec", codec}) || r.TsType != "create" {
				t.Fatalf("kcat read %+v, want key-%d, its value and the headers", r, j)
			}
			k := byKafka[r.Partition][r.Offset]
			if k.Offset != r.Offset || string(k.Key) != *r.Key || string(k.Value) != *r.Payload || k.Timestamp.UnixMilli() != r.Ts {
				t.Fatalf("partition %d offset %d: kcat read %q@%d, franz-go %q@%d (offset %d)", r.Partition, r.Offset, *r.Key, r.Ts, k.Key, k.Timestamp.UnixMilli(), k.Offset)
			}
		}
		// -C -K: prints key:value in offset order.
		out := mustKcat(t, "", "-b", bootstrap, "-C", "-e", "-q", "-o", "beginning", "-t", "kcat-codecs", "-p", "2", "-K:")
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		if len(lines) != 20 || lines[7] != "key-7:"+strings.Repeat("lz4 value 7 ", 40) {
			t.Fatalf("kcat -C -K: printed %d lines, the eighth %.40q", len(lines), lines[min(7, len(lines)-1)])
		}
		reader := kafkaClient(t, c.kafkaAddrs(), kgo.ConsumeTopics("kcat-codecs"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		stored := batchCodecs(t, reader, len(recs))
		// librdkafka before 2.11 ties LZ4 to FindCoordinator v0 in its
		// feature table: without it, kcat -z lz4 sends uncompressed
		// batches.
		for p, want := range map[int32]uint8{0: 1, 1: 2, 2: 3, 3: 4} {
			if !slices.Equal(stored[p], []uint8{want}) {
				t.Errorf("partition %d (%s) is stored with codecs %v, want [%d]", p, codecs[p], stored[p], want)
			}
		}
	})

	t.Run("offsets for times", func(t *testing.T) {
		createTopic(t, cl, "kcat-times", 1, nil)
		base := time.Now().Add(-time.Hour).Truncate(time.Second)
		p := kafkaClient(t, c.kafkaAddrs(), kgo.RecordPartitioner(kgo.ManualPartitioner()))
		var recs []*kgo.Record
		for i := range 10 {
			recs = append(recs, &kgo.Record{Topic: "kcat-times", Value: []byte(strconv.Itoa(i)), Timestamp: base.Add(time.Duration(i) * time.Second)})
		}
		if err := p.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		ms := base.UnixMilli()
		for _, tc := range []struct {
			ts   int64
			want int64
		}{{0, 0}, {ms - 1000, 0}, {ms, 0}, {ms + 1, 1}, {ms + 5000, 5}, {ms + 9000, 9}, {ms + 9001, -1}} {
			var got map[string]map[string]any
			out := mustKcat(t, "", "-b", bootstrap, "-Q", "-J", "-t", fmt.Sprintf("kcat-times:0:%d", tc.ts))
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatalf("kcat -Q -J: %q: %v", out, err)
			}
			part, _ := got["kcat-times"]["0"].(map[string]any)
			kcatOffset, ok := part["offset"].(float64)
			if !ok {
				t.Fatalf("kcat -Q for %d: %s", tc.ts, out)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			g, err := cl.ListOffsets(ctx, client.TopicPartition{Topic: "kcat-times"}, tc.ts)
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			grpcOffset := g.Offset
			if g.Timestamp < 0 {
				grpcOffset = -1 // no record at or after the time
			}
			if int64(kcatOffset) != grpcOffset || grpcOffset != tc.want {
				t.Errorf("offset for time %d: kcat %v, gRPC %d (timestamp %d), want %d", tc.ts, kcatOffset, g.Offset, g.Timestamp, tc.want)
			}
		}
	})
}

// kcatAgrees compares `kcat -L` with the gRPC metadata of the broker at
// grpcAddr: the same brokers (node id, Kafka address), the controller
// among them, and topic's partitions led by their owners' nodes, with
// replicas = ISR = [leader].
func kcatAgrees(t *testing.T, bootstrap, grpcAddr, topic string) error {
	out, err := runKcat(t, "", "-b", bootstrap, "-L", "-J")
	if err != nil {
		return err
	}
	var md kcatMetadata
	if err := json.Unmarshal([]byte(out), &md); err != nil {
		return fmt.Errorf("kcat -L -J: %q: %w", out, err)
	}
	g := grpcMetadata(t, grpcAddr, topic)
	nodeOf := map[string]int32{}
	var want, got []string
	for _, b := range g.Brokers {
		nodeOf[b.Id] = b.NodeId
		want = append(want, fmt.Sprintf("%d@%s", b.NodeId, b.KafkaAddress))
	}
	for _, b := range md.Brokers {
		got = append(got, fmt.Sprintf("%d@%s", b.ID, b.Name))
	}
	slices.Sort(want)
	slices.Sort(got)
	if len(want) != 2 || !slices.Equal(got, want) || !slices.Contains(slices.Collect(maps.Values(nodeOf)), md.ControllerID) {
		return fmt.Errorf("kcat lists brokers %v (controller %d); the brokers registered %v", got, md.ControllerID, want)
	}
	i := slices.IndexFunc(md.Topics, func(tm kcatTopic) bool { return tm.Topic == topic })
	if i < 0 || len(md.Topics[i].Partitions) != len(g.Topics[0].Partitions) {
		return fmt.Errorf("kcat -L: topic %s missing or with another partition count: %s", topic, out)
	}
	for _, p := range md.Topics[i].Partitions {
		owner := nodeOf[g.Topics[0].Partitions[p.Partition].OwnerId]
		if p.Leader != owner || len(p.Replicas) != 1 || p.Replicas[0].ID != owner || len(p.ISRs) != 1 || p.ISRs[0].ID != owner {
			return fmt.Errorf("partition %d: kcat shows leader %d replicas %v isrs %v; its owner is node %d", p.Partition, p.Leader, p.Replicas, p.ISRs, owner)
		}
	}
	return nil
}

// batchCodecs reads n records of topic with franz-go and returns the
// compression codecs (Kafka's attribute numbers) of each partition's
// batches.
func batchCodecs(t *testing.T, cl *kgo.Client, n int) map[int32][]uint8 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out := map[int32][]uint8{}
	for seen := 0; seen < n; {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatal(err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			seen++
			if c := r.Attrs.CompressionType(); !slices.Contains(out[r.Partition], c) {
				out[r.Partition] = append(out[r.Partition], c)
			}
		})
	}
	return out
}

// TestKafkaKcatSASL runs a TLS cluster, whose Kafka listener speaks TLS
// and requires authentication: a user made by `strata user create` (and
// allowed the topic by `strata acl add`) produces with kcat over SASL_SSL
// with SCRAM-SHA-256 and reads back with SCRAM-SHA-512, and -L lists the
// topic; a client without SASL (TLS only, no certificate) and one with a
// wrong password are refused, and the broker counts both.
func TestKafkaKcatSASL(t *testing.T) {
	skipShort(t)
	testtool.Kcat(t)
	c := startTLSCluster(t)
	admin := c.pki.issue(pki.Request{Role: pki.RoleAdmin, Name: "root"})
	asAdmin := aclCLI{t: t, c: c, files: admin}
	asAdmin.must("kafka-secret\n", "user", "create", "kuser", "--password-stdin")
	asAdmin.must("", "acl", "add", "--allow", "--principal", "User:kuser", "--operation", "all", "--topic", "sasl-", "--prefixed")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := c.client(ctx, t, admin)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	createTopic(t, cl, "sasl-orders", 1, nil)
	tlsOnly := []string{"-b", c.broker.KafkaAddr, "-X", "security.protocol=SSL", "-X", "ssl.ca.location=" + c.pki.caFile}
	scram := func(mechanism, password string) []string {
		return []string{"-b", c.broker.KafkaAddr, "-X", "security.protocol=SASL_SSL", "-X", "ssl.ca.location=" + c.pki.caFile,
			"-X", "sasl.mechanisms=" + mechanism, "-X", "sasl.username=kuser", "-X", "sasl.password=" + password}
	}

	t.Run("SCRAM", func(t *testing.T) {
		// The user reaches the brokers by watch: retry until it logs in.
		testwait.UntilNil(t, 20*time.Second, "kuser to produce over SASL_SSL with SCRAM-SHA-256", func() error {
			_, err := runKcat(t, "k1:one\nk2:two\nk3:three\n", append(scram("SCRAM-SHA-256", "kafka-secret"), "-P", "-t", "sasl-orders", "-K:", "-H", "via=scram")...)
			return err
		})
		recs := kcatConsume(t, append(scram("SCRAM-SHA-512", "kafka-secret"), "-t", "sasl-orders")...)
		var got []string
		for _, r := range recs {
			got = append(got, fmt.Sprintf("%d %s:%s %v", r.Offset, deref(r.Key), deref(r.Payload), r.Headers))
		}
		want := []string{"0 k1:one [via scram]", "1 k2:two [via scram]", "2 k3:three [via scram]"}
		if !slices.Equal(got, want) {
			t.Fatalf("read back over SCRAM-SHA-512: %q, want %q", got, want)
		}
		var md kcatMetadata
		if err := json.Unmarshal([]byte(mustKcat(t, "", append(scram("SCRAM-SHA-512", "kafka-secret"), "-L", "-J")...)), &md); err != nil {
			t.Fatal(err)
		}
		if len(md.Brokers) != 1 || md.Brokers[0].Name != c.broker.KafkaAddr || !slices.ContainsFunc(md.Topics, func(tm kcatTopic) bool { return tm.Topic == "sasl-orders" }) {
			t.Fatalf("kcat -L as kuser: %+v", md)
		}
	})

	t.Run("refused", func(t *testing.T) {
		unauthenticated := func() float64 {
			v, _ := c.metricValue(c.broker.AdminAddr, `strata_broker_kafka_connections_closed_total{reason="unauthenticated_request"}`)
			return v
		}
		before := unauthenticated()
		if out, err := runKcat(t, "", append(tlsOnly, "-L", "-m", "3")...); err == nil {
			t.Fatalf("kcat without SASL listed metadata:\n%s", out)
		} else {
			t.Logf("without SASL: %v", err)
		}
		testwait.UntilNil(t, 10*time.Second, "the broker closing the connection that skipped SASL", func() error {
			if v := unauthenticated(); v <= before {
				return fmt.Errorf("closed for unauthenticated requests: %v, before %v", v, before)
			}
			return nil
		})
		_, err := runKcat(t, "", append(scram("SCRAM-SHA-256", "wrong-password"), "-L", "-m", "3")...)
		if err == nil || !strings.Contains(err.Error(), "Authentication failed") {
			t.Fatalf("a wrong password: %v; want kcat to report the authentication failure", err)
		}
		testwait.UntilNil(t, 10*time.Second, "the failed authentication counted", func() error {
			v, err := c.metricValue(c.broker.AdminAddr, `strata_broker_kafka_authentication_failures_total{mechanism="SCRAM-SHA-256"}`)
			if err == nil && v < 1 {
				err = fmt.Errorf("%v failures", v)
			}
			return err
		})
	})
}

func deref(s *string) string {
	if s == nil {
		return "<null>"
	}
	return *s
}

// confluentReport is what testdata/kafka_confluent.py prints.
type confluentReport struct {
	Created map[string]bool  `json:"created"`
	Leaders map[string]int32 `json:"leaders"`
	Configs map[string]struct {
		Value   *string `json:"value"`
		Source  int     `json:"source"`
		Default bool    `json:"default"`
	} `json:"configs"`
	Topics    map[string]int `json:"topics"`
	Unflushed int            `json:"unflushed"`
	Reports   []struct {
		Error     *string `json:"error"`
		Partition int32   `json:"partition"`
		Offset    int64   `json:"offset"`
		Key       string  `json:"key"`
		Value     string  `json:"value"`
	} `json:"reports"`
	Consumed []struct {
		Partition int32      `json:"partition"`
		Offset    int64      `json:"offset"`
		Key       string     `json:"key"`
		Value     string     `json:"value"`
		Timestamp int64      `json:"timestamp"`
		Headers   [][]string `json:"headers"`
	} `json:"consumed"`
	Deleted map[string]bool `json:"deleted"`
}

// TestKafkaConfluentPython runs testdata/kafka_confluent.py
// (confluent-kafka-python on librdkafka) against a broker: its admin
// client creates two topics, describes one's configs (the one set is a
// dynamic topic config, the rest defaults) and lists them, and deletes the
// other; its idempotent producer gets a delivery report with an offset
// for every record, each at the partition Strata's murmur2 partitioner
// gives its key; its consumer reads every record back by assign(), with
// key, value, header and timestamp. The Strata side agrees: the gRPC
// description has the partitions and the config, the deleted topic is
// gone, every batch carries a producer id, and franz-go reads each record
// where its delivery report put it.
func TestKafkaConfluentPython(t *testing.T) {
	skipShort(t)
	python := testtool.ConfluentKafkaPython(t)
	c := startStrata(t, 1)
	cl := c.client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, python, "testdata/kafka_confluent.py", c.brokers[0].KafkaAddr, "py-orders", "py-doomed")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kafka_confluent.py: %v\n%s", err, stderr.String())
	}
	var r confluentReport
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatalf("kafka_confluent.py printed %q: %v", stdout.String(), err)
	}

	if !r.Created["py-orders"] || !r.Created["py-doomed"] || !r.Deleted["py-doomed"] || r.Topics["py-orders"] != 3 || r.Topics["py-doomed"] != 1 {
		t.Fatalf("admin: created %v, listed %v, deleted %v", r.Created, r.Topics, r.Deleted)
	}
	if e := r.Configs["retention.ms"]; e.Value == nil || *e.Value != "3600000" || e.Source != 1 || e.Default {
		t.Errorf("retention.ms described as %+v, want 3600000 from the topic's own config (source 1)", e)
	}
	if e := r.Configs["cleanup.policy"]; e.Value == nil || *e.Value != "delete" || !e.Default {
		t.Errorf("cleanup.policy described as %+v, want the default delete", e)
	}
	d, err := cl.DescribeTopic(ctx, "py-orders")
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Partitions) != 3 || configValue(d.Configs, "retention.ms") != "3600000" {
		t.Errorf("strata describes py-orders with %d partitions, retention.ms %q", len(d.Partitions), configValue(d.Configs, "retention.ms"))
	}
	if md := grpcMetadata(t, c.brokers[0].Listen, "py-doomed"); md.Topics[0].Error == nil {
		t.Errorf("py-doomed still exists after delete_topics: %+v", md.Topics[0])
	}

	if r.Unflushed != 0 || len(r.Reports) != 60 || len(r.Consumed) != 60 {
		t.Fatalf("%d records unflushed, %d delivery reports, %d consumed; want 0, 60, 60", r.Unflushed, len(r.Reports), len(r.Consumed))
	}
	type place struct {
		partition int32
		offset    int64
	}
	reported := map[place]string{}
	for _, rep := range r.Reports {
		if rep.Error != nil || rep.Offset < 0 {
			t.Fatalf("delivery report %+v: want success with an offset", rep)
		}
		if want := recordbatch.PartitionForKey([]byte(rep.Key), 3); rep.Partition != want {
			t.Errorf("key %s went to partition %d; Strata's murmur2 partitioner says %d", rep.Key, rep.Partition, want)
		}
		reported[place{rep.Partition, rep.Offset}] = rep.Key + "=" + rep.Value
	}
	for _, m := range r.Consumed {
		seq := strings.TrimPrefix(m.Value, "v")
		n, _ := strconv.Atoi(seq)
		if reported[place{m.Partition, m.Offset}] != m.Key+"="+m.Value || m.Timestamp != 1_700_000_000_000+int64(n) ||
			len(m.Headers) != 1 || m.Headers[0][0] != "seq" || m.Headers[0][1] != seq {
			t.Fatalf("consumed %+v; the delivery report there says %q", m, reported[place{m.Partition, m.Offset}])
		}
		delete(reported, place{m.Partition, m.Offset})
	}
	if len(reported) != 0 {
		t.Fatalf("reported but not consumed: %v", reported)
	}
	for p, recs := range kafkaReadAll(t, c.kafkaAddrs(), "py-orders") {
		for i, k := range recs {
			if k.Offset != int64(i) || k.ProducerID < 0 {
				t.Fatalf("partition %d: record %d at offset %d with producer id %d; want dense offsets, batches of an idempotent producer", p, i, k.Offset, k.ProducerID)
			}
		}
	}
}

// configValue is a described topic's value of config name ("" if none).
func configValue(entries []*brokerpb.ConfigEntry, name string) string {
	for _, e := range entries {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}
