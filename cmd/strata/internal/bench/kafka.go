package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/strata-log/strata/client"
)

// kafkaClientID names the suite's Kafka clients to the brokers.
const kafkaClientID = "strata-bench-kafka"

// kafkaProducerOpts are the options of a franz-go producer that loads
// the brokers as the Strata client's does with o: the same acks, record
// size and compression, batches bounded as the Strata client bounds them
// (o.BatchBytes, else client.DefaultBatchBytes), as many bytes buffered
// (client.DefaultMaxBufferedBytes), and keyless records kept on one
// partition per batch (KIP-480 sticky partitioning, as the Strata
// client does; kgo's default moves on every 64 KiB). Idempotence is
// kgo's default (on with acks=all). kgo lingers a batch for its whole
// linger even on an idle partition, which the Strata client never does
// (its linger applies only while a batch of the stream is in flight),
// so kgo runs with no linger: its batches then fill while its produce
// requests are in flight (at most 5 per broker), the Strata client's
// behaviour.
func kafkaProducerOpts(o *Options) ([]kgo.Opt, error) {
	acks, err := client.ParseAcks(o.Acks)
	if err != nil {
		return nil, err
	}
	codec, err := client.ParseCompression(o.Compression)
	if err != nil {
		return nil, err
	}
	opts := []kgo.Opt{kgo.ClientID(kafkaClientID), kgo.ProducerLinger(0), kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil))}
	switch acks {
	case client.AcksQuorum:
		opts = append(opts, kgo.RequiredAcks(kgo.AllISRAcks()))
	case client.AcksOne:
		opts = append(opts, kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite())
	case client.AcksNone:
		opts = append(opts, kgo.RequiredAcks(kgo.NoAck()), kgo.DisableIdempotentWrite())
	default:
		return nil, fmt.Errorf("--acks %s: Kafka has no such acks (acks=all is Strata's quorum)", o.Acks)
	}
	kcodec, ok := map[client.Compression]kgo.CompressionCodec{client.CompressionNone: kgo.NoCompression(),
		client.CompressionGzip: kgo.GzipCompression(), client.CompressionSnappy: kgo.SnappyCompression(),
		client.CompressionLZ4: kgo.Lz4Compression(), client.CompressionZstd: kgo.ZstdCompression()}[codec]
	if !ok {
		return nil, fmt.Errorf("--compression %s: no Kafka codec", o.Compression)
	}
	batch := o.BatchBytes
	if batch <= 0 {
		batch = client.DefaultBatchBytes
	}
	buffered := int64(client.DefaultMaxBufferedBytes)
	// The bytes bind, not the records (kgo's default: 50,000 records).
	records := min(math.MaxInt32, 2*buffered/int64(max(o.RecordSize, 1)))
	return append(opts, kgo.ProducerBatchCompression(kcodec), kgo.ProducerBatchMaxBytes(int32(batch)),
		kgo.MaxBufferedBytes(int(buffered)), kgo.MaxBufferedRecords(int(records))), nil
}

// kafkaConsumerOpts are the options of a consumer of the given
// partitions from the given offsets (kafkaFetchOpts).
func kafkaConsumerOpts(topic string, from map[int32]kgo.Offset) []kgo.Opt {
	return append(kafkaFetchOpts(), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: from}))
}

// kafkaFetchOpts are a franz-go consumer's fetch bounds: the Strata
// consumer's defaults (client.ConsumerConfig).
func kafkaFetchOpts() []kgo.Opt {
	return []kgo.Opt{kgo.ClientID(kafkaClientID), kgo.FetchMaxWait(client.DefaultMaxWait), kgo.FetchMaxBytes(client.DefaultMaxBytes),
		kgo.FetchMaxPartitionBytes(client.DefaultPartitionMaxBytes)}
}

// ExecuteKafka runs run's mode over the Kafka protocol, with franz-go
// clients of the brokers' Kafka listeners seeds: KafkaProduce,
// KafkaConsume or KafkaE2E. The topic must exist.
func ExecuteKafka(ctx context.Context, progress io.Writer, seeds []string, o *Options, run *Run) error {
	switch run.Mode {
	case ModeProduce:
		return KafkaProduce(ctx, progress, seeds, o, run, nil)
	case ModeConsume:
		return KafkaConsume(ctx, progress, seeds, o, run)
	}
	return KafkaE2E(ctx, progress, seeds, o, run)
}

// KafkaProduce is Produce over Kafka: o.Producers franz-go clients, each
// sending on its own schedule (B1) for o.Duration, then flushing.
// onAck, when set, sees each acknowledged record (e2e: values are then
// stamped, B2, and progress is the consumer side's).
func KafkaProduce(ctx context.Context, progress io.Writer, seeds []string, o *Options, run *Run, onAck ackFunc) error {
	opts, err := kafkaProducerOpts(o)
	if err != nil {
		return err
	}
	payload := randomPayload(o.RecordSize)
	prods := make([]*kgo.Client, 0, o.Producers)
	defer func() {
		for _, p := range prods {
			p.Close()
		}
	}()
	for range o.Producers {
		p, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seeds...)}, opts...)...)
		if err != nil {
			return err
		}
		prods = append(prods, p)
	}
	runLoad(ctx, progress, o, run, onAck, func(i int, s *schedule) {
		kafkaProduceScheduled(ctx, prods[i], s, o.Topic, payload, run, onAck)
	}, func() {
		flushAll(ctx, run, len(prods), func(ctx context.Context, i int) error { return prods[i].Flush(ctx) })
	})
	return nil
}

// kafkaProduceScheduled sends a record at each of s's times until its
// end or ctx's. Produce blocks while the client's buffer is full (the
// closed loop of a max-rate load); a record failed because ctx ended is
// no error of the run.
func kafkaProduceScheduled(ctx context.Context, p *kgo.Client, s *schedule, topic string, payload []byte, run *Run, onAck ackFunc) {
	for ctx.Err() == nil {
		sched, ok := s.wait(ctx)
		if !ok {
			return
		}
		rec := &kgo.Record{Topic: topic, Value: Value(payload, sched, onAck != nil)}
		p.Produce(ctx, rec, func(r *kgo.Record, err error) {
			now := time.Now()
			if err != nil {
				if ctx.Err() == nil {
					run.fail(err)
				}
				return
			}
			run.acknowledged(sched, now, len(r.Value), r.Partition, r.Offset, onAck)
		})
	}
}

// KafkaE2E is E2E over Kafka: KafkaProduce at o.Rate while a franz-go
// consumer of every partition, assigned from its current end, tails
// them.
func KafkaE2E(ctx context.Context, progress io.Writer, seeds []string, o *Options, run *Run) error {
	ends, err := kafkaEnds(ctx, seeds, o.Topic, run.Partitions)
	if err != nil {
		return err
	}
	from := map[int32]kgo.Offset{}
	for p, end := range ends {
		from[p] = kgo.NewOffset().At(end)
	}
	cons, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seeds...)}, kafkaConsumerOpts(o.Topic, from)...)...)
	if err != nil {
		return err
	}
	defer cons.Close()
	e := newE2EConsumer(run)
	poll := func(ctx context.Context) error {
		fs := cons.PollFetches(ctx)
		if err := fetchError(fs); err != nil {
			return err
		}
		now := time.Now()
		fs.EachRecord(func(r *kgo.Record) { e.consumed(r.Partition, r.Offset, r.Value, now) })
		return nil
	}
	return runE2E(ctx, progress, run, e, poll, func(onAck ackFunc) error {
		return KafkaProduce(ctx, io.Discard, seeds, o, run, onAck)
	})
}

// KafkaConsume is Consume over Kafka: a franz-go consumer of every
// partition, assigned from the earliest offset, reads until each reached
// the end it had at the start, or o.Duration passed.
func KafkaConsume(ctx context.Context, progress io.Writer, seeds []string, o *Options, run *Run) error {
	ends, err := kafkaEnds(ctx, seeds, o.Topic, run.Partitions)
	if err != nil {
		return err
	}
	from := map[int32]kgo.Offset{}
	tpEnds := map[client.TopicPartition]int64{}
	for p, end := range ends {
		from[p] = kgo.NewOffset().AtStart()
		tpEnds[client.TopicPartition{Topic: o.Topic, Partition: p}] = end
	}
	cons, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seeds...)}, kafkaConsumerOpts(o.Topic, from)...)...)
	if err != nil {
		return err
	}
	defer cons.Close()
	positions := map[int32]int64{}
	position := func(tp client.TopicPartition) (int64, bool) { pos, ok := positions[tp.Partition]; return pos, ok }
	run.Start = time.Now()
	runCtx, cancel := context.WithDeadline(ctx, run.Start.Add(o.Duration))
	defer cancel()
	defer run.startProgress(runCtx, progress)()
	for !reachedEnds(tpEnds, position) {
		pollCtx, cancelPoll := context.WithTimeout(runCtx, consumePollTimeout)
		fs := cons.PollFetches(pollCtx)
		cancelPoll()
		if runCtx.Err() != nil {
			return nil
		}
		if err := fetchError(fs); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			run.fail(err)
			return nil
		}
		var n, b int64
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			for _, r := range p.Records {
				b += int64(len(r.Key) + len(r.Value))
			}
			if k := len(p.Records); k > 0 {
				n += int64(k)
				positions[p.Partition] = p.Records[k-1].Offset + 1
			}
		})
		run.count(n, b)
	}
	return nil
}

// fetchError is the first error of a poll's fetches, nil when none.
func fetchError(fs kgo.Fetches) error {
	if errs := fs.Errors(); len(errs) > 0 {
		e := errs[0]
		return fmt.Errorf("%s[%d]: %w", e.Topic, e.Partition, e.Err)
	}
	return nil
}

// kafkaEnds is each partition's end offset (high watermark) by Kafka's
// ListOffsets; every one of the topic's partitions must have answered.
func kafkaEnds(ctx context.Context, seeds []string, topic string, partitions int32) (map[int32]int64, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ClientID(kafkaClientID))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	listed, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("end offsets of %s: %w", topic, err)
	}
	if err := listed.Error(); err != nil {
		return nil, fmt.Errorf("end offsets of %s: %w", topic, err)
	}
	ends := map[int32]int64{}
	listed.Each(func(o kadm.ListedOffset) { ends[o.Partition] = o.Offset })
	if int32(len(ends)) != partitions {
		return nil, fmt.Errorf("end offsets of %s: %d partitions answered, want %d", topic, len(ends), partitions)
	}
	return ends, nil
}
