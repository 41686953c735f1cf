package e2e

import (
	"context"
	"encoding/binary"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/strata-log/strata/client"
	"github.com/strata-log/strata/e2e/loadtest"
	"github.com/strata-log/strata/internal/rpcerror"
	"github.com/strata-log/strata/internal/testwait"
	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/recordbatch"
	"github.com/strata-log/strata/recordbatch/hostilebatch"
)

// bombBrokerRSSGrowthBoundMiB is how much the broker's peak RSS may grow
// while it refuses TestHostileCompressionBombs' bombs and answers time
// lookups over stored ones. Unbounded, validating a 991-byte zstd batch
// of one 8 MiB record allocated ~20 MiB, 16 at a time per request: the
// 8 requests of 16 bombs below would have held ~2.5 GB. Streamed, a
// validation holds a 64 KiB window and its codec's state (a zstd window
// of 8 MiB at most), and at most max(GOMAXPROCS, 4) run at once: about
// 35 MiB, which the collector lets grow to twice that before it runs
// (GOGC=100); measured peaks grow by 40 to 60 MiB.
const bombBrokerRSSGrowthBoundMiB = 128

// TestHostileCompressionBombs sends decompression bombs of every codec
// (valid one-record batches of a few hundred bytes to 33 KB, each record
// 8 MiB of zeros) to a real broker over gRPC and over its Kafka listener:
// each is refused (INVALID_ARGUMENT with reason INVALID_ARGUMENT, and
// INVALID_RECORD) naming max.compression.ratio, while real records
// compressed with each codec are stored, and the broker's memory stays
// bounded. Bombs stored under a raised ratio cost a consumer at most its
// MaxDecodedBytes (the test process's heap, asserted), and a ListOffsets
// by time that scans them all costs the broker about nothing.
func TestHostileCompressionBombs(t *testing.T) {
	skipShort(t)
	c := startStrata(t, 1)
	cl := c.client(t)
	createTopic(t, cl, "ratio", 16, nil)
	createTopic(t, cl, "stored-bombs", 1, map[string]string{"max.compression.ratio": "1000000"})
	broker := c.brokers[0]
	bc := rawBroker(t, broker.Listen)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	peak := func() int64 {
		t.Helper()
		_, p, err := rssKiB(broker.Pid())
		if err != nil {
			t.Fatal(err)
		}
		return p >> 10
	}
	bombs := map[recordbatch.Compression][]byte{}
	for _, codec := range hostilebatch.BombCodecs {
		bombs[codec] = hostilebatch.Bomb(codec, 8<<20)
	}
	// One real record to every partition first: each is served, so the
	// refusals below are the bombs', not a takeover's.
	warm, err := recordbatch.Encode(&recordbatch.Batch{ProducerID: -1, Compression: recordbatch.CompressionZstd,
		Records: []recordbatch.Record{{TimestampMs: time.Now().UnixMilli(), Value: []byte("warm")}}})
	if err != nil {
		t.Fatal(err)
	}
	for p := range int32(16) {
		testwait.UntilNil(t, 30*time.Second, fmt.Sprintf("partition %d to take a batch", p), func() error {
			resp, err := bc.Produce(ctx, &brokerpb.ProduceRequest{Partitions: []*brokerpb.ProducePartition{{Topic: "ratio", Partition: p, Records: warm}}})
			if err != nil {
				return err
			}
			if e := resp.Partitions[0].Error; e != nil {
				return fmt.Errorf("%s", e.GetMessage())
			}
			return nil
		})
	}
	startPeak := peak()

	// Over gRPC: 8 requests at once, each of 16 bombs (one per
	// partition), every codec.
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			codec := hostilebatch.BombCodecs[i%len(hostilebatch.BombCodecs)]
			req := &brokerpb.ProduceRequest{}
			for p := range int32(16) {
				req.Partitions = append(req.Partitions, &brokerpb.ProducePartition{Topic: "ratio", Partition: p, Records: bombs[codec]})
			}
			resp, err := bc.Produce(ctx, req)
			if err != nil {
				t.Errorf("%s bombs: %v", codec, err)
				return
			}
			for _, r := range resp.Partitions {
				e := r.Error
				if e.GetInfo().GetReason() != rpcerror.ReasonInvalid || e.GetInfo().GetRetryable() || !strings.Contains(e.GetMessage(), "max.compression.ratio is 100") {
					t.Errorf("%s bomb (%d bytes) to partition %d: %s retryable=%v %q, want INVALID_ARGUMENT naming max.compression.ratio",
						codec, len(bombs[codec]), r.Partition, e.GetInfo().GetReason(), e.GetInfo().GetRetryable(), e.GetMessage())
				}
			}
			t.Logf("gRPC: 16 %s bombs of %d bytes refused: %s", codec, len(bombs[codec]), resp.Partitions[0].Error.GetMessage())
		})
	}
	wg.Wait()

	// Over Kafka: the same bombs, INVALID_RECORD.
	kc := kafkaClient(t, c.kafkaAddrs())
	for _, codec := range hostilebatch.BombCodecs {
		req := kmsg.NewPtrProduceRequest()
		req.Acks, req.TimeoutMillis = -1, 5000
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = "ratio"
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Records = bombs[codec]
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, kc)
		if err != nil {
			t.Fatalf("%s bomb over Kafka: %v", codec, err)
		}
		r := resp.Topics[0].Partitions[0]
		if r.ErrorCode != kerr.InvalidRecord.Code || r.ErrorMessage == nil || !strings.Contains(*r.ErrorMessage, "max.compression.ratio") {
			t.Fatalf("%s bomb over Kafka: code %d message %v, want INVALID_RECORD naming max.compression.ratio", codec, r.ErrorCode, r.ErrorMessage)
		}
		t.Logf("Kafka: %s bomb refused: %s", codec, kerr.ErrorForCode(r.ErrorCode))
	}

	// Real records, compressed with each codec by Strata's producer and
	// by franz-go, are stored: nothing of the bombs was.
	produceRealRecords(t, cl, c.kafkaAddrs(), "ratio")
	read := loadtest.ReadAll(t, cl, "ratio", 16)[0]
	if want := 1 + 2*len(hostilebatch.Codecs)*realRecords; len(read) != want || read[want-1].Offset != int64(want-1) {
		t.Fatalf("read %d records of partition 0, want the %d real ones at offsets 0..%d", len(read), want, want-1)
	}

	// Bombs stored under a raised ratio, their max timestamp now and their
	// records older: a time lookup scans them all.
	const stored = 24
	now := time.Now().UnixMilli()
	for i := range stored {
		bomb := hostilebatch.ZstdBomb(8 << 20)
		binary.BigEndian.PutUint64(bomb[35:], uint64(now))
		resp, err := bc.Produce(ctx, &brokerpb.ProduceRequest{Partitions: []*brokerpb.ProducePartition{{Topic: "stored-bombs", Records: hostilebatch.Fix(bomb)}}})
		if err != nil || resp.Partitions[0].Error != nil {
			t.Fatalf("storing bomb %d: %v %v", i, err, resp.GetPartitions()[0].GetError())
		}
	}
	tp := client.TopicPartition{Topic: "stored-bombs"}
	lo, err := cl.ListOffsets(ctx, tp, now)
	if err != nil || lo.Offset != stored {
		t.Fatalf("ListOffsets(%d) over %d stored bombs: %+v, %v; want the high watermark", now, stored, lo, err)
	}
	endPeak := peak()
	t.Logf("broker peak RSS %d MiB before the bombs, %d MiB after (bound: +%d MiB)", startPeak, endPeak, bombBrokerRSSGrowthBoundMiB)
	if endPeak-startPeak > bombBrokerRSSGrowthBoundMiB {
		t.Errorf("broker peak RSS grew by %d MiB", endPeak-startPeak)
	}

	consumeStoredBombs(t, cl, tp, stored)
}

// realRecords is how many records produceRealRecords sends per codec and
// producer to partition 0.
const realRecords = 200

// produceRealRecords sends JSON access-log records to partition 0 of
// topic, compressed with each codec, through Strata's producer and
// franz-go's.
func produceRealRecords(t *testing.T, cl *client.Client, kafkaAddrs []string, topic string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	value := func(i int) []byte {
		return fmt.Appendf(nil, `{"ts":%d,"level":"info","remote":"10.0.%d.%d","method":"GET","path":"/api/v1/orders/%d","status":200,"latency_ms":%d.%03d}`,
			time.Now().UnixMilli(), i%256, i*7%256, i*7919, i%300, i*31%1000)
	}
	for _, codec := range []client.Compression{client.CompressionGzip, client.CompressionSnappy, client.CompressionLZ4, client.CompressionZstd} {
		p, err := cl.NewProducer(client.ProducerConfig{Compression: codec})
		if err != nil {
			t.Fatal(err)
		}
		for i := range realRecords {
			r := client.NewRecord(topic, nil, value(i))
			r.Partition = 0
			if err := p.Produce(ctx, r, nil); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.Flush(ctx); err != nil {
			t.Fatalf("%s records: %v", codec, err)
		}
		if err := p.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, codec := range []kgo.CompressionCodec{kgo.GzipCompression(), kgo.SnappyCompression(), kgo.Lz4Compression(), kgo.ZstdCompression()} {
		kp := kafkaClient(t, kafkaAddrs, kgo.ProducerBatchCompression(codec), kgo.RecordPartitioner(kgo.ManualPartitioner()))
		var recs []*kgo.Record
		for i := range realRecords {
			recs = append(recs, &kgo.Record{Topic: topic, Partition: 0, Value: value(i)})
		}
		if err := kp.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatalf("franz-go records compressed with %v: %v", codec, err)
		}
	}
}

// consumeStoredBombs reads n stored bombs of 8 MiB with a consumer whose
// MaxDecodedBytes is 16 MiB. Without a bound one fetch decoded all of them
// (24 grew a consumer's heap by 309 MiB) and one Poll returned them; with
// it each Poll returns what fits, and the test process's heap holds at
// most what one Poll returned, what the fetcher decoded meanwhile, and
// the buffer of a batch being decoded into what is left (three times the
// bound), and a zstd decoder's window (8 MiB).
func consumeStoredBombs(t *testing.T, cl *client.Client, tp client.TopicPartition, n int) {
	t.Helper()
	const maxDecoded, bomb = 16 << 20, 8 << 20
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	heap := func() int64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return int64(m.HeapAlloc)
	}
	cons, err := cl.NewConsumer(client.ConsumerConfig{MaxWait: 100 * time.Millisecond, MaxDecodedBytes: maxDecoded})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	before := heap()
	if err := cons.Assign(ctx, map[client.TopicPartition]client.Offset{tp: client.OffsetEarliest()}); err != nil {
		t.Fatal(err)
	}
	var grown int64
	for read := 0; read < n; {
		recs, err := cons.Poll(ctx)
		if err != nil {
			t.Fatal(err)
		}
		grown = max(grown, heap()-before) // with recs still held
		if len(recs) > maxDecoded/bomb {
			t.Fatalf("a Poll returned %d records of 8 MiB, more than fit in %d MiB", len(recs), maxDecoded>>20)
		}
		for _, r := range recs {
			if r.Offset != int64(read) || len(r.Value) != bomb {
				t.Fatalf("record at %d of %d bytes, want %d of %d", r.Offset, len(r.Value), read, bomb)
			}
			read++
		}
	}
	t.Logf("consumer heap grew by at most %.1f MiB reading %d stored bombs of 8 MiB (MaxDecodedBytes %d MiB)", float64(grown)/(1<<20), n, maxDecoded>>20)
	if grown > 3*maxDecoded+16<<20 {
		t.Errorf("consumer heap grew by %d bytes, want at most three times MaxDecodedBytes (%d), a zstd window and change", grown, maxDecoded)
	}
}

// rawBroker is a gRPC stub of the broker at addr, with none of the
// client's checks: what a hostile client sends, the broker gets. Closed
// by the test's cleanup.
func rawBroker(t *testing.T, addr string) brokerpb.BrokerClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return brokerpb.NewBrokerClient(conn)
}
