package client

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/strata-log/strata/internal/testwait"
	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/recordbatch"
	"github.com/strata-log/strata/recordbatch/hostilebatch"
)

// storeBombs writes n zstd batches of a few hundred bytes, each one
// record of zeros bytes of zeros, to a topic whose max.compression.ratio
// lets them in (as one stored before brokers bounded the ratio would be).
func storeBombs(t *testing.T, cl *realCluster, topic string, n, zeros int) {
	t.Helper()
	cl.CreateTopic(topic, 1, map[string]string{"max.compression.ratio": "1000000"})
	cl.WaitServed(topic)
	bomb := hostilebatch.ZstdBomb(zeros)
	for i := range n {
		resp, err := cl.Client(0).Produce(testCtx(t), &brokerpb.ProduceRequest{
			Partitions: []*brokerpb.ProducePartition{{Topic: topic, Records: bomb}}})
		if err != nil {
			t.Fatal(err)
		}
		if r := resp.Partitions[0]; r.Error != nil || r.BaseOffset != int64(i) {
			t.Fatalf("bomb %d: %v at %d", i, r.Error, r.BaseOffset)
		}
	}
}

// heapInUse is the live heap after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// A 1 MiB fetch of 356-byte zstd batches that each inflate to 8 MiB:
// decoded whole, the 24 of them grew a consumer's heap by 309 MiB. Now
// the consumer decodes batches only while they fit in MaxDecodedBytes
// (20 MiB: two of them), leaves the rest for after Poll, and delivers
// every record, two batches per Poll.
func TestConsumerBoundsDecodedBombs(t *testing.T) {
	const bombs, zeros, maxDecoded = 24, 8 << 20, 20 << 20
	cl := startRealCluster(t, 1)
	storeBombs(t, cl, "bombs", bombs, zeros)
	c := newTestClient(t, cl)
	cons, err := c.NewConsumer(ConsumerConfig{MaxWait: 50 * time.Millisecond, MaxDecodedBytes: maxDecoded})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	before := heapInUse()
	if err := cons.Assign(testCtx(t), map[TopicPartition]Offset{{"bombs", 0}: OffsetEarliest()}); err != nil {
		t.Fatal(err)
	}
	// No Poll yet: the fetcher decodes what fits, then waits for room.
	testwait.Until(t, 10*time.Second, "the fetcher to fill its decoded bytes and wait for room", func() bool {
		cons.f.mu.Lock()
		defer cons.f.mu.Unlock()
		p := cons.f.mu.parts[TopicPartition{"bombs", 0}]
		return p != nil && p.waitRoom
	})
	grown := int64(heapInUse()) - int64(before)
	t.Logf("heap grew by %.1f MiB holding what fits of %d stored bombs of %d MiB each (bound %d MiB)", float64(grown)/(1<<20), bombs, zeros>>20, maxDecoded>>20)
	if grown > maxDecoded+4<<20 {
		t.Errorf("heap grew by %d bytes, want at most MaxDecodedBytes (%d) and change", grown, maxDecoded)
	}
	// Decompressing 24 x 8 MiB under -race takes a while on a busy
	// machine (20 s was not enough beside two other clusters): the
	// deadline only bounds a hang.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for read := 0; read < bombs; {
		recs, err := cons.Poll(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) == 0 || len(recs) > maxDecoded/zeros {
			t.Fatalf("a Poll returned %d records of %d MiB, want 1 to %d", len(recs), zeros>>20, maxDecoded/zeros)
		}
		for _, r := range recs {
			if r.Offset != int64(read) || len(r.Value) != zeros {
				t.Fatalf("record at %d with %d bytes, want %d with %d", r.Offset, len(r.Value), read, zeros)
			}
			read++
		}
	}
}

// A batch that alone decodes past MaxDecodedBytes stops its partition
// with an error naming it and the batch's offset, after the records
// before it; Seek past it reads on.
func TestConsumerBatchTooLargeNamesPartitionAndOffset(t *testing.T) {
	cl := startRealCluster(t, 1)
	storeBombs(t, cl, "big", 3, 8<<20)
	c := newTestClient(t, cl)
	cons, err := c.NewConsumer(ConsumerConfig{MaxWait: 50 * time.Millisecond, MaxDecodedBytes: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	ctx := testCtx(t)
	tp := TopicPartition{"big", 0}
	if err := cons.Assign(ctx, map[TopicPartition]Offset{tp: OffsetEarliest()}); err != nil {
		t.Fatal(err)
	}
	_, err = cons.Poll(ctx)
	if !errors.Is(err, ErrBatchTooLarge) || !strings.Contains(err.Error(), "partition big/0") || !strings.Contains(err.Error(), "offset 0") {
		t.Fatalf("Poll: %v, want ErrBatchTooLarge naming partition big/0 and offset 0", err)
	}
	t.Log(err)
	if err := cons.Seek(ctx, tp, OffsetAt(3)); err != nil {
		t.Fatal(err)
	}
	small, err := recordbatch.Encode(&recordbatch.Batch{ProducerID: -1, Records: []recordbatch.Record{{Value: []byte("after")}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Client(0).Produce(ctx, &brokerpb.ProduceRequest{Partitions: []*brokerpb.ProducePartition{{Topic: "big", Records: small}}}); err != nil {
		t.Fatal(err)
	}
	if recs := pollN(t, cons, 1); recs[0].Offset != 3 || string(recs[0].Value) != "after" {
		t.Fatalf("after the seek: %d %q", recs[0].Offset, recs[0].Value)
	}
}
