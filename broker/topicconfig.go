package broker

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/strata-log/strata/broker/partlog"
	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/tiering/compact"
)

// TopicConfig is a topic's configuration (DESIGN §2) with defaults applied.
type TopicConfig struct {
	RetentionMs     int64
	RetentionBytes  int64
	CleanupPolicy   string
	SegmentMs       int64
	SegmentBytes    int64
	Ensemble        int
	WriteQuorum     int
	AckQuorum       int
	MaxMessageBytes int
	// MaxCompressionRatio (max.compression.ratio): how many times its
	// size a produced batch's records may decompress to
	// (partlog.InflationBound).
	MaxCompressionRatio int
	MinCompactionLagMs  int64
	DeleteRetentionMs   int64
	// MaxCompactionLagMs (max.compaction.lag.ms) and
	// MinCleanableDirtyRatio (min.cleanable.dirty.ratio): when compaction
	// runs (tiering/compact.Decide).
	MaxCompactionLagMs     int64
	MinCleanableDirtyRatio float64
	// MaxTimestampAheadMs: message.timestamp.after.max.ms.
	MaxTimestampAheadMs int64
	// RemoteStorage: remote.storage.enable (tiering, when the broker has
	// a store); LocalRetentionMs: local.retention.ms.
	RemoteStorage    bool
	LocalRetentionMs int64
}

// Policy is the partition log's lifecycle policy under this config.
func (c TopicConfig) Policy() partlog.Policy {
	return partlog.Policy{
		Delete:  slices.Contains(strings.Split(c.CleanupPolicy, ","), "delete"),
		Compact: c.Compacted(),
		Compaction: compact.Policy{MinCompactionLagMs: c.MinCompactionLagMs, MaxCompactionLagMs: c.MaxCompactionLagMs,
			MinCleanableDirtyRatio: c.MinCleanableDirtyRatio},
		DeleteRetentionMs:   c.DeleteRetentionMs,
		RetentionMs:         c.RetentionMs,
		RetentionBytes:      c.RetentionBytes,
		MaxTimestampAheadMs: c.MaxTimestampAheadMs,
		// Compacted topics tier too: compaction rewrites segment
		// objects as well as ledgers (docs/compaction.md).
		RemoteStorage:    c.RemoteStorage,
		LocalRetentionMs: c.LocalRetentionMs,
	}
}

// Compacted reports whether cleanup.policy contains compact.
func (c TopicConfig) Compacted() bool {
	return slices.Contains(strings.Split(c.CleanupPolicy, ","), "compact")
}

// Limits on topics.
const (
	MaxPartitions   = 10000
	maxTopicNameLen = 249
)

// topicConfigDef describes one config key: its default and how to check a
// value.
type topicConfigDef struct {
	def   string
	check func(string) error
	set   func(*TopicConfig, string)
}

func intIn(lo, hi int64) func(string) error {
	return func(s string) error {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return fmt.Errorf("want an integer, got %q", s)
		}
		if n < lo || n > hi {
			return fmt.Errorf("%d is out of range [%d, %d]", n, lo, hi)
		}
		return nil
	}
}

func mustInt(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

const maxInt64 = int64(^uint64(0) >> 1)

var topicConfigDefs = map[string]topicConfigDef{
	"retention.ms": {"604800000", intIn(-1, maxInt64),
		func(c *TopicConfig, s string) { c.RetentionMs = mustInt(s) }},
	"retention.bytes": {"-1", intIn(-1, maxInt64),
		func(c *TopicConfig, s string) { c.RetentionBytes = mustInt(s) }},
	"cleanup.policy": {"delete", checkCleanupPolicy,
		func(c *TopicConfig, s string) { c.CleanupPolicy = normalizeCleanupPolicy(s) }},
	"segment.ms": {"604800000", intIn(1000, maxInt64),
		func(c *TopicConfig, s string) { c.SegmentMs = mustInt(s) }},
	// At most 2 GiB (Kafka's bound): a closed segment's index has a point
	// per MiB and lives in one metad value.
	"segment.bytes": {"1073741824", intIn(1<<14, 1<<31),
		func(c *TopicConfig, s string) { c.SegmentBytes = mustInt(s) }},
	"ensemble": {"3", intIn(1, 16),
		func(c *TopicConfig, s string) { c.Ensemble = int(mustInt(s)) }},
	"write.quorum": {"3", intIn(1, 16),
		func(c *TopicConfig, s string) { c.WriteQuorum = int(mustInt(s)) }},
	"ack.quorum": {"2", intIn(1, 16),
		func(c *TopicConfig, s string) { c.AckQuorum = int(mustInt(s)) }},
	"max.message.bytes": {"1048588", intIn(1024, 8<<20),
		func(c *TopicConfig, s string) { c.MaxMessageBytes = int(mustInt(s)) }},
	// Strata's own: a compressed batch inflating past this many times its
	// size is refused (partlog.DefaultMaxCompressionRatio says why 100).
	"max.compression.ratio": {"100", intIn(1, 1_000_000),
		func(c *TopicConfig, s string) { c.MaxCompressionRatio = int(mustInt(s)) }},
	"min.compaction.lag.ms": {"0", intIn(0, maxInt64),
		func(c *TopicConfig, s string) { c.MinCompactionLagMs = mustInt(s) }},
	"delete.retention.ms": {"86400000", intIn(0, maxInt64),
		func(c *TopicConfig, s string) { c.DeleteRetentionMs = mustInt(s) }},
	// Kafka's defaults: no forced compaction, compact once half of the
	// cleanable bytes are dirty.
	"max.compaction.lag.ms": {"9223372036854775807", intIn(1, maxInt64),
		func(c *TopicConfig, s string) { c.MaxCompactionLagMs = mustInt(s) }},
	"min.cleanable.dirty.ratio": {"0.5", checkRatio,
		func(c *TopicConfig, s string) { c.MinCleanableDirtyRatio, _ = strconv.ParseFloat(s, 64) }},
	// Kafka's name and (since 4.0) default: a producer clock far ahead
	// would otherwise pin its segments past retention.ms.
	"message.timestamp.after.max.ms": {"3600000", intIn(0, maxInt64),
		func(c *TopicConfig, s string) { c.MaxTimestampAheadMs = mustInt(s) }},
	// Tiering (KIP-405 names): copy closed ledgers to the broker's object
	// store, and delete the bookie copies once they are this old (-1:
	// keep them until retention.ms / retention.bytes).
	"remote.storage.enable": {"true", checkBool,
		func(c *TopicConfig, s string) { c.RemoteStorage = s == "true" }},
	"local.retention.ms": {"3600000", intIn(-1, maxInt64),
		func(c *TopicConfig, s string) { c.LocalRetentionMs = mustInt(s) }},
}

func checkRatio(s string) error {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 0 || f > 1 || math.IsNaN(f) {
		return fmt.Errorf("want a number in [0, 1], got %q", s)
	}
	return nil
}

func checkBool(s string) error {
	if s != "true" && s != "false" {
		return fmt.Errorf("want true or false, got %q", s)
	}
	return nil
}

func checkCleanupPolicy(s string) error {
	switch normalizeCleanupPolicy(s) {
	case "delete", "compact", "compact,delete":
		return nil
	}
	return fmt.Errorf("want delete, compact or compact,delete, got %q", s)
}

func normalizeCleanupPolicy(s string) string {
	parts := strings.Split(strings.ReplaceAll(s, " ", ""), ",")
	slices.Sort(parts)
	return strings.Join(slices.Compact(parts), ",")
}

// ParseTopicConfig checks set (only explicitly set keys) and returns the
// configuration with defaults for the rest. Every problem is reported.
func ParseTopicConfig(set map[string]string) (TopicConfig, error) {
	var c TopicConfig
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(set)) {
		def, ok := topicConfigDefs[name]
		if !ok {
			errs = append(errs, fmt.Errorf("unknown topic config %q (known: %s)", name, strings.Join(TopicConfigNames(), ", ")))
			continue
		}
		if err := def.check(set[name]); err != nil {
			errs = append(errs, fmt.Errorf("topic config %s: %w", name, err))
		}
	}
	if len(errs) > 0 {
		return c, errors.Join(errs...)
	}
	for name, def := range topicConfigDefs {
		v, ok := set[name]
		if !ok {
			v = def.def
		}
		def.set(&c, v)
	}
	if c.MaxCompactionLagMs < c.MinCompactionLagMs {
		return c, fmt.Errorf("topic config: max.compaction.lag.ms %d is below min.compaction.lag.ms %d", c.MaxCompactionLagMs, c.MinCompactionLagMs)
	}
	if !(c.Ensemble >= c.WriteQuorum && c.WriteQuorum >= c.AckQuorum) {
		return c, fmt.Errorf("topic config: want ensemble >= write.quorum >= ack.quorum, got %d/%d/%d", c.Ensemble, c.WriteQuorum, c.AckQuorum)
	}
	return c, nil
}

// TopicConfigNames lists the known config keys, sorted.
func TopicConfigNames() []string { return slices.Sorted(maps.Keys(topicConfigDefs)) }

// effectiveConfigs lists every config key with its value, marking defaults.
func effectiveConfigs(set map[string]string) []*brokerpb.ConfigEntry {
	out := make([]*brokerpb.ConfigEntry, 0, len(topicConfigDefs))
	for _, name := range TopicConfigNames() {
		v, ok := set[name]
		if !ok {
			v = topicConfigDefs[name].def
		}
		out = append(out, &brokerpb.ConfigEntry{Name: name, Value: v, IsDefault: !ok})
	}
	return out
}

var topicNamePattern = regexp.MustCompile(`^[a-zA-Z0-9._-]+$`)

// ValidateTopicName applies Kafka's rule: 1-249 characters of
// [a-zA-Z0-9._-], and not "." or "..".
func ValidateTopicName(name string) error {
	switch {
	case name == "":
		return errors.New("topic name is empty")
	case len(name) > maxTopicNameLen:
		return fmt.Errorf("topic name is %d characters long; at most %d are allowed", len(name), maxTopicNameLen)
	case name == "." || name == "..":
		return fmt.Errorf("topic name %q is not allowed", name)
	case !topicNamePattern.MatchString(name):
		return fmt.Errorf("topic name %q: only ASCII letters, digits, '.', '_' and '-' are allowed", name)
	}
	return nil
}
