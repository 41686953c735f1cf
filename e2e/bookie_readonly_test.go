package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-log/strata/client"
	"github.com/strata-log/strata/e2e/loadtest"
	"github.com/strata-log/strata/internal/proctest"
	"github.com/strata-log/strata/internal/rpcerror"
	"github.com/strata-log/strata/internal/testwait"
	"github.com/strata-log/strata/ledger/bookies"
	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/recordbatch"
)

// fillDisk writes a file of zeros into dir until the file system holding
// it has at most leave bytes free (a tmpfs fills as it is written), and
// returns its path.
func fillDisk(t *testing.T, dir string, leave uint64) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 1<<20)
	for {
		var st syscall.Statfs_t
		if err := syscall.Statfs(dir, &st); err != nil {
			t.Fatal(err)
		}
		free := st.Bavail * uint64(st.Bsize)
		if free <= leave {
			return path
		}
		if _, err := f.Write(chunk[:min(uint64(len(chunk)), free-leave)]); err != nil {
			t.Fatalf("filling %s: %v", dir, err)
		}
	}
}

// fastAnswer bounds how long a produce may take to be refused while every
// bookie is read-only: far below the broker's produce timeout (30s), which
// is what a produce handed to a stalled writer used to wait for.
const fastAnswer = 10 * time.Second

// TestAllBookiesReadOnlyProduceFailsFast: three bookies share one small
// disk, which fills up, so all of them turn read-only. A produce is then
// answered at once instead of at the produce timeout (and a client's
// delivery timeout behind it): the first one on each partition, handed to
// the ledger writer before it learnt that its bookies refuse adds, with an
// unknown outcome (gRPC UNAVAILABLE / UNKNOWN_OUTCOME; Kafka
// NOT_ENOUGH_REPLICAS_AFTER_APPEND, retriable); every later one as
// refused, nothing written (gRPC UNAVAILABLE, retryable; Kafka
// NOT_ENOUGH_REPLICAS). Once the disk has room again the bookies turn
// writable, produce succeeds, and the batches of unknown outcome are in
// the log: the writer kept them and wrote them.
func TestAllBookiesReadOnlyProduceFailsFast(t *testing.T) {
	skipShort(t)
	// Each bookie's Pebble index preallocates a 36 MiB log: 120 MiB for
	// three, before any data.
	disk := mountTmpfs(t, "256m")
	meta := proctest.StartMetad(t, bins["metad"], 3)
	c := &strataCluster{meta: meta}
	for i := 1; i <= 3; i++ {
		b := &proctest.BookieNode{ID: fmt.Sprintf("b%d", i), Listen: proctest.FreeAddr(t), AdminAddr: proctest.FreeAddr(t),
			DataDir: filepath.Join(disk, fmt.Sprintf("b%d", i))}
		b.Process = proctest.Start(t, "bookie-"+b.ID, bins["bookie"], b.Args(meta,
			"--journal-max-file-bytes", "4194304", "--max-entry-bytes", "1048576",
			"--read-only-above", "0.80", "--writable-below", "0.60")...)
		c.bookies = append(c.bookies, b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for _, b := range c.bookies {
		if err := b.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
	}
	c.brokers = append(c.brokers, proctest.StartBroker(t, bins["broker"], meta, "k1"))
	cl := c.client(t)
	createTopic(t, cl, "full", 2, nil)
	bc := rawBroker(t, c.brokers[0].Listen)
	kc := kafkaClient(t, c.kafkaAddrs())
	batch := func(value string) []byte {
		b, err := recordbatch.Encode(&recordbatch.Batch{ProducerID: -1, Records: []recordbatch.Record{{TimestampMs: time.Now().UnixMilli(), Value: []byte(value)}}})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	// grpcProduce sends to partition 0 over gRPC, kafkaProduce to
	// partition 1 over Kafka: each partition's first produce after the
	// disk filled is the one its writer holds.
	grpcProduce := func(value string) (*brokerpb.PartitionError, time.Duration) {
		t.Helper()
		start := time.Now()
		resp, err := bc.Produce(ctx, &brokerpb.ProduceRequest{Partitions: []*brokerpb.ProducePartition{{Topic: "full", Partition: 0, Records: batch(value)}}})
		if err != nil {
			t.Fatalf("produce %q: %v", value, err)
		}
		return resp.Partitions[0].Error, time.Since(start)
	}
	kafkaProduce := func(value string) (int16, time.Duration) {
		t.Helper()
		req := kmsg.NewPtrProduceRequest()
		req.Acks, req.TimeoutMillis = -1, 30000
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = "full"
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Partition, rp.Records = 1, batch(value)
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		start := time.Now()
		resp, err := req.RequestWith(ctx, kc)
		if err != nil {
			t.Fatalf("Kafka produce %q: %v", value, err)
		}
		return resp.Topics[0].Partitions[0].ErrorCode, time.Since(start)
	}
	if pe, _ := grpcProduce("before"); pe != nil {
		t.Fatalf("produce before the disk filled: %s", pe.GetMessage())
	}
	if code, _ := kafkaProduce("kafka before"); code != 0 {
		t.Fatalf("Kafka produce before the disk filled: %v", kerr.ErrorForCode(code))
	}

	filler := fillDisk(t, disk, 8<<20)
	metaClient := newMetaClient(t, meta)
	testwait.UntilNil(t, 30*time.Second, "every bookie read-only", func() error {
		known, err := bookies.List(ctx, metaClient)
		if err != nil {
			return err
		}
		for _, b := range known {
			if b.State() != "read-only" {
				return fmt.Errorf("bookie %s is %s", b.ID, b.State())
			}
		}
		return nil
	})

	pe, took := grpcProduce("in flight")
	t.Logf("gRPC, first produce with every bookie read-only: %s %q after %v", pe.GetInfo().GetReason(), pe.GetMessage(), took)
	if pe.GetInfo().GetReason() != rpcerror.ReasonUnknownOutcome || pe.GetInfo().GetRetryable() ||
		!strings.Contains(pe.GetMessage(), "fewer bookies take writes") || took > fastAnswer {
		t.Fatalf("gRPC, first produce: %v after %v; want UNKNOWN_OUTCOME naming the bookies, within %v", pe, took, fastAnswer)
	}
	code, took := kafkaProduce("kafka in flight")
	t.Logf("Kafka, first produce with every bookie read-only: %v after %v", kerr.ErrorForCode(code), took)
	if code != kerr.NotEnoughReplicasAfterAppend.Code || took > fastAnswer {
		t.Fatalf("Kafka, first produce: %v after %v; want NOT_ENOUGH_REPLICAS_AFTER_APPEND within %v", kerr.ErrorForCode(code), took, fastAnswer)
	}
	for i := range 3 {
		pe, took := grpcProduce(fmt.Sprintf("refused %d", i))
		if pe.GetInfo().GetReason() != rpcerror.ReasonUnavailable || !pe.GetInfo().GetRetryable() || took > fastAnswer {
			t.Fatalf("gRPC, produce %d while read-only: %v after %v; want retryable UNAVAILABLE at once", i, pe, took)
		}
		code, ktook := kafkaProduce(fmt.Sprintf("kafka refused %d", i))
		if code != kerr.NotEnoughReplicas.Code || ktook > fastAnswer {
			t.Fatalf("Kafka, produce %d while read-only: %v after %v; want NOT_ENOUGH_REPLICAS at once", i, kerr.ErrorForCode(code), ktook)
		}
		t.Logf("produce %d while read-only: gRPC %s retryable %q after %v; Kafka %v after %v",
			i, pe.GetInfo().GetReason(), pe.GetMessage(), took, kerr.ErrorForCode(code), ktook)
	}
	// The Go producer retries the retryable refusal until its delivery
	// timeout, and then says why.
	p, err := cl.NewProducer(client.ProducerConfig{DeliveryTimeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	_, err = p.ProduceSync(ctx, &client.Record{Topic: "full", Partition: 0, Value: []byte("client")})
	if !errors.Is(err, client.ErrDeliveryTimeout) || !strings.Contains(err.Error(), "fewer bookies take writes") {
		t.Fatalf("Go producer while read-only: %v; want a delivery timeout naming the bookies", err)
	}
	t.Logf("Go producer: %v", err)

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	// Each refused attempt wrote nothing, so retrying until one succeeds
	// writes each value once.
	testwait.UntilNil(t, 60*time.Second, "gRPC produce succeeds again", func() error {
		if pe, _ := grpcProduce("after"); pe != nil {
			return fmt.Errorf("%s: %s", pe.GetInfo().GetReason(), pe.GetMessage())
		}
		return nil
	})
	testwait.UntilNil(t, 60*time.Second, "Kafka produce succeeds again", func() error {
		if code, _ := kafkaProduce("kafka after"); code != 0 {
			return kerr.ErrorForCode(code)
		}
		return nil
	})
	// The batches of unknown outcome were written (the writer kept them);
	// the refused ones were not.
	read := loadtest.ReadAll(t, cl, "full", 2)
	for part, want := range map[int32][]string{0: {"before", "in flight", "after"}, 1: {"kafka before", "kafka in flight", "kafka after"}} {
		var got []string
		for _, r := range read[part] {
			got = append(got, string(r.Value))
		}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("partition %d holds %q, want %q", part, got, want)
		}
	}
}
