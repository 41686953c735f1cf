package partlog

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/proto/ledgerpb"
)

// Acks is the produce acknowledgement level, in brokerpb.Acks order.
type Acks int

const (
	// AcksQuorum: reply when the batch is acknowledged at the ack quorum
	// (visible to consumers). The default.
	AcksQuorum Acks = iota
	// AcksNone: reply after validation and enqueue (BaseOffset -1).
	AcksNone
	// AcksOne: reply when one bookie of the entry's write set has it.
	AcksOne
	// AcksAll: reply when every bookie of the write set has it (and it is
	// acknowledged at the quorum).
	AcksAll
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

// Defaults of Config.
const (
	DefaultSegmentBytes  = 1 << 30
	DefaultSegmentAge    = 7 * 24 * time.Hour
	DefaultIdleRoll      = 10 * time.Minute
	DefaultMaxBatchBytes = 1048588
	// DefaultMaxCompressionRatio: how many times its size a produced
	// batch's records may decompress to (max.compression.ratio). Real
	// records stay far below it: JSON and log lines measure 3 to 10 times
	// in batches of 16 KiB to 1 MiB (gzip and zstd; snappy and lz4 less),
	// and Kubernetes' OpenAPI JSON, as repetitive as real data gets, 23
	// times on average and 44 at most with zstd in 1 MiB batches.
	// Decompression bombs go far past it: zeros inflate about 230 times
	// with lz4, 1,000 with gzip, 8,000 with zstd, and without bound with
	// S2's extensions of snappy (which the snappy decoder accepts).
	DefaultMaxCompressionRatio = 100
	DefaultIndexIntervalBytes  = 1 << 20
	DefaultProducerExpiry      = 24 * time.Hour
	DefaultRollCheckInterval   = time.Second
	DefaultSequenceGapWait     = 2 * time.Second
	DefaultMaxSegmentEntries   = 1 << 20
	// producerBatches is how many batches per producer are remembered for
	// deduplication (Kafka's NUM_BATCHES_TO_RETAIN).
	producerBatches = 5
	// maxProducers is how many producers a partition's state keeps: a new
	// one beyond it evicts the longest idle (whose next batch is then
	// refused as UNKNOWN_PRODUCER_ID, as after expiry). Producer ids are
	// the client's to pick, and the state is snapshotted into the
	// PartitionLog, a metad value of at most 1 MiB: unbounded, a few
	// tens of thousands of one-batch producers made every CAS of the
	// list fail. 2,000 worst-case producers (10-byte id and epoch, five
	// batches) take about 410 KB, which leaves room for 10,000 ledgers.
	maxProducers = 2000
	// metadValueBytes is metad's largest value (metad/kv.MaxValueBytes;
	// a test keeps them equal): every PartitionLog must fit in it.
	metadValueBytes = 1 << 20
	// listSlackBytes is room a PartitionLog keeps for what tiering and
	// retention add between two rolls (a tiered segment or a queued
	// garbage object: about 150 bytes each) and for the segment a roll
	// adds (under 60 bytes).
	listSlackBytes = 64 << 10
)

// Config configures one partition's Log. Zero fields take defaults.
type Config struct {
	Topic     string
	Partition int32
	// Epoch is the owner epoch from the Assignment; it is recorded in the
	// PartitionLog and stamped in every batch (partition leader epoch).
	Epoch int64

	Env   ledger.Env
	Store Store

	// Ensemble, WriteQuorum, AckQuorum of new ledgers (ledger defaults
	// when zero).
	Ensemble, WriteQuorum, AckQuorum int
	// SegmentBytes, SegmentAge: roll the open segment when it holds this
	// many bytes, or is this old (and not empty).
	SegmentBytes int64
	SegmentAge   time.Duration
	// MaxSegmentEntries: roll the open segment when it holds this many
	// entries, whatever its bytes. It keeps 40 bytes per entry in memory,
	// so tiny batches would otherwise grow it to SegmentBytes/70 entries
	// (30M entries, 1.2 GB, for a 2 GiB segment).
	MaxSegmentEntries int
	// IdleRoll: roll a non-empty open segment with no append for this long,
	// so retention and tiering can act on quiet partitions.
	IdleRoll time.Duration
	// MaxBatchBytes: larger batches fail with ErrTooLarge.
	MaxBatchBytes int
	// MaxCompressionRatio: a compressed batch whose records decompress to
	// more than this many times its size fails with ErrInflated (see
	// InflationBound).
	MaxCompressionRatio int
	// IndexIntervalBytes: a closed segment's index has a point for entry 0
	// and at least one every IndexIntervalBytes.
	IndexIntervalBytes int64
	// ProducerExpiry: producers idle longer are dropped from snapshots.
	ProducerExpiry time.Duration
	// Digest tags the entries of the ledgers this log creates
	// (ledger.CreateOptions.Digest).
	Digest ledgerpb.DigestType
	// RollCheckInterval: how soon run checks the roll conditions again
	// when it cannot wait for a deadline (nothing appended to the open
	// segment yet) or a due roll did not happen (it failed, or a full
	// list deferred it, L1).
	RollCheckInterval time.Duration
	// Policy: retention and the timestamp bound; the zero Policy means
	// KeepEverything. SetPolicy changes it while the log is served.
	Policy Policy
	// Tier is the object-store tier (nil: none, everything stays on the
	// bookies).
	Tier *Tier
	// SequenceGapWait: how long (real time) an idempotent batch that
	// arrived ahead of its predecessors waits for them before it is
	// refused as out of order (ErrOutOfOrderSequence, or
	// ErrUnknownProducer when the partition knows no batch of its
	// producer).
	SequenceGapWait time.Duration

	// Claim, when set, is written by Open in the same metad transaction as
	// the takeover's list CAS (the broker's ownership record, under its
	// session's lease), and not at all when Open fails; Log.Claimed
	// returns it as written.
	Claim *Record

	// Authority, when set, says whether the owner may still acknowledge:
	// false once its metad session may have expired (another broker may
	// own the partition, and may have deleted the ledger this one writes:
	// a bookie's fence does not outlive a ledger's deletion). A quorum
	// acknowledgement that arrives when it is false fails the log with
	// ErrAuthorityLost (an unknown outcome) instead of counting. It is
	// asked on every acknowledgement: it must be cheap.
	Authority func() bool
	// Cache is the broker-wide tail cache (nil: none).
	Cache *TailCache
	// ReadAhead keeps what reads from the bookies fetched beyond what
	// their fetches asked for, for every partition of the broker (nil:
	// the log keeps its own, of defaultReadAheadBytes, without a budget).
	ReadAhead *ReadAhead
	Logger    *slog.Logger
	Metrics   *Metrics
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// Scheduler runs the ledger writers' background work (nil: real
	// timers); tests pass ledgertest's.
	Scheduler ledger.Scheduler
}

func (c Config) withDefaults() Config {
	if c.SegmentBytes == 0 {
		c.SegmentBytes = DefaultSegmentBytes
	}
	if c.SegmentAge == 0 {
		c.SegmentAge = DefaultSegmentAge
	}
	if c.IdleRoll == 0 {
		c.IdleRoll = DefaultIdleRoll
	}
	if c.MaxSegmentEntries == 0 {
		c.MaxSegmentEntries = DefaultMaxSegmentEntries
	}
	if c.MaxBatchBytes == 0 {
		c.MaxBatchBytes = DefaultMaxBatchBytes
	}
	if c.MaxCompressionRatio == 0 {
		c.MaxCompressionRatio = DefaultMaxCompressionRatio
	}
	if c.IndexIntervalBytes == 0 {
		c.IndexIntervalBytes = DefaultIndexIntervalBytes
	}
	if c.ProducerExpiry == 0 {
		c.ProducerExpiry = DefaultProducerExpiry
	}
	if c.RollCheckInterval == 0 {
		c.RollCheckInterval = DefaultRollCheckInterval
	}
	if c.SequenceGapWait == 0 {
		c.SequenceGapWait = DefaultSequenceGapWait
	}
	if c.Policy == (Policy{}) {
		c.Policy = KeepEverything
	}
	if c.Tier != nil {
		c.Tier = c.Tier.withDefaults()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Metrics == nil {
		c.Metrics = NewMetrics(nil)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.ReadAhead == nil {
		c.ReadAhead = NewReadAhead(defaultReadAheadBytes, nil)
	}
	return c
}

// Validate reports the first problem with c (after defaults).
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	if c.Topic == "" {
		errs = append(errs, errors.New("empty topic"))
	}
	if c.Partition < 0 {
		errs = append(errs, fmt.Errorf("partition %d", c.Partition))
	}
	if c.Store == nil {
		errs = append(errs, errors.New("no Store"))
	}
	if c.Tier != nil && (c.Tier.Store == nil || c.Tier.Reader == nil || c.Tier.KeyPrefix == "") {
		errs = append(errs, errors.New("a Tier needs a Store, a Reader and a KeyPrefix"))
	}
	if c.Env.Meta == nil || c.Env.Bookies == nil || c.Env.Registry == nil {
		errs = append(errs, errors.New("the ledger Env needs Meta, Bookies and Registry"))
	}
	if c.SegmentBytes < 0 || c.SegmentAge < 0 || c.IdleRoll < 0 || c.MaxBatchBytes < 0 || c.MaxCompressionRatio < 0 || c.MaxSegmentEntries < 0 ||
		c.IndexIntervalBytes < 0 || c.ProducerExpiry < 0 || c.RollCheckInterval < 0 || c.SequenceGapWait < 0 {
		errs = append(errs, errors.New("negative size or duration"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("partlog: invalid config: %w", err)
	}
	return nil
}

func (c Config) String() string {
	c = c.withDefaults()
	return fmt.Sprintf("%s/%d epoch=%d E/Qw/Qa=%d/%d/%d segment=%dB/%v idle=%v maxBatch=%d maxRatio=%d index=%dB producerExpiry=%v",
		c.Topic, c.Partition, c.Epoch, c.Ensemble, c.WriteQuorum, c.AckQuorum, c.SegmentBytes, c.SegmentAge,
		c.IdleRoll, c.MaxBatchBytes, c.MaxCompressionRatio, c.IndexIntervalBytes, c.ProducerExpiry)
}

func (c Config) createOptions() ledger.CreateOptions {
	return ledger.CreateOptions{
		EnsembleSize: c.Ensemble, WriteQuorum: c.WriteQuorum, AckQuorum: c.AckQuorum,
		Properties: map[string]string{"topic": c.Topic, "partition": fmt.Sprint(c.Partition)},
		Scheduler:  c.Scheduler,
		Digest:     c.Digest,
	}
}
