package client

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/strata-log/strata/recordbatch"
)

// Header is one record header: an ordered key/bytes pair.
type Header struct {
	Key   string
	Value []byte
}

// Record is one record as produced or consumed.
type Record struct {
	Topic string
	// Partition: on produce, -1 lets the partitioner choose (NewRecord sets
	// -1); keyed records go to recordbatch.PartitionForKey, keyless ones to a
	// sticky partition. On delivery and consume it is the actual partition.
	Partition int32
	Key       []byte // nil = no key
	Value     []byte // nil = tombstone
	Headers   []Header
	// Timestamp: on produce, zero means now.
	Timestamp time.Time
	// Offset is set on delivery (-1 with AcksNone) and on consume.
	Offset int64
}

// NewRecord returns a record for topic with the partitioner choosing the
// partition.
func NewRecord(topic string, key, value []byte) *Record {
	return &Record{Topic: topic, Partition: -1, Key: key, Value: value, Offset: -1}
}

// TopicPartition names one partition.
type TopicPartition struct {
	Topic     string
	Partition int32
}

func (tp TopicPartition) String() string { return tp.Topic + "/" + strconv.Itoa(int(tp.Partition)) }

// Acks is how much durability a produce waits for.
type Acks int

// Acks levels, in the order of brokerpb.Acks.
const (
	AcksQuorum Acks = iota // ack quorum of bookies fsynced (default)
	AcksNone               // fire and forget
	AcksOne                // one bookie fsynced
	AcksAll                // every bookie of the write set fsynced
)

func (a Acks) String() string {
	switch a {
	case AcksQuorum:
		return "quorum"
	case AcksNone:
		return "none"
	case AcksOne:
		return "one"
	case AcksAll:
		return "all"
	}
	return fmt.Sprintf("Acks(%d)", int(a))
}

// ParseAcks parses "none|one|quorum|all" (also Kafka's "0", "1", "-1").
func ParseAcks(s string) (Acks, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "quorum", "":
		return AcksQuorum, nil
	case "none", "0":
		return AcksNone, nil
	case "one", "1":
		return AcksOne, nil
	case "all", "-1":
		return AcksAll, nil
	}
	return 0, fmt.Errorf("client: acks %q: want none, one, quorum or all", s)
}

// Compression is a record batch codec.
type Compression = recordbatch.Compression

// Codecs.
const (
	CompressionNone   = recordbatch.CompressionNone
	CompressionGzip   = recordbatch.CompressionGzip
	CompressionSnappy = recordbatch.CompressionSnappy
	CompressionLZ4    = recordbatch.CompressionLZ4
	CompressionZstd   = recordbatch.CompressionZstd
)

// ParseCompression parses "none|gzip|snappy|lz4|zstd".
func ParseCompression(s string) (Compression, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "none", "":
		return CompressionNone, nil
	case "gzip":
		return CompressionGzip, nil
	case "snappy":
		return CompressionSnappy, nil
	case "lz4":
		return CompressionLZ4, nil
	case "zstd":
		return CompressionZstd, nil
	}
	return 0, fmt.Errorf("client: compression %q: want none, gzip, snappy, lz4 or zstd", s)
}

// Offset says where a consumer starts reading a partition.
type Offset struct {
	kind  offsetKind
	value int64
}

type offsetKind int8

const (
	offsetAt offsetKind = iota
	offsetEarliest
	offsetLatest
	offsetAtTime
	offsetFromEnd
)

// OffsetEarliest is the log start offset.
func OffsetEarliest() Offset { return Offset{kind: offsetEarliest} }

// OffsetLatest is the high watermark: only records produced from now on.
func OffsetLatest() Offset { return Offset{kind: offsetLatest} }

// OffsetAt is offset n exactly; Poll reports ErrOffsetOutOfRange if n is
// outside the log.
func OffsetAt(n int64) Offset { return Offset{kind: offsetAt, value: n} }

// OffsetAtTime is the first record whose timestamp is >= t (the high
// watermark if there is none).
func OffsetAtTime(t time.Time) Offset { return Offset{kind: offsetAtTime, value: t.UnixMilli()} }

// OffsetFromEnd is the high watermark minus n, but not below the log start.
func OffsetFromEnd(n int64) Offset { return Offset{kind: offsetFromEnd, value: n} }

func (o Offset) String() string {
	switch o.kind {
	case offsetEarliest:
		return "earliest"
	case offsetLatest:
		return "latest"
	case offsetAtTime:
		return "at-time:" + time.UnixMilli(o.value).UTC().Format(time.RFC3339Nano)
	case offsetFromEnd:
		return "from-end:" + strconv.FormatInt(o.value, 10)
	}
	return strconv.FormatInt(o.value, 10)
}
