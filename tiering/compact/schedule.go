package compact

import (
	"fmt"
	"math"
)

// SegmentSummary describes one segment of a partition's log (a ledger or a
// segment object) for the scheduling decision.
type SegmentSummary struct {
	FirstOffset, LastOffset int64
	Bytes                   int64
	// MaxTimestampMs is the newest record timestamp in the segment.
	MaxTimestampMs int64
	// Open: the segment still takes appends (the last ledger). It is
	// never compacted (C9).
	Open bool
}

// Policy is the topic's compaction configuration.
type Policy struct {
	// MinCompactionLagMs (min.compaction.lag.ms, default 0): a segment
	// whose newest record is younger than this stays uncompacted.
	MinCompactionLagMs int64
	// MaxCompactionLagMs (max.compaction.lag.ms): a dirty record older
	// than this forces compaction whatever the dirty ratio. <= 0 or
	// math.MaxInt64 disables it (Kafka's default is "infinite").
	MaxCompactionLagMs int64
	// MinCleanableDirtyRatio (min.cleanable.dirty.ratio, default 0.5).
	MinCleanableDirtyRatio float64
}

// DefaultPolicy is Kafka's defaults.
func DefaultPolicy() Policy {
	return Policy{MinCompactionLagMs: 0, MaxCompactionLagMs: math.MaxInt64, MinCleanableDirtyRatio: 0.5}
}

// Validate reports a policy no decision can honour.
func (p Policy) Validate() error {
	if p.MinCompactionLagMs < 0 {
		return fmt.Errorf("compact: min.compaction.lag.ms %d < 0", p.MinCompactionLagMs)
	}
	if p.MinCleanableDirtyRatio < 0 || p.MinCleanableDirtyRatio > 1 || math.IsNaN(p.MinCleanableDirtyRatio) {
		return fmt.Errorf("compact: min.cleanable.dirty.ratio %v outside [0, 1]", p.MinCleanableDirtyRatio)
	}
	if p.MaxCompactionLagMs > 0 && p.MaxCompactionLagMs < p.MinCompactionLagMs {
		return fmt.Errorf("compact: max.compaction.lag.ms %d < min.compaction.lag.ms %d", p.MaxCompactionLagMs, p.MinCompactionLagMs)
	}
	return nil
}

// String shows the policy with Kafka's names.
func (p Policy) String() string {
	return fmt.Sprintf("min.compaction.lag.ms=%d max.compaction.lag.ms=%d min.cleanable.dirty.ratio=%g",
		p.MinCompactionLagMs, p.MaxCompactionLagMs, p.MinCleanableDirtyRatio)
}

// Reason says why a decision compacts or not.
type Reason int

// Reasons.
const (
	ReasonNothingCleanable Reason = iota // no closed dirty segment past min.compaction.lag.ms
	ReasonBelowRatio                     // dirty ratio below min.cleanable.dirty.ratio, no record past max lag
	ReasonDirtyRatio                     // dirty ratio reached
	ReasonMaxLag                         // a dirty record is older than max.compaction.lag.ms
	// ReasonTombstonesExpired: no dirty reason to run, but a tombstone the
	// last pass kept has reached its delete horizon (Kafka's cleaner also
	// picks a log for its expired tombstones alone).
	ReasonTombstonesExpired
)

func (r Reason) String() string {
	switch r {
	case ReasonNothingCleanable:
		return "nothing-cleanable"
	case ReasonBelowRatio:
		return "below-ratio"
	case ReasonDirtyRatio:
		return "dirty-ratio"
	case ReasonMaxLag:
		return "max-lag"
	case ReasonTombstonesExpired:
		return "tombstones-expired"
	}
	return fmt.Sprintf("reason(%d)", int(r))
}

// Decision is the outcome of Decide.
type Decision struct {
	Compact bool
	Reason  Reason
	// Cleanable is how many leading segments may be compacted now: the
	// pass covers segments[:Cleanable], i.e. [log start, CleanableEnd).
	Cleanable int
	// CleanableEnd is Kafka's first uncleanable offset: the first offset
	// of segments[Cleanable] (or the last cleanable segment's last offset
	// + 1 when every segment is cleanable). Plan's endOffset.
	CleanableEnd int64
	// CleanBytes: cleanable segments wholly below cleanedOffset.
	// DirtyBytes: cleanable segments with data at or past it.
	CleanBytes, DirtyBytes int64
	DirtyRatio             float64
}

// DirtyRatio is dirtyBytes / totalBytes, 0 when totalBytes is 0.
func DirtyRatio(dirtyBytes, totalBytes int64) float64 {
	if totalBytes <= 0 {
		return 0
	}
	return float64(dirtyBytes) / float64(totalBytes)
}

// Decide says whether a partition should be compacted now, and over
// which segments. segments are the log in offset order; cleanedOffset is
// the partition's cleaned-up-to offset (everything below was compacted
// by an earlier pass); tombstoneHorizonMs is the earliest delete horizon
// of the tombstones the last pass kept (Stats.TombstoneHorizonMs; 0:
// none).
//
// The cleanable segments are the longest prefix of closed segments whose
// newest record is at least MinCompactionLagMs old (C9). Among them a
// segment is dirty if it holds offsets >= cleanedOffset (a segment cut
// by cleanedOffset counts as dirty whole: an over-estimate by less than
// one segment). Compact when DirtyBytes > 0 and the dirty ratio
// DirtyBytes/(CleanBytes+DirtyBytes) >= MinCleanableDirtyRatio, or when
// the oldest cleanable dirty segment's newest record is older than
// MaxCompactionLagMs — segment summaries carry only the newest
// timestamp, so a forced pass can come up to one segment's time span
// later than Kafka's, which reads the first batch's timestamp.
//
// Otherwise, compact when nowMs >= tombstoneHorizonMs > 0 (even with no
// dirty byte: ReasonTombstonesExpired), provided the cleanable segments
// reach cleanedOffset: the pass then rewrites the whole clean section,
// where every kept tombstone lies, and drops those past their horizon.
// When min.compaction.lag.ms holds back part of the clean section (it
// was raised after the last pass) the pass waits: a pass over part of
// it could not tell the earliest horizon left in the rest.
func Decide(segments []SegmentSummary, cleanedOffset, tombstoneHorizonMs, nowMs int64, p Policy) Decision {
	var d Decision
	for _, s := range segments {
		if s.Open || s.MaxTimestampMs > nowMs-p.MinCompactionLagMs {
			break
		}
		d.Cleanable++
		d.CleanableEnd = s.LastOffset + 1
	}
	if d.Cleanable < len(segments) {
		d.CleanableEnd = segments[d.Cleanable].FirstOffset
	}
	oldestDirty := int64(math.MaxInt64)
	for _, s := range segments[:d.Cleanable] {
		if s.LastOffset < cleanedOffset {
			d.CleanBytes += s.Bytes
			continue
		}
		d.DirtyBytes += s.Bytes
		oldestDirty = min(oldestDirty, s.MaxTimestampMs)
	}
	d.DirtyRatio = DirtyRatio(d.DirtyBytes, d.CleanBytes+d.DirtyBytes)
	tombstonesExpired := tombstoneHorizonMs > 0 && nowMs >= tombstoneHorizonMs &&
		d.Cleanable > 0 && d.CleanableEnd >= cleanedOffset
	switch {
	case d.DirtyBytes > 0 && p.MaxCompactionLagMs > 0 && p.MaxCompactionLagMs < math.MaxInt64 && nowMs-oldestDirty > p.MaxCompactionLagMs:
		d.Compact, d.Reason = true, ReasonMaxLag
	case d.DirtyBytes > 0 && d.DirtyRatio >= p.MinCleanableDirtyRatio:
		d.Compact, d.Reason = true, ReasonDirtyRatio
	case tombstonesExpired:
		d.Compact, d.Reason = true, ReasonTombstonesExpired
	case d.DirtyBytes == 0:
		d.Reason = ReasonNothingCleanable
	default:
		d.Reason = ReasonBelowRatio
	}
	return d
}
