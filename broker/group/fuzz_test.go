package group

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/recordbatch"
)

// FuzzLoad replays arbitrary __consumer_offsets records (what a client
// could once produce to the internal topic, or what a bad disk could
// return) into a coordinator: Load never fails or panics, every group it
// loaded can be listed, described and fetched, and the coordinator still
// takes commits that a later load restores (the poison costs at most its
// own records, never the partition's groups).
//
// The input is a sequence of records, each a uvarint-prefixed key and a
// uvarint-prefixed value (length 0 is a tombstone).
func FuzzLoad(f *testing.F) {
	var seed []byte
	for _, r := range []func() (recordbatch.Record, error){
		func() (recordbatch.Record, error) {
			return metadataRecord("g", &brokerpb.GroupMetadataValue{GroupEpoch: 2, Members: []*brokerpb.GroupMember{{
				MemberId: "m1", MemberEpoch: 2, SubscribedTopics: []string{"a", "b"},
				Assignment: []*brokerpb.TopicPartitions{{Topic: "a", Partitions: []int32{0, 1, 2, 3}}},
				Owned:      []*brokerpb.TopicPartitions{{Topic: "a", Partitions: []int32{0, 1}}},
			}}}, 1)
		},
		func() (recordbatch.Record, error) {
			return offsetRecord("g", TopicPartition{"a", 0}, &brokerpb.GroupOffsetValue{Offset: 10, MemberEpoch: 2}, 2)
		},
		func() (recordbatch.Record, error) { return offsetRecord("other", TopicPartition{"b", 0}, nil, 3) },
		func() (recordbatch.Record, error) { return metadataRecord("gone", nil, 4) },
		func() (recordbatch.Record, error) {
			return metadataRecord("classic", &brokerpb.GroupMetadataValue{Classic: &brokerpb.ClassicGroupValue{
				ProtocolType: "consumer", Generation: 3, Protocol: "range", Leader: "c1",
				State: brokerpb.ClassicGroupState_CLASSIC_GROUP_STATE_COMPLETING_REBALANCE,
				Members: []*brokerpb.ClassicGroupMember{{
					MemberId: "c1", InstanceId: "i1", SessionTimeoutMs: 10000, RebalanceTimeoutMs: 20000,
					Subscription: consumerSubscription("a"), Assignment: []byte{1},
				}},
			}}, 5)
		},
	} {
		rec, err := r()
		if err != nil {
			f.Fatal(err)
		}
		seed = appendRecord(seed, rec.Key, rec.Value)
	}
	f.Add(seed)
	f.Add(appendRecord(nil, []byte{0, 1, 0, 1, 'g'}, nil))
	f.Add(appendRecord(nil, []byte{0xff, 0xff, 0xff}, []byte{0, 0, 0, 0}))

	f.Fuzz(func(t *testing.T, in []byte) {
		log := &memLog{}
		for len(in) > 0 && len(log.records) < 256 {
			var key, value []byte
			if key, in = takeChunk(in); key == nil {
				break
			}
			value, in = takeChunk(in)
			if len(value) == 0 {
				value = nil
			}
			log.records = append(log.records, recordbatch.Record{Offset: int64(len(log.records)), Key: key, Value: value})
		}
		e := &env{t: t, log: log, topics: newTopics("a", 4, "b", 1), clock: newClock()}
		e.c = e.open() // fails the test if Load fails
		ctx := context.Background()
		list, err := e.c.ListGroups(ctx, &brokerpb.ListGroupsRequest{})
		if err != nil {
			t.Fatalf("ListGroups: %v", err)
		}
		for _, g := range list.Groups {
			if _, err := e.c.DescribeGroup(ctx, &brokerpb.DescribeGroupRequest{GroupId: g.GroupId}); err != nil {
				t.Fatalf("DescribeGroup %q: %v", g.GroupId, err)
			}
			if _, err := e.c.FetchOffsets(ctx, &brokerpb.FetchOffsetsRequest{GroupId: g.GroupId}); err != nil {
				t.Fatalf("FetchOffsets %q: %v", g.GroupId, err)
			}
			if _, err := e.c.Describe(ctx, g.GroupId); err != nil {
				t.Fatalf("Describe %q: %v", g.GroupId, err)
			}
		}
		if err := e.c.Tick(ctx, e.clock.Now().Add(time.Hour)); err != nil {
			t.Fatalf("Tick: %v", err)
		}
		resp, err := commit(e.c, "fuzz-after", "", -1, oc("a", 1, 77))
		if err != nil || resp.Results[0].Error != nil {
			t.Fatalf("commit after a poisoned load: %v %v", err, resp)
		}
		e.failover()
		if got := fetch(t, e.c, "fuzz-after"); got[TopicPartition{"a", 1}] != 77 {
			t.Fatalf("commit after a poisoned load not restored: %v", got)
		}
	})
}

func appendRecord(b, key, value []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(key)))
	b = append(b, key...)
	b = binary.AppendUvarint(b, uint64(len(value)))
	return append(b, value...)
}

// takeChunk splits a uvarint-prefixed chunk off in; nil when in holds none.
func takeChunk(in []byte) (chunk, rest []byte) {
	n, used := binary.Uvarint(in)
	if used <= 0 || n > uint64(len(in)-used) {
		return nil, nil
	}
	return append([]byte{}, in[used:used+int(n)]...), in[used+int(n):]
}

// FuzzSubscriptionTopics reads arbitrary classic member metadata as a
// consumer subscription (DeleteOffsets does, for "consumer" groups): it
// never panics, and what it reads re-encodes to the bytes it read.
func FuzzSubscriptionTopics(f *testing.F) {
	f.Add(consumerSubscription("a", "bb"))
	f.Add([]byte{0, 3, 0x7f, 0xff, 0xff, 0xff})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		topics, err := subscriptionTopics(b)
		if err != nil {
			return
		}
		enc := append([]byte{}, b[:2]...)
		enc = binary.BigEndian.AppendUint32(enc, uint32(len(topics)))
		for _, tp := range topics {
			enc = binary.BigEndian.AppendUint16(enc, uint16(len(tp)))
			enc = append(enc, tp...)
		}
		if string(enc) != string(b[:len(enc)]) {
			t.Fatalf("%q read as %q", b, topics)
		}
	})
}
