package partlog

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/strata-log/strata/internal/failpoint"
	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/proto/brokerpb"
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
}

// KeepEverything is the policy of a log without one (Config's zero
// Policy).
var KeepEverything = Policy{RetentionMs: -1, RetentionBytes: -1, MaxTimestampAheadMs: -1}

// RetentionCut is what retention removes: the first Segments segments of
// the list, and why ("time" or "size").
type RetentionCut struct {
	Segments int
	Bytes    int64
	Reason   string
}

// retentionCut decides which leading segments of a partition's list may be
// deleted (P6): only closed ones (the open segment, the last, never goes),
// only a prefix, by time when a segment's newest record is older than
// r.RetentionMs before now (a segment without records counts from its creation),
// by size while what remains, openBytes of the open segment included,
// still holds at least r.RetentionBytes. It is a pure function of its inputs.
func retentionCut(segs []*brokerpb.LedgerSegment, openBytes int64, nowMs int64, r Policy) RetentionCut {
	var cut RetentionCut
	if !r.Delete {
		return cut
	}
	total := openBytes
	for _, s := range segs {
		if s.Closed {
			total += s.Bytes
		}
	}
	for _, s := range segs {
		if !s.Closed {
			break
		}
		newest := s.MaxTimestampMs
		if s.LastOffset < s.FirstOffset || newest < 0 {
			newest = s.CreatedAtMs
		}
		reason := ""
		switch {
		case r.RetentionMs >= 0 && newest < nowMs-r.RetentionMs:
			reason = "time"
		case r.RetentionBytes >= 0 && total-s.Bytes >= r.RetentionBytes:
			reason = "size"
		default:
			return cut
		}
		if cut.Reason == "" || cut.Reason == reason {
			cut.Reason = reason
		} else {
			cut.Reason = "time+size"
		}
		cut.Segments++
		cut.Bytes += s.Bytes
		total -= s.Bytes
	}
	return cut
}

// SetPolicy changes the lifecycle policy: the next batch and the next
// retention check follow it.
func (l *Log) SetPolicy(p Policy) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.mu.policy = p
}

// checkTimestamp refuses a batch stamped too far ahead (Policy).
func (l *Log) checkTimestamp(maxTimestampMs int64, now time.Time) error {
	l.mu.Lock()
	ahead := l.mu.policy.MaxTimestampAheadMs
	l.mu.Unlock()
	if ahead >= 0 && maxTimestampMs > now.UnixMilli()+ahead {
		return fmt.Errorf("%w: newest record at %s is %s ahead of the broker's clock, at most %s allowed (message.timestamp.after.max.ms)",
			ErrInvalidTimestamp, time.UnixMilli(maxTimestampMs).UTC().Format(time.RFC3339Nano),
			time.UnixMilli(maxTimestampMs).Sub(now).Round(time.Millisecond), time.Duration(ahead)*time.Millisecond)
	}
	return nil
}

// EnforceRetention deletes what the retention policy no longer keeps (P6):
// one CAS removes the leading segments from the list and moves the log
// start offset to the first one kept, then their ledgers and indexes are
// deleted. A crash after the CAS leaves unlisted ledgers, which the
// controller's orphan sweeper deletes; a failed CAS fails the log (P3).
// The log's run goroutine calls it every RetentionCheckInterval.
func (l *Log) EnforceRetention(ctx context.Context) (RetentionCut, error) {
	select {
	case l.appendSem <- struct{}{}:
	case <-l.stop:
		return RetentionCut{}, nil
	case <-l.failed:
		return RetentionCut{}, l.Err()
	case <-ctx.Done():
		return RetentionCut{}, ctx.Err()
	}
	gone, cut, err := l.unlinkExpired(ctx)
	l.release()
	if err != nil || cut.Segments == 0 {
		return cut, err
	}
	failpoint.Hit("retention.after_cas")
	for _, s := range gone {
		l.deleteSegment(ctx, s)
	}
	l.metrics.RetentionSegments.Add(float64(cut.Segments))
	l.metrics.RetentionBytes.Add(float64(cut.Bytes))
	return cut, nil
}

// unlinkExpired is EnforceRetention's CAS.
// REQUIRES: appendSem held.
func (l *Log) unlinkExpired(ctx context.Context) ([]*brokerpb.LedgerSegment, RetentionCut, error) {
	l.mu.Lock()
	if err := l.acceptErrLocked(); err != nil {
		l.mu.Unlock()
		return nil, RetentionCut{}, nil
	}
	now := l.cfg.Now()
	cut := retentionCut(l.mu.pl.Segments, l.mu.seg.bytes, now.UnixMilli(), l.mu.policy)
	l.mu.lastRetention = now
	if cut.Segments == 0 {
		l.mu.Unlock()
		return nil, cut, nil
	}
	pl := proto.Clone(l.mu.pl).(*brokerpb.PartitionLog)
	gone := pl.Segments[:cut.Segments]
	pl.Segments = pl.Segments[cut.Segments:]
	pl.LogStartOffset = max(pl.LogStartOffset, pl.Segments[0].FirstOffset)
	version := l.mu.version
	l.mu.Unlock()

	v, err := casPartitionLog(ctx, l.cfg.Store, l.cfg.Topic, l.cfg.Partition, pl, version)
	if err != nil {
		if !errors.Is(err, ErrConflict) {
			err = fmt.Errorf("%w: %w", ErrUnknownOutcome, err)
		}
		l.fail(err)
		return nil, RetentionCut{}, err
	}
	l.mu.Lock()
	l.mu.pl, l.mu.version = pl, v
	l.mu.Unlock()
	l.log.Info("retention", "reason", cut.Reason, "segments", cut.Segments, "bytes", cut.Bytes,
		"log_start_offset", pl.LogStartOffset, "first_ledger", gone[0].LedgerId, "last_ledger", gone[len(gone)-1].LedgerId)
	return gone, cut, nil
}

// deleteSegment deletes an unlisted segment's ledger and index. Failures
// are logged: the orphan sweeper (ledger) and the bookies' own sweep
// (copies on bookies that were down) finish the job.
func (l *Log) deleteSegment(ctx context.Context, s *brokerpb.LedgerSegment) {
	l.reads.forget(s.LedgerId)
	err := ledger.Delete(ctx, l.cfg.Env, s.LedgerId)
	switch {
	case err == nil, errors.Is(err, ledger.ErrNoSuchLedger):
	case errors.Is(err, ledger.ErrDeleteIncomplete):
		l.log.Warn("retention: a bookie kept its copy of a deleted ledger", "ledger", s.LedgerId, "err", err)
	default:
		l.log.Warn("retention: deleting a ledger failed; the orphan sweeper retries", "ledger", s.LedgerId, "err", err)
		return
	}
	if err := l.cfg.Store.Delete(ctx, IndexKey(s.LedgerId)); err != nil {
		l.log.Warn("retention: deleting a ledger index failed", "ledger", s.LedgerId, "err", err)
	}
}

// LastRetention is when retention last looked at the log (zero: never).
func (l *Log) LastRetention() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.lastRetention
}
