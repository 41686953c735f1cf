package broker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
	"google.golang.org/grpc"

	"github.com/strata-log/strata/broker"
	"github.com/strata-log/strata/broker/brokertest"
	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/recordbatch"
)

// catchUpBytes is what BenchmarkFetchCatchUp reads per iteration: the
// whole of a topic of catchUpPartitions partitions.
const (
	catchUpPartitions = 4
	catchUpBatches    = 64 // per partition, of catchUpRecords 1 KiB records
	catchUpRecords    = 256
)

// BenchmarkFetchCatchUp measures catch-up reads through the whole fetch
// path of one broker (service, adapter, transport, on loopback), over
// gRPC and over Kafka, from the tail cache and, with no tail cache, from
// the (in-memory) bookies: every iteration reads a 64 MiB topic from its
// first offset to its end with fetches of 8 MiB, 4 MiB per partition.
func BenchmarkFetchCatchUp(b *testing.B) {
	for _, source := range []string{"cache", "bookies"} {
		cl := brokertest.Start(b, brokertest.Options{Kafka: true, Configure: func(_ int, cfg *broker.Config) {
			if source == "bookies" {
				cfg.TailCacheBytes = 0
			}
		}})
		cl.CreateTopic("catch-up", catchUpPartitions, nil)
		size := produceCatchUp(b, cl.Client(0), "catch-up")
		b.Run("grpc/"+source, func(b *testing.B) {
			b.SetBytes(size)
			for range b.N {
				if err := fetchAllGRPC(cl.Client(0), "catch-up"); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("kafka/"+source, func(b *testing.B) {
			// Fetch v12 names topics (v13 on names them by id).
			kc, err := kgo.NewClient(kgo.SeedBrokers(cl.KafkaAddrs()...), kgo.MaxVersions(kversion.V3_0_0()))
			if err != nil {
				b.Fatal(err)
			}
			defer kc.Close()
			b.SetBytes(size)
			for range b.N {
				if err := fetchAllKafka(kc, "catch-up"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// produceCatchUp fills every partition of topic and returns the bytes
// stored.
func produceCatchUp(tb testing.TB, cl brokerpb.BrokerClient, topic string) int64 {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	value := make([]byte, 1000)
	records := make([]recordbatch.Record, catchUpRecords)
	for i := range records {
		records[i] = recordbatch.Record{TimestampMs: time.Now().UnixMilli(), Value: value}
	}
	batch, err := recordbatch.Encode(&recordbatch.Batch{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1, Records: records})
	if err != nil {
		tb.Fatal(err)
	}
	var size int64
	for range catchUpBatches {
		req := &brokerpb.ProduceRequest{}
		for p := range int32(catchUpPartitions) {
			req.Partitions = append(req.Partitions, &brokerpb.ProducePartition{Topic: topic, Partition: p, Records: batch})
		}
		resp, err := cl.Produce(ctx, req)
		if err != nil {
			tb.Fatal(err)
		}
		for _, r := range resp.Partitions {
			if r.Error != nil {
				tb.Fatalf("produce: %v", r.Error)
			}
		}
		size += int64(len(batch)) * catchUpPartitions
	}
	return size
}

// fetchAllGRPC reads every partition of topic from 0 to its end.
func fetchAllGRPC(cl brokerpb.BrokerClient, topic string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := newCatchUp()
	for c.done < catchUpPartitions {
		req := &brokerpb.FetchRequest{MaxBytes: 8 << 20}
		for p, o := range c.offsets {
			if o >= 0 {
				req.Partitions = append(req.Partitions, &brokerpb.FetchPartition{Topic: topic, Partition: int32(p), Offset: o, MaxBytes: 4 << 20})
			}
		}
		resp, err := cl.Fetch(ctx, req, grpc.MaxCallRecvMsgSize(16<<20))
		if err != nil {
			return err
		}
		for _, r := range resp.Partitions {
			if r.Error != nil {
				return fmt.Errorf("fetch %d: %v", r.Partition, r.Error)
			}
			if err := c.advance(r.Partition, r.AllRecords(), r.HighWatermark); err != nil {
				return err
			}
		}
	}
	return nil
}

// fetchAllKafka is fetchAllGRPC over the Kafka protocol.
func fetchAllKafka(kc *kgo.Client, topic string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := newCatchUp()
	for c.done < catchUpPartitions {
		req := kmsg.NewPtrFetchRequest()
		req.Version, req.MaxBytes, req.MaxWaitMillis, req.ReplicaID = 12, 8<<20, 500, -1
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = topic
		for p, o := range c.offsets {
			if o >= 0 {
				rp := kmsg.NewFetchRequestTopicPartition()
				rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = int32(p), o, 4<<20
				rt.Partitions = append(rt.Partitions, rp)
			}
		}
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, kc)
		if err != nil {
			return err
		}
		for _, t := range resp.Topics {
			for _, r := range t.Partitions {
				if r.ErrorCode != 0 {
					return fmt.Errorf("fetch %d: error %d", r.Partition, r.ErrorCode)
				}
				if err := c.advance(r.Partition, r.RecordBatches, r.HighWatermark); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// catchUp is a reader's next offset in every partition (-1: read to its
// end).
type catchUp struct {
	offsets []int64
	done    int
}

func newCatchUp() *catchUp { return &catchUp{offsets: make([]int64, catchUpPartitions)} }

// advance moves partition p past the records of an answer with high
// watermark hw (< 0: a response full before p was read).
func (c *catchUp) advance(p int32, records []byte, hw int64) error {
	if hw < 0 {
		return nil
	}
	next, err := nextOffset(records, c.offsets[p])
	if err != nil {
		return err
	}
	c.offsets[p] = next
	if next >= hw {
		c.offsets[p] = -1
		c.done++
	}
	return nil
}

// nextOffset is the offset after the last batch of records (from when
// records holds none).
func nextOffset(records []byte, from int64) (int64, error) {
	for len(records) > 0 {
		h, err := recordbatch.ParseHeader(records)
		if err != nil {
			return 0, fmt.Errorf("fetched batch at %d: %w", from, err)
		}
		from = h.LastOffset() + 1
		records = records[min(h.Size(), len(records)):]
	}
	return from, nil
}
