package group

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/recordbatch"
)

// OffsetsLog is the coordinator's view of its __consumer_offsets partition.
type OffsetsLog interface {
	// Append writes records as one batch and returns once it is durable at
	// the write quorum, or once the log refused or failed it. It must not
	// give up while the records may still become durable but when ctx
	// ends, which the coordinator does only when it closes (doc.go, W4).
	Append(ctx context.Context, records []recordbatch.Record) error
	// Replay calls fn for every record from the log start to the end as of
	// the call, in offset order, and stops at fn's first error.
	Replay(ctx context.Context, fn func(recordbatch.Record) error) error
}

// SkippingReplayer is an OffsetsLog that can step over batches it reads
// but cannot decode; the coordinator prefers ReplaySkipping when the log
// has it. One poison batch must not stop the coordinator of every group of
// the partition from loading, for good.
type SkippingReplayer interface {
	// ReplaySkipping is Replay, except that an undecodable batch is
	// reported to skip (its base offset and why) and stepped over. Read
	// errors still fail the replay.
	ReplaySkipping(ctx context.Context, fn func(recordbatch.Record) error, skip func(offset int64, err error)) error
}

// TopicSource tells the coordinator which topics exist and how many
// partitions they have. Partitions is called on every KIP-848 heartbeat
// for the group's subscribed topics and on commits, so it must be cheap
// (the broker's metadata cache). Both are called without the
// coordinator's lock held.
type TopicSource interface {
	// Partitions returns the topic's partition count: 0 (or an error
	// wrapping ErrUnknownTopic) when the topic does not exist.
	Partitions(ctx context.Context, topic string) (int32, error)
	// TopicNames lists the topics a subscription regex may match (the
	// live topics, internal ones excluded). Called when a member
	// subscribes with a new regex, at Load for groups with regex
	// subscriptions, and by Tick every RegexRefreshInterval while some
	// group has one.
	TopicNames(ctx context.Context) ([]string, error)
}

// Config configures one Coordinator (one owned __consumer_offsets partition).
type Config struct {
	// Partition is the __consumer_offsets partition this coordinator serves.
	Partition int32
	// CoordinatorID is reported as coordinator_id by ListGroups and
	// DescribeGroup (the broker id).
	CoordinatorID string
	Log           OffsetsLog
	Topics        TopicSource
	// Now is the clock; time.Now when nil.
	Now    func() time.Time
	Logger *slog.Logger
	// Metrics are shared by the broker's coordinators (unregistered when
	// nil); so is the count of groups Limits.MaxGroups bounds, kept there.
	Metrics *Metrics

	// SessionTimeout is used when a member asks for none (default 45s); a
	// member may ask for one in [MinSessionTimeout, MaxSessionTimeout]
	// (defaults 6s and 300s).
	SessionTimeout    time.Duration
	MinSessionTimeout time.Duration
	MaxSessionTimeout time.Duration
	// HeartbeatInterval is told to members (default 3s).
	HeartbeatInterval time.Duration
	// RebalanceTimeout is used when a member asks for none (default 300s):
	// a member that has not revoked the partitions it must give up within it
	// is fenced (removed from the group).
	RebalanceTimeout time.Duration
	// InitialRebalanceDelay: the first round of an empty classic group
	// waits this long for more members (each new member pushes it again,
	// within the rebalance timeout), so members started together join
	// one generation (Kafka's group.initial.rebalance.delay.ms, 3 s
	// there). Default 300 ms: clients started together arrive well within
	// it, and a lone consumer starts fast. Negative: no delay.
	InitialRebalanceDelay time.Duration
	// RegexRefreshInterval: how often Tick re-resolves KIP-848 regex
	// subscriptions against the topics that exist (default 10 s).
	RegexRefreshInterval time.Duration
	// TickInterval is how often the background loop expires sessions and
	// rebalance timeouts (default 1s). Negative: no background loop (tests
	// and callers drive Tick themselves).
	TickInterval time.Duration
	// WriteTimeout bounds each run of the background loop but for its
	// appends, which end only with their outcome or Close (default 10s).
	WriteTimeout time.Duration
	// OffsetsRetention: a committed offset of a group without members is
	// deleted once it is older than this (default 7 days, Kafka's
	// offsets.retention.minutes); a group left with no member and no offset
	// is deleted. Offsets of groups with members never expire (KIP-211).
	OffsetsRetention time.Duration
	// Limits bound what clients can make the coordinator hold; zero
	// fields take DefaultLimits.
	Limits Limits
	// PartitionError renders a commit's per-partition refusal (an error
	// wrapping ErrInvalid, ErrPartitionNotHeld or ErrUnknownPartition)
	// for the response. The broker passes its one error translation
	// table (broker/errors.go), so the coordinator maps no error to a
	// status itself. When nil the refusal carries only its message, with
	// code UNKNOWN.
	PartitionError func(error) *brokerpb.PartitionError
	// Authority, when set, says whether this coordinator may still answer:
	// false once its broker's metad session may have expired (a paused or
	// cut-off broker whose partition another broker may now serve). Every
	// call is then refused with ErrClosed (NOT_COORDINATOR) instead of
	// answered from what may be stale memory. Asked on every call: it must
	// be cheap.
	Authority func() bool
}

func (c *Config) setDefaults() {
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Metrics == nil {
		c.Metrics = NewMetrics(nil)
	}
	if c.PartitionError == nil {
		c.PartitionError = func(err error) *brokerpb.PartitionError {
			return &brokerpb.PartitionError{Code: int32(codes.Unknown), Message: err.Error()}
		}
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.SessionTimeout, 45*time.Second)
	def(&c.MinSessionTimeout, 6*time.Second)
	def(&c.MaxSessionTimeout, 300*time.Second)
	def(&c.HeartbeatInterval, 3*time.Second)
	def(&c.RebalanceTimeout, 300*time.Second)
	def(&c.TickInterval, time.Second)
	def(&c.InitialRebalanceDelay, 300*time.Millisecond)
	def(&c.RegexRefreshInterval, 10*time.Second)
	def(&c.WriteTimeout, 10*time.Second)
	def(&c.OffsetsRetention, 7*24*time.Hour)
	c.Limits.setDefaults()
}

// Validate says what is wrong with the configuration (after defaults), or nil.
func (c Config) Validate() error {
	c.setDefaults()
	switch {
	case c.Log == nil:
		return fmt.Errorf("%w: config: Log is required", ErrInvalid)
	case c.Topics == nil:
		return fmt.Errorf("%w: config: Topics is required", ErrInvalid)
	case c.Partition < 0:
		return fmt.Errorf("%w: config: Partition %d < 0", ErrInvalid, c.Partition)
	case c.MinSessionTimeout <= 0 || c.MinSessionTimeout > c.MaxSessionTimeout:
		return fmt.Errorf("%w: config: session timeout bounds [%s, %s]", ErrInvalid, c.MinSessionTimeout, c.MaxSessionTimeout)
	case c.SessionTimeout < c.MinSessionTimeout || c.SessionTimeout > c.MaxSessionTimeout:
		return fmt.Errorf("%w: config: SessionTimeout %s outside [%s, %s]", ErrInvalid, c.SessionTimeout, c.MinSessionTimeout, c.MaxSessionTimeout)
	case c.HeartbeatInterval <= 0 || c.HeartbeatInterval >= c.SessionTimeout:
		return fmt.Errorf("%w: config: HeartbeatInterval %s must be in (0, SessionTimeout)", ErrInvalid, c.HeartbeatInterval)
	case c.RebalanceTimeout <= 0:
		return fmt.Errorf("%w: config: RebalanceTimeout %s <= 0", ErrInvalid, c.RebalanceTimeout)
	case c.RegexRefreshInterval <= 0:
		return fmt.Errorf("%w: config: RegexRefreshInterval %s <= 0", ErrInvalid, c.RegexRefreshInterval)
	case c.OffsetsRetention < 0:
		return fmt.Errorf("%w: config: OffsetsRetention %s < 0", ErrInvalid, c.OffsetsRetention)
	}
	return c.Limits.validate()
}

func (c Config) String() string {
	return fmt.Sprintf("group.Config{Partition: %d, SessionTimeout: %s [%s, %s], HeartbeatInterval: %s, RebalanceTimeout: %s, InitialRebalanceDelay: %s, RegexRefreshInterval: %s, TickInterval: %s, OffsetsRetention: %s, Limits: %s}",
		c.Partition, c.SessionTimeout, c.MinSessionTimeout, c.MaxSessionTimeout, c.HeartbeatInterval, c.RebalanceTimeout, c.InitialRebalanceDelay, c.RegexRefreshInterval, c.TickInterval, c.OffsetsRetention, c.Limits)
}
