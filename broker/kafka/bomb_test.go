package kafka_test

import (
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-log/strata/recordbatch/hostilebatch"
)

// A decompression bomb of every codec (one valid record of 8 MiB of zeros
// in a batch of a few hundred bytes to 33 KB) is refused at produce over
// the Kafka listener with INVALID_RECORD and a message naming
// max.compression.ratio; records that compress as real data does, sent by
// franz-go with each codec, are stored.
func TestProduceRefusesDecompressionBombs(t *testing.T) {
	c := kafkaCluster(t, 1)
	c.CreateTopic("bombs", 1, nil)
	produce := func(records []byte) kmsg.ProduceResponseTopicPartition {
		req := kmsg.NewPtrProduceRequest()
		req.Version, req.Acks, req.TimeoutMillis = 9, -1, 5000
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = "bombs"
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Records = records
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		return rawRequest[*kmsg.ProduceResponse](t, c.KafkaAddrs()[0], req).Topics[0].Partitions[0]
	}
	// Snappy with S2's codes, which Kafka's clients cannot read.
	if r := produce(hostilebatch.SnappyBomb(4 << 10)); r.ErrorCode != kerr.CorruptMessage.Code {
		t.Fatalf("snappy with S2's codes: code %d, want CORRUPT_MESSAGE", r.ErrorCode)
	}
	for _, codec := range hostilebatch.BombCodecs {
		bomb := hostilebatch.Bomb(codec, 8<<20)
		r := produce(bomb)
		if r.ErrorCode != kerr.InvalidRecord.Code || r.ErrorMessage == nil || !strings.Contains(*r.ErrorMessage, "max.compression.ratio is 100") {
			t.Fatalf("%s bomb (%d bytes): code %d message %v, want INVALID_RECORD naming max.compression.ratio", codec, len(bomb), r.ErrorCode, r.ErrorMessage)
		}
		t.Logf("%s bomb (%d bytes): %s: %s", codec, len(bomb), kerr.ErrorForCode(r.ErrorCode), *r.ErrorMessage)
	}
	var sent []*kgo.Record
	for _, codec := range []kgo.CompressionCodec{kgo.GzipCompression(), kgo.SnappyCompression(), kgo.Lz4Compression(), kgo.ZstdCompression()} {
		p := kgoClient(t, c, kgo.ProducerBatchCompression(codec), kgo.RecordPartitioner(kgo.ManualPartitioner()))
		recs := testRecords("bombs")
		if err := p.ProduceSync(testCtx(t), recs...).FirstErr(); err != nil {
			t.Fatalf("records compressed with %v: %v", codec, err)
		}
		sent = append(sent, recs...)
	}
	got := consumeAll(t, c, "bombs", len(sent))
	if len(got) != len(sent) || got[0].Offset != 0 {
		t.Fatalf("read %d records from offset %d, want the %d sent from 0: the bombs wrote nothing", len(got), got[0].Offset, len(sent))
	}
}
