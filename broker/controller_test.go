package broker_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/strata-log/strata/broker/brokertest"
	"github.com/strata-log/strata/internal/testwait"
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
