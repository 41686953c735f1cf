package partlog

import (
	"fmt"
	"time"

	"github.com/strata-log/strata/tiering/compact"
)

// Policy is a topic's data lifecycle: its delete policy (retention), and
// the bound on producer timestamps that keeps time retention honest (a
// record stamped years ahead would pin its segment forever).
type Policy struct {
	// Delete: cleanup.policy contains delete (false: retention keeps
	// everything).
	Delete bool
	// RetentionMs: a closed segment whose newest record is older than this
	// goes; -1: no time limit.
	RetentionMs int64
	// RetentionBytes: closed segments go, oldest first, while the rest
	// still holds at least this many bytes; -1: no size limit.
	RetentionBytes int64
	// MaxTimestampAheadMs: Append refuses a batch whose newest timestamp is
	// more than this ahead of the broker's clock (Kafka's
	// message.timestamp.after.max.ms); -1: no bound.
	MaxTimestampAheadMs int64
	// RemoteStorage: closed ledgers are copied to the object store (with
	// a Tier; remote.storage.enable).
	RemoteStorage bool
	// LocalRetentionMs: a ledger an object covers is deleted from the
	// bookies once its newest record is older than this; -1: kept until
	// retention (local.retention.ms).
	LocalRetentionMs int64
	// Compact: cleanup.policy contains compact (P7); Compaction is its
	// schedule (min/max.compaction.lag.ms, min.cleanable.dirty.ratio) and
	// DeleteRetentionMs how long a tombstone survives a pass
	// (delete.retention.ms).
	Compact           bool
	Compaction        compact.Policy
	DeleteRetentionMs int64
}

// KeepEverything is the policy of a log without one (Config's zero
// Policy).
var KeepEverything = Policy{RetentionMs: -1, RetentionBytes: -1, MaxTimestampAheadMs: -1, LocalRetentionMs: -1}

// SetPolicy changes the lifecycle policy: the next batch, the next
// retention check and the roll deadlines (max.compaction.lag.ms) follow it.
func (l *Log) SetPolicy(p Policy) {
	l.mu.Lock()
	l.mu.policy = p
	l.mu.Unlock()
	l.rolls.poke()
}

// checkTimestamp refuses a batch stamped more than ahead ms after now
// (Policy.MaxTimestampAheadMs; -1: no bound).
func checkTimestamp(maxTimestampMs, ahead int64, now time.Time) error {
	if ahead >= 0 && maxTimestampMs > now.UnixMilli()+ahead {
		return fmt.Errorf("%w: newest record at %s is %s ahead of the broker's clock, at most %s allowed (message.timestamp.after.max.ms)",
			ErrInvalidTimestamp, time.UnixMilli(maxTimestampMs).UTC().Format(time.RFC3339Nano),
			time.UnixMilli(maxTimestampMs).Sub(now).Round(time.Millisecond), time.Duration(ahead)*time.Millisecond)
	}
	return nil
}
