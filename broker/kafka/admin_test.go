package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-log/strata/broker/brokertest"
	"github.com/strata-log/strata/client"
	"github.com/strata-log/strata/proto/brokerpb"
)

func kadmClient(t *testing.T, c *brokertest.Cluster) *kadm.Client {
	return kadm.NewClient(kgoClient(t, c))
}

// Topic administration through kadm: create (defaults, configs, validate
// only, bad names and configs, an existing name), describe and alter
// configs (incremental and whole), add partitions, delete records and
// topics; what kadm changes, the gRPC API sees.
func TestTopicAdmin(t *testing.T) {
	c := kafkaCluster(t, 1)
	adm := kadmClient(t, c)
	ctx := testCtx(t)
	compact := "compact"
	resp, err := adm.CreateTopic(ctx, -1, -1, map[string]*string{"cleanup.policy": &compact}, "orders")
	if err != nil || resp.Err != nil {
		t.Fatalf("create: %v %v", err, resp.Err)
	}
	if resp.NumPartitions != 1 || resp.ID == (kadm.TopicID{}) {
		t.Fatalf("created %+v", resp)
	}
	gc, err := client.New(ctx, client.Config{Brokers: c.Addrs()})
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	desc, err := gc.DescribeTopic(ctx, "orders")
	if err != nil || desc.PartitionCount != 1 {
		t.Fatalf("gRPC describe of a topic created over Kafka: %v %v", desc, err)
	}
	if id := kadm.TopicID(resp.ID); desc.Id == "" || id.String() == "" {
		t.Fatalf("topic id %q", desc.Id)
	}
	for _, tc := range []struct {
		name, topic string
		partitions  int32
		configs     map[string]*string
		want        error
	}{
		{"exists", "orders", 1, nil, kerr.TopicAlreadyExists},
		{"bad name", "no/slash", 1, nil, kerr.InvalidTopicException},
		{"bad partitions", "p0", 0, nil, kerr.InvalidPartitions},
		{"unknown config", "c1", 1, map[string]*string{"no.such.config": &compact}, kerr.InvalidConfig},
		{"bad value", "c2", 1, map[string]*string{"retention.ms": &compact}, kerr.InvalidConfig},
	} {
		r, err := adm.CreateTopic(ctx, tc.partitions, 3, tc.configs, tc.topic)
		if err == nil {
			err = r.Err
		}
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	if rs, err := adm.ValidateCreateTopics(ctx, 4, 1, nil, "validated"); err != nil || rs["validated"].Err != nil {
		t.Fatalf("validate only: %v %+v", err, rs)
	}
	if md, _ := adm.Metadata(ctx, "validated"); md.Topics["validated"].Err == nil {
		t.Fatal("a validate-only create created the topic")
	}

	// Configs: sources, incremental set/append/delete, then AlterConfigs
	// replaces the whole explicit set.
	cfgs, err := adm.DescribeTopicConfigs(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	rc, err := cfgs.On("orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	sources := map[string]string{}
	for _, cfg := range rc.Configs {
		sources[cfg.Key] = cfg.Source.String()
	}
	if sources["cleanup.policy"] != "DYNAMIC_TOPIC_CONFIG" || sources["retention.ms"] != "DEFAULT_CONFIG" {
		t.Fatalf("config sources %v", sources)
	}
	hour, del := "3600000", "delete"
	if rs, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "retention.ms", Value: &hour},
		{Op: kadm.AppendConfig, Name: "cleanup.policy", Value: &del}}, "orders"); err != nil || rs[0].Err != nil {
		t.Fatalf("incremental alter configs: %v %+v", err, rs)
	}
	desc, _ = gc.DescribeTopic(ctx, "orders")
	if v := configValue(desc.Configs, "retention.ms"); v != hour {
		t.Fatalf("retention.ms %q after an incremental set", v)
	}
	if v := configValue(desc.Configs, "cleanup.policy"); v != "compact,delete" {
		t.Fatalf("cleanup.policy %q after an append", v)
	}
	rs, err := adm.AlterTopicConfigsState(ctx, []kadm.AlterConfig{{Name: "retention.ms", Value: &hour}}, "orders")
	if err != nil || rs[0].Err != nil {
		t.Fatalf("alter configs: %v %+v", err, rs)
	}
	desc, _ = gc.DescribeTopic(ctx, "orders")
	if v := configValue(desc.Configs, "cleanup.policy"); v != "delete" {
		t.Fatalf("AlterConfigs left cleanup.policy %q, want the default", v)
	}

	// Partitions, then records, then the topic.
	if rs, err := adm.UpdatePartitions(ctx, 3, "orders"); err != nil || rs["orders"].Err != nil {
		t.Fatalf("update partitions: %v %+v", err, rs)
	}
	if rs, _ := adm.UpdatePartitions(ctx, 2, "orders"); !errors.Is(rs["orders"].Err, kerr.InvalidPartitions) {
		t.Fatalf("shrinking: %+v", rs["orders"])
	}
	c.WaitServed("orders")
	p := kgoClient(t, c, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	for range 5 {
		if err := p.ProduceSync(ctx, &kgo.Record{Topic: "orders", Partition: 1, Key: []byte("k"), Value: []byte("v")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	var os kadm.Offsets
	os.Add(kadm.Offset{Topic: "orders", Partition: 1, At: 3})
	drs, err := adm.DeleteRecords(ctx, os)
	if err != nil {
		t.Fatal(err)
	}
	if dr, _ := drs.Lookup("orders", 1); dr.Err != nil || dr.LowWatermark != 3 {
		t.Fatalf("delete records: %+v", dr)
	}
	starts, err := adm.ListStartOffsets(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := starts.Lookup("orders", 1); s.Offset != 3 {
		t.Fatalf("log start after DeleteRecords: %+v", s)
	}
	if _, err := adm.DeleteTopics(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	if _, err := gc.DescribeTopic(ctx, "orders"); err == nil {
		t.Fatal("a topic deleted over Kafka is still described")
	}
}

func configValue(entries []*brokerpb.ConfigEntry, name string) string {
	for _, e := range entries {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

// Metadata for the cluster: every broker with its node id and address, a
// controller among them, topics with ids, leaders and epochs that agree
// with the gRPC API's owners; ApiVersions lists exactly what is served.
func TestClusterMetadata(t *testing.T) {
	c := kafkaCluster(t, 2)
	c.CreateTopic("spread", 4, nil)
	adm := kadmClient(t, c)
	ctx := testCtx(t)
	md, err := adm.Metadata(ctx, "spread")
	if err != nil {
		t.Fatal(err)
	}
	if len(md.Brokers) != 2 || md.Cluster == "" {
		t.Fatalf("brokers %+v cluster %q", md.Brokers, md.Cluster)
	}
	ids := map[int32]bool{}
	for _, b := range md.Brokers {
		ids[b.NodeID] = true
	}
	if !ids[md.Controller] {
		t.Fatalf("controller %d not among the brokers %v", md.Controller, md.Brokers)
	}
	td := md.Topics["spread"]
	if td.Err != nil || len(td.Partitions) != 4 || td.ID == (kadm.TopicID{}) {
		t.Fatalf("topic %+v", td)
	}
	for _, p := range td.Partitions {
		if !ids[p.Leader] || p.LeaderEpoch < 1 || len(p.Replicas) != 1 || p.Replicas[0] != p.Leader {
			t.Fatalf("partition %+v", p)
		}
	}
	vs, err := adm.ApiVersions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	vs.Each(func(bv kadm.BrokerApiVersions) {
		if v, ok := bv.KeyMaxVersion(24); ok {
			t.Errorf("transactions (AddPartitionsToTxn) advertised up to v%d", v)
		}
		if v, ok := bv.KeyMaxVersion(0); !ok || v != 11 {
			t.Errorf("produce advertised up to v%d", v)
		}
	})
	_ = context.Background
}

// Metadata v1+ with an empty topic list describes no topic (brokers
// only); a null list describes every topic; v0's empty list is every
// topic.
func TestMetadataTopicLists(t *testing.T) {
	c := kafkaCluster(t, 1)
	c.CreateTopic("listed", 1, nil)
	md := func(version int16, topics []kmsg.MetadataRequestTopic) *kmsg.MetadataResponse {
		req := kmsg.NewPtrMetadataRequest()
		req.Version, req.Topics = version, topics
		return rawRequest[*kmsg.MetadataResponse](t, c.KafkaAddrs()[0], req)
	}
	if r := md(4, []kmsg.MetadataRequestTopic{}); len(r.Topics) != 0 || len(r.Brokers) != 1 {
		t.Fatalf("v4, empty list: %d topics, %d brokers", len(r.Topics), len(r.Brokers))
	}
	if r := md(4, nil); len(r.Topics) < 2 { // listed and __consumer_offsets
		t.Fatalf("v4, null list: %d topics", len(r.Topics))
	}
	if r := md(0, []kmsg.MetadataRequestTopic{}); len(r.Topics) < 2 {
		t.Fatalf("v0, empty list: %d topics", len(r.Topics))
	}
	name := "missing"
	if r := md(12, []kmsg.MetadataRequestTopic{{Topic: &name}}); len(r.Topics) != 1 || r.Topics[0].ErrorCode != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("an unknown topic: %+v", r.Topics)
	}
}

// A Metadata request naming more distinct topics than the service
// describes is answered with the error once per distinct name: its
// repeats do not multiply the answer (1001 names each repeated 1000 times
// would otherwise be answered 1,001,000 times).
func TestMetadataTooManyTopicsAnsweredOncePerName(t *testing.T) {
	c := kafkaCluster(t, 1)
	req := kmsg.NewPtrMetadataRequest()
	req.Version = 1
	for i := range 1001 * 3 {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(fmt.Sprintf("t%d", i%1001))
		req.Topics = append(req.Topics, rt)
	}
	resp := rawRequest[*kmsg.MetadataResponse](t, c.KafkaAddrs()[0], req)
	names := map[string]bool{}
	for _, rt := range resp.Topics {
		if rt.ErrorCode == 0 || names[*rt.Topic] {
			t.Fatalf("topic %s answered with code %d (again: %v)", *rt.Topic, rt.ErrorCode, names[*rt.Topic])
		}
		names[*rt.Topic] = true
	}
	if len(names) != 1001 {
		t.Fatalf("%d topics answered, want the 1001 distinct names", len(names))
	}
}
