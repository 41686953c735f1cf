package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/strata-log/strata/recordbatch"
)

// Consumer defaults.
const (
	DefaultMaxWait           = 500 * time.Millisecond
	DefaultMinBytes          = 1
	DefaultMaxBytes          = 16 << 20
	DefaultPartitionMaxBytes = 1 << 20
	// DefaultMaxDecodedBytes bounds what a consumer holds decoded ahead
	// of Poll: twice the most a broker lets one batch decompress to
	// (recordbatch.MaxDecompressedBytes), which leaves room for the
	// structures of its records.
	DefaultMaxDecodedBytes = 2 * recordbatch.MaxDecompressedBytes
)

// ConsumerConfig configures a Consumer. The zero value is usable.
type ConsumerConfig struct {
	// MaxWait is how long a fetch waits at the broker for MinBytes.
	// Default 500ms.
	MaxWait time.Duration
	// MinBytes a fetch waits for. Default 1.
	MinBytes int
	// MaxBytes bounds one fetch response. Default 16 MiB.
	MaxBytes int
	// PartitionMaxBytes bounds one partition's share of a fetch, and how
	// much the consumer buffers per partition ahead of Poll. Default 1 MiB.
	PartitionMaxBytes int
	// MaxDecodedBytes bounds what the consumer holds decoded ahead of
	// Poll, every partition together: each batch counts what decoding it
	// takes (its records as decompressed, plus the structures of its
	// records and headers: recordbatch.DecodeWithin, and the Records Poll
	// returns). A fetched batch is decoded only if it fits beside what is
	// held; the rest of the response is dropped and fetched again once
	// Poll has taken the records. (Decoding one takes, for a moment, up
	// to what is left of the bound again: its buffer grows by doubling.) A batch that does not fit alone (a
	// decompression bomb stored before brokers bounded the compression
	// ratio, or under a raised max.compression.ratio) stops its partition
	// with an error wrapping ErrBatchTooLarge that names the partition
	// and the batch's offset. Fetch responses are bounded by their
	// compressed bytes (MaxBytes); this bounds what they inflate to.
	// Default 128 MiB.
	MaxDecodedBytes int
}

func (c ConsumerConfig) withDefaults() ConsumerConfig {
	if c.MaxWait <= 0 {
		c.MaxWait = DefaultMaxWait
	}
	if c.MinBytes <= 0 {
		c.MinBytes = DefaultMinBytes
	}
	if c.MaxBytes <= 0 {
		c.MaxBytes = DefaultMaxBytes
	}
	if c.PartitionMaxBytes <= 0 {
		c.PartitionMaxBytes = DefaultPartitionMaxBytes
	}
	if c.MaxDecodedBytes <= 0 {
		c.MaxDecodedBytes = DefaultMaxDecodedBytes
	}
	return c
}

// Validate reports the first problem with c.
func (c ConsumerConfig) Validate() error {
	if c.MaxWait < 0 || c.MinBytes < 0 || c.MaxBytes < 0 || c.PartitionMaxBytes < 0 || c.MaxDecodedBytes < 0 {
		return errors.New("client: consumer config: negative value")
	}
	if c.MaxWait > time.Hour {
		return errors.New("client: consumer config: max wait above 1h")
	}
	return nil
}

func (c ConsumerConfig) String() string {
	return fmt.Sprintf("max_wait=%s min_bytes=%d max_bytes=%d partition_max_bytes=%d max_decoded_bytes=%d",
		c.MaxWait, c.MinBytes, c.MaxBytes, c.PartitionMaxBytes, c.MaxDecodedBytes)
}

// Consumer reads assigned partitions. Poll, Assign, Seek and the accessors
// are safe for concurrent use, though one goroutine polling is the usual
// shape.
type Consumer struct {
	c   *Client
	cfg ConsumerConfig
	f   *fetcher
}

// NewConsumer returns a consumer with no partitions assigned.
func (c *Client) NewConsumer(cfg ConsumerConfig) (*Consumer, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c.mu.Lock()
	closed := c.mu.closed
	c.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	return &Consumer{c: c, cfg: cfg, f: newFetcher(c, cfg)}, nil
}

// Assign adds partitions (or repositions already assigned ones), resolving
// each Offset with ListOffsets at the partition's owner.
func (c *Consumer) Assign(ctx context.Context, parts map[TopicPartition]Offset) error {
	resolved := make(map[TopicPartition]int64, len(parts))
	for tp, off := range parts {
		n, err := c.c.resolveOffset(ctx, tp, off)
		if err != nil {
			return err
		}
		resolved[tp] = n
	}
	for tp, n := range resolved {
		if err := c.f.set(tp, n); err != nil {
			return err
		}
	}
	return nil
}

// Unassign stops reading tps and drops what was fetched for them.
func (c *Consumer) Unassign(tps ...TopicPartition) { c.f.remove(tps...) }

// Seek moves tp (assigning it if needed) to off; buffered records are
// dropped.
func (c *Consumer) Seek(ctx context.Context, tp TopicPartition, off Offset) error {
	return c.Assign(ctx, map[TopicPartition]Offset{tp: off})
}

// Poll returns the records fetched so far, in offset order per partition,
// waiting until there is at least one or ctx is done. A partition whose
// position is outside its log yields an *OffsetOutOfRangeError (errors.Is
// ErrOffsetOutOfRange) once; it is not read again until Seek.
func (c *Consumer) Poll(ctx context.Context) ([]*Record, error) { return c.f.poll(ctx) }

// Position is the offset of the next record Poll returns for tp.
func (c *Consumer) Position(tp TopicPartition) (int64, bool) { return c.f.position(tp) }

// HighWatermark is tp's high watermark from the last fetch response.
func (c *Consumer) HighWatermark(tp TopicPartition) (int64, bool) { return c.f.highWatermark(tp) }

// Close stops fetching. Poll afterwards returns ErrClosed.
func (c *Consumer) Close() error {
	c.f.close()
	return nil
}

// resolveOffset turns off into an absolute offset of tp.
func (c *Client) resolveOffset(ctx context.Context, tp TopicPartition, off Offset) (int64, error) {
	switch off.kind {
	case offsetAt:
		if _, err := c.owner(ctx, tp); err != nil { // checks the partition exists
			return 0, err
		}
		return off.value, nil
	case offsetEarliest:
		resp, err := c.ListOffsets(ctx, tp, -2)
		if err != nil {
			return 0, err
		}
		return resp.Offset, nil
	case offsetLatest:
		resp, err := c.ListOffsets(ctx, tp, -1)
		if err != nil {
			return 0, err
		}
		return resp.Offset, nil
	case offsetAtTime:
		resp, err := c.ListOffsets(ctx, tp, off.value)
		if err != nil {
			return 0, err
		}
		return resp.Offset, nil
	case offsetFromEnd:
		resp, err := c.ListOffsets(ctx, tp, -1)
		if err != nil {
			return 0, err
		}
		return max(resp.Offset-off.value, resp.LogStartOffset), nil
	}
	return 0, fmt.Errorf("client: unknown offset kind %d", off.kind)
}
