package broker_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/strata-log/strata/broker/brokertest"
	"github.com/strata-log/strata/broker/partlog"
	"github.com/strata-log/strata/client"
	"github.com/strata-log/strata/internal/testwait"
	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/metad"
	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/proto/metadpb"
)

// The controller writes a round's assignments a batch per metad
// transaction: a topic of 10,000 partitions, or the failover of a broker
// serving them, took one round trip per partition. With a metad that
// refuses transactions that large (a smaller --max-txn-ops) it writes them
// one by one instead, and every partition is still assigned.
func TestAssignmentsWrittenInBatches(t *testing.T) {
	const partitions = 400
	for _, tc := range []struct {
		name         string
		maxTxnOps    int
		maxRevisions int // distinct mod revisions among the assignments
	}{
		{"batched", 0, partitions/100 + 2},
		{"metad refuses the batch size", 8, partitions},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := brokertest.Options{Brokers: 2}
			if tc.maxTxnOps > 0 {
				opts.ConfigureMetad = func(cfg *metad.Config) { cfg.MaxTxnOps = tc.maxTxnOps }
			}
			cl := brokertest.Start(t, opts)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			if _, err := cl.Client(0).CreateTopic(ctx, &brokerpb.CreateTopicRequest{Name: "wide", Partitions: partitions}); err != nil {
				t.Fatal(err)
			}
			var kvs []*metadpb.KeyValue
			testwait.UntilNil(t, 60*time.Second, "every partition of wide assigned", func() error {
				var err error
				if kvs, _, err = cl.Meta.List(ctx, "/strata/assignments/wide/"); err != nil {
					return err
				}
				if len(kvs) != partitions {
					return fmt.Errorf("%d of %d assigned", len(kvs), partitions)
				}
				return nil
			})
			revisions := map[int64]bool{}
			perBroker := map[string]int{}
			for _, kv := range kvs {
				var a brokerpb.Assignment
				if err := proto.Unmarshal(kv.Value, &a); err != nil {
					t.Fatal(err)
				}
				if a.Epoch < 1 || !strings.HasPrefix(a.BrokerId, "k") {
					t.Fatalf("%s: %v", kv.Key, &a)
				}
				revisions[kv.ModRevision] = true
				perBroker[a.BrokerId]++
			}
			if len(revisions) > tc.maxRevisions {
				t.Fatalf("%d partitions assigned in %d metad revisions, want at most %d", partitions, len(revisions), tc.maxRevisions)
			}
			t.Logf("%d partitions assigned in %d metad revisions, per broker %v", partitions, len(revisions), perBroker)
		})
	}
}

// Deleting a topic removes its data: every ledger of its partitions (in
// batches of ledger.DeleteBatch, here more than one), the ledgers'
// indexes and copies, and the partition records, then the topic record.
// Another topic's data stays.
func TestDeleteTopicRemovesItsData(t *testing.T) {
	cl := brokertest.Start(t, brokertest.Options{})
	small := map[string]string{"segment.bytes": "16384"}
	cl.CreateTopic("doomed", 2, small)
	cl.CreateTopic("kept", 1, small)
	cl.WaitServed("doomed", "kept")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := client.New(ctx, client.Config{Brokers: cl.Addrs()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p, err := c.NewProducer(client.ProducerConfig{Linger: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	value := make([]byte, 12<<10) // one record per 16 KiB segment
	produce := func(topic string, partition int32, n int) {
		for range n {
			rec := client.NewRecord(topic, nil, value)
			rec.Partition = partition
			if _, err := p.ProduceSync(ctx, rec); err != nil {
				t.Fatal(err)
			}
		}
	}
	produce("doomed", 0, ledger.DeleteBatch+6)
	produce("doomed", 1, 3)
	produce("kept", 0, 3)
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	ledgersOf := func(topic string) (ids []uint64) {
		all, err := cl.Ledgers.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range all {
			if md, _, ok := cl.Ledgers.Ledger(id); ok && md.Properties["topic"] == topic {
				ids = append(ids, id)
			}
		}
		return ids
	}
	doomed, kept := ledgersOf("doomed"), ledgersOf("kept")
	if len(doomed) < ledger.DeleteBatch+6 || len(kept) < 3 {
		t.Fatalf("%d ledgers of doomed, %d of kept: the segments did not roll", len(doomed), len(kept))
	}
	batches := cl.Ledgers.Batches()

	if err := c.DeleteTopic(ctx, "doomed"); err != nil {
		t.Fatal(err)
	}
	testwait.UntilNil(t, 30*time.Second, "the topic record of doomed deleted", func() error {
		kvs, _, err := cl.Meta.List(ctx, "/strata/topics/doomed")
		if err != nil || len(kvs) > 0 {
			return fmt.Errorf("%d records, %v", len(kvs), err)
		}
		return nil
	})
	if left := ledgersOf("doomed"); len(left) > 0 {
		t.Fatalf("ledgers of the deleted topic left: %v", left)
	}
	if got := cl.Ledgers.Batches() - batches; got < 2 {
		t.Fatalf("%d ledgers deleted in %d metadata batches, want them batched", len(doomed), got)
	}
	for _, id := range doomed {
		for _, b := range cl.Bookies.Addrs() {
			if n := len(cl.Bookies.StoredEntries(b, id)); n > 0 {
				t.Fatalf("bookie %s still holds %d entries of ledger %d", b, n, id)
			}
		}
		if kvs, _, err := cl.Meta.List(ctx, partlog.IndexKey(id)); err != nil || len(kvs) > 0 {
			t.Fatalf("the index of ledger %d: %d records, %v", id, len(kvs), err)
		}
	}
	if kvs, _, err := cl.Meta.List(ctx, partlog.PartitionPrefix+"doomed/"); err != nil || len(kvs) > 0 {
		t.Fatalf("partition records of doomed: %d, %v", len(kvs), err)
	}
	if left := ledgersOf("kept"); !slices.Equal(left, kept) {
		t.Fatalf("the ledgers of kept: %v, want %v", left, kept)
	}
}
