package stream

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/strata-log/strata/client"
	"github.com/strata-log/strata/cmd/strata/internal/cli"
)

// EndCheck is how often consume -e (and a group member, which also
// commits between polls) re-checks while no records arrive.
const EndCheck = 500 * time.Millisecond

// outputBufferBytes is the buffer between the records and stdout; it is
// flushed after every polled batch (S3).
const outputBufferBytes = 64 << 10

// RecordWriter prints consumed records: with a cli.RecordFormat, or as
// one JSON object per line (cli.JSONRecord) when Format is nil.
type RecordWriter struct {
	out    *bufio.Writer
	format *cli.RecordFormat
	buf    []byte
	cr     cli.ConsumedRecord
}

// NewRecordWriter writes to w in format, or JSON when format is nil.
func NewRecordWriter(w io.Writer, format *cli.RecordFormat) *RecordWriter {
	return &RecordWriter{out: bufio.NewWriterSize(w, outputBufferBytes), format: format}
}

// Write prints one record (buffered: Flush writes it out).
func (w *RecordWriter) Write(r *client.Record) error {
	w.cr = cli.ConsumedRecord{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset,
		TimestampMs: r.Timestamp.UnixMilli(), Key: r.Key, Value: r.Value, Headers: w.cr.Headers[:0]}
	for _, h := range r.Headers {
		w.cr.Headers = append(w.cr.Headers, cli.RecordHeader{Key: h.Key, Value: h.Value})
	}
	if w.format == nil {
		b, err := json.Marshal(cli.NewJSONRecord(&w.cr))
		if err != nil {
			return err
		}
		w.buf = append(append(w.buf[:0], b...), '\n')
	} else {
		w.buf = w.format.Append(w.buf[:0], &w.cr)
	}
	_, err := w.out.Write(w.buf)
	return err
}

// Flush writes the buffered records out.
func (w *RecordWriter) Flush() error { return w.out.Flush() }

// Source is what Loop reads: a plain consumer (PartitionSource) or a
// group member (GroupMember).
type Source interface {
	Poll(ctx context.Context) ([]*client.Record, error)
	// AtEnd reports whether every partition read is at its end.
	AtEnd() bool
}

// Loop prints what a Source returns.
type Loop struct {
	// Count stops after this many records (0: no limit).
	Count int64
	// ExitAtEnd stops once the source is at its end.
	ExitAtEnd bool
	// PollTimeout bounds each poll (0: unbounded), so that ExitAtEnd and
	// BeforePoll get to run while no records arrive.
	PollTimeout time.Duration
	// BeforePoll, when set, runs before every poll (a group member
	// commits from it).
	BeforePoll func(ctx context.Context)
	// Printed, when set, sees every record once it is written.
	Printed func(r *client.Record)
}

// Run prints src's records to w until Count, the end (ExitAtEnd), an
// error, or ctx ending (a clean stop: nil, S1). It flushes w after every
// batch (S3).
func (l Loop) Run(ctx context.Context, src Source, w *RecordWriter) error {
	defer w.Flush()
	var printed int64
	for {
		if l.BeforePoll != nil {
			l.BeforePoll(ctx)
		}
		if l.ExitAtEnd && src.AtEnd() {
			return nil
		}
		pollCtx, cancelPoll := ctx, context.CancelFunc(func() {})
		if l.PollTimeout > 0 {
			pollCtx, cancelPoll = context.WithTimeout(ctx, l.PollTimeout)
		}
		recs, err := src.Poll(pollCtx)
		cancelPoll()
		if ctx.Err() != nil {
			return nil // Ctrl-C: a clean stop
		}
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		for _, r := range recs {
			if err := w.Write(r); err != nil {
				return err
			}
			if l.Printed != nil {
				l.Printed(r)
			}
			printed++
			if l.Count > 0 && printed >= l.Count {
				return w.Flush()
			}
		}
		if err := w.Flush(); err != nil {
			return err
		}
	}
}

// PartitionSource reads assigned partitions with a client.Consumer.
type PartitionSource struct {
	*client.Consumer
	tps []client.TopicPartition
	// end is each partition's high watermark when consume started: the
	// end until a fetch reports a newer one.
	end map[client.TopicPartition]int64
	// empty partitions (start == end) are at their end even before a
	// position is known.
	empty map[client.TopicPartition]bool
}

// Assign assigns partition (or every partition, for -1) of topic at
// spec. withEnds looks up each partition's current end for AtEnd. A
// partition the topic does not have is a usage error.
func Assign(ctx context.Context, c *client.Client, topic string, partition int32, spec cli.OffsetSpec, withEnds bool) (*PartitionSource, error) {
	tps, err := topicPartitions(ctx, c, topic, partition)
	if err != nil {
		return nil, err
	}
	src := &PartitionSource{tps: tps, end: map[client.TopicPartition]int64{}, empty: map[client.TopicPartition]bool{}}
	if withEnds {
		for _, tp := range src.tps {
			resp, err := c.ListOffsets(ctx, tp, -1)
			if err != nil {
				return nil, fmt.Errorf("end of %s: %w", tp, err)
			}
			src.end[tp] = resp.GetOffset()
			src.empty[tp] = resp.GetLogStartOffset() >= resp.GetOffset()
		}
	}
	cons, err := c.NewConsumer(client.ConsumerConfig{})
	if err != nil {
		return nil, err
	}
	assign := map[client.TopicPartition]client.Offset{}
	for _, tp := range src.tps {
		assign[tp] = ClientOffset(spec)
	}
	if err := cons.Assign(ctx, assign); err != nil {
		cons.Close()
		return nil, err
	}
	src.Consumer = cons
	return src, nil
}

// topicPartitions is partition of topic, or every partition for -1.
func topicPartitions(ctx context.Context, c MetadataSource, topic string, partition int32) ([]client.TopicPartition, error) {
	n, err := PartitionCount(ctx, c, topic)
	if err != nil {
		return nil, err
	}
	switch {
	case partition >= n:
		return nil, cli.Exit(cli.ExitUsage, fmt.Errorf("-p %d: topic %s has partitions 0 to %d", partition, topic, n-1))
	case partition >= 0:
		return []client.TopicPartition{{Topic: topic, Partition: partition}}, nil
	}
	var tps []client.TopicPartition
	for p := range n {
		tps = append(tps, client.TopicPartition{Topic: topic, Partition: p})
	}
	return tps, nil
}

// AtEnd reports whether every assigned partition's position reached its
// end: the high watermark a fetch last reported, or the one Assign saw.
func (s *PartitionSource) AtEnd() bool {
	return atEnd(s.tps, s.Position, func(tp client.TopicPartition) int64 {
		if end, ok := s.HighWatermark(tp); ok {
			return end
		}
		return s.end[tp]
	}, s.empty)
}

// atEnd is AtEnd over functions, for tests.
func atEnd(tps []client.TopicPartition, position func(client.TopicPartition) (int64, bool),
	end func(client.TopicPartition) int64, empty map[client.TopicPartition]bool) bool {
	for _, tp := range tps {
		pos, ok := position(tp)
		if !ok {
			if empty[tp] {
				continue
			}
			return false
		}
		if pos < end(tp) {
			return false
		}
	}
	return true
}
