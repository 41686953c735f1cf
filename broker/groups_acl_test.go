package broker

import (
	"context"
	"log/slog"
	"slices"
	"testing"

	"github.com/strata-log/strata/internal/acl"
	"github.com/strata-log/strata/internal/mtls"
	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/proto/metadpb"
)

// A group's committed offsets name topics; a principal who may read the
// group but not describe a topic must not see that topic's offsets and
// commit metadata through FetchOffsets or DescribeGroup (as Kafka's
// OffsetFetch needs DESCRIBE on each topic). They were answered whole:
// READ on a group showed every topic any of its members ever committed.
func TestGroupOffsetsShowOnlyDescribableTopics(t *testing.T) {
	f := newOffsetsFixture(t)
	coord, _ := f.coordinator(0, f.open(0, 1))
	ctx := context.Background()
	if err := coord.Load(ctx); err != nil {
		t.Fatal(err)
	}
	resp, err := coord.Commit(ctx, &brokerpb.CommitOffsetsRequest{GroupId: "g", Offsets: []*brokerpb.OffsetCommit{
		{Topic: "public", Partition: 0, Offset: 7}, {Topic: "secret", Partition: 0, Offset: 9, Metadata: "private"}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range resp.Results {
		if r.Error != nil {
			t.Fatalf("commit %s: %v", r.Topic, r.Error)
		}
	}

	b := &Broker{creds: &mtls.Credentials{}, sec: testSecurity(t), topics: newMirror(nil, topicsPrefix, slog.New(slog.DiscardHandler))}
	b.topics.kvs[topicKey(OffsetsTopic)] = &metadpb.KeyValue{Key: topicKey(OffsetsTopic),
		Value: topicMarshal(&brokerpb.TopicRecord{Name: OffsetsTopic, Partitions: 1, Internal: true})}
	b.parts = map[tp]*partition{{OffsetsTopic, 0}: {tp: tp{OffsetsTopic, 0}, coord: coord}}
	allow := func(op acl.Operation, typ acl.ResourceType, name string) acl.Rule {
		return acl.Rule{Principal: "User:alice", Permission: acl.Allow, Operation: op, Resource: typ, Name: name, Pattern: acl.Literal}
	}
	b.sec.rules.Store(acl.NewAuthorizer([]acl.Rule{
		allow(acl.Read, acl.Group, "g"), allow(acl.Read, acl.Topic, "public")}, nil))
	alice := withPrincipal(ctx, principal{name: "User:alice", via: "certificate"})
	topics := func(offsets []*brokerpb.CommittedOffset) []string {
		var out []string
		for _, o := range offsets {
			out = append(out, o.Topic)
		}
		return out
	}

	fetched, err := b.Groups().FetchOffsets(alice, &brokerpb.FetchOffsetsRequest{GroupId: "g"})
	if err != nil {
		t.Fatal(err)
	}
	if got := topics(fetched.Offsets); !slices.Equal(got, []string{"public"}) {
		t.Errorf("FetchOffsets of every committed partition shows topics %v, want [public]", got)
	}
	if _, err := b.Groups().FetchOffsets(alice, &brokerpb.FetchOffsetsRequest{GroupId: "g",
		Partitions: []*brokerpb.TopicPartitions{{Topic: "secret", Partitions: []int32{0}}}}); err == nil {
		t.Error("FetchOffsets naming a topic alice may not describe: answered, want PERMISSION_DENIED")
	}
	described, err := b.Groups().DescribeGroup(alice, &brokerpb.DescribeGroupRequest{GroupId: "g"})
	if err != nil {
		t.Fatal(err)
	}
	if got := topics(described.Offsets); !slices.Equal(got, []string{"public"}) {
		t.Errorf("DescribeGroup shows offsets of topics %v, want [public]", got)
	}
}
