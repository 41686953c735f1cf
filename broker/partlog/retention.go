package partlog

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/strata-log/strata/internal/failpoint"
	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/proto/brokerpb"
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

// RetentionCut is what retention removes: the first Pieces pieces of the
// log (tiered segments, then ledgers), up to offset Start (the new log
// start), and why ("time", "size" or "time+size").
type RetentionCut struct {
	Pieces int
	Bytes  int64
	Start  int64
	Reason string
}

// piece is one deletable unit of a partition's log, in offset order: a
// tiered segment object, or a ledger the tiered segments do not cover.
type piece struct {
	first, last int64
	bytes       int64
	maxTs       int64 // -1: no record
	createdAtMs int64
	closed      bool
}

// logPieces lists the log as retention sees it: the tiered segments, then
// the ledgers after them (ledgers an object covers are local copies, not
// more data); openBytes is the open ledger's live size. A piece's bytes
// are its batches' (an object's data section, not its index and footer),
// so that retention.bytes measures the same data in either tier.
func logPieces(pl *brokerpb.PartitionLog, openBytes int64) []piece {
	var out []piece
	for _, t := range pl.GetTiered() {
		out = append(out, piece{first: t.BaseOffset, last: t.LastOffset, bytes: t.DataBytes, maxTs: t.MaxTimestampMs,
			createdAtMs: t.CommittedAtMs, closed: true})
	}
	end := tieredEnd(pl)
	for _, s := range pl.GetSegments() {
		if end >= 0 && s.LastOffset < end {
			continue
		}
		p := piece{first: s.FirstOffset, last: s.LastOffset, bytes: s.Bytes, maxTs: s.MaxTimestampMs,
			createdAtMs: s.CreatedAtMs, closed: s.Closed}
		if !s.Closed {
			p.bytes = openBytes
		}
		out = append(out, p)
	}
	return out
}

// retentionCut decides which leading pieces of a partition's log may be
// deleted (P6): only closed ones (the open ledger, the last, never goes),
// only a prefix, by time when a piece's newest record is older than
// r.RetentionMs before now (a piece without records counts from its
// creation), by size while what remains still holds at least
// r.RetentionBytes. It is a pure function of its inputs.
func retentionCut(pieces []piece, nowMs int64, r Policy) RetentionCut {
	var cut RetentionCut
	if !r.Delete {
		return cut
	}
	var total int64
	for _, p := range pieces {
		total += p.bytes
	}
	for _, p := range pieces {
		if !p.closed {
			break
		}
		newest := p.maxTs
		if p.last < p.first || newest < 0 {
			newest = p.createdAtMs
		}
		reason := ""
		switch {
		case r.RetentionMs >= 0 && newest < nowMs-r.RetentionMs:
			reason = "time"
		case r.RetentionBytes >= 0 && total-p.bytes >= r.RetentionBytes:
			reason = "size"
		default:
			return cut
		}
		if cut.Reason == "" || cut.Reason == reason {
			cut.Reason = reason
		} else {
			cut.Reason = "time+size"
		}
		cut.Pieces++
		cut.Bytes += p.bytes
		cut.Start = p.last + 1
		total -= p.bytes
	}
	return cut
}

// SetPolicy changes the lifecycle policy: the next batch, the next
// retention check and the roll deadlines (max.compaction.lag.ms) follow it.
func (l *Log) SetPolicy(p Policy) {
	l.mu.Lock()
	l.mu.policy = p
	l.mu.Unlock()
	l.kickRun()
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
// one CAS removes the leading tiered segments and ledgers and moves the log
// start offset to the first offset kept, then their ledgers, indexes and
// objects are deleted. A crash after the CAS leaves unlisted ledgers and
// objects, which the controller's orphan sweeper and the tier's orphan
// sweep delete; a failed CAS fails the log (P3). The owner calls it
// (RetentionRound) every --retention-check-interval.
func (l *Log) EnforceRetention(ctx context.Context) (RetentionCut, error) {
	var cut RetentionCut
	var gone []*brokerpb.LedgerSegment
	var goneObjects []string
	var now time.Time
	err := l.casUnderSem(ctx, func(pl *brokerpb.PartitionLog) error {
		l.mu.Lock()
		now = l.cfg.Now()
		cut = retentionCut(logPieces(pl, l.mu.seg.bytes), now.UnixMilli(), l.mu.policy)
		l.mu.lastRetention = now
		l.mu.Unlock()
		if cut.Pieces == 0 {
			return errNothing
		}
		for len(pl.Tiered) > 0 && pl.Tiered[0].LastOffset < cut.Start {
			goneObjects = append(goneObjects, pl.Tiered[0].ObjectKey)
			// Queued in the same CAS that unlinks it (T6).
			pl.Garbage = append(pl.Garbage, &brokerpb.GarbageObject{ObjectKey: pl.Tiered[0].ObjectKey, SinceMs: now.UnixMilli()})
			pl.Tiered = pl.Tiered[1:]
		}
		for len(pl.Segments) > 0 && pl.Segments[0].Closed && pl.Segments[0].LastOffset < cut.Start {
			gone = append(gone, pl.Segments[0])
			pl.Segments = pl.Segments[1:]
		}
		pl.LogStartOffset = max(pl.LogStartOffset, cut.Start)
		return nil
	})
	if err != nil || cut.Pieces == 0 {
		return RetentionCut{}, err
	}
	l.log.Info("retention", "reason", cut.Reason, "pieces", cut.Pieces, "bytes", cut.Bytes, "log_start_offset", cut.Start,
		"ledgers", len(gone), "objects", len(goneObjects))
	failpoint.Hit("retention.after_cas")
	if n := l.deleteRemoved(ctx, gone); n < len(gone) {
		l.log.Info("retention: stopped deleting; the orphan sweeper deletes the rest", "deleted", n, "left", len(gone)-n)
	}
	if len(goneObjects) > 0 {
		if err := l.collectGarbage(ctx); err != nil {
			l.log.Warn("retention: deleting unlinked objects; the garbage queue retries", "err", err)
		}
	}
	l.metrics.RetentionSegments.Add(float64(cut.Pieces))
	l.metrics.RetentionBytes.Add(float64(cut.Bytes))
	return cut, nil
}

// retentionDeletes bounds the metadata reads and bookie calls of the
// deletions in flight. One at a time, each ledger's own metad round trips
// (its metadata read and delete, its index delete) held the log's
// goroutine (rolls, Close) for 75 s per 10,000 removed ledgers at 2.9 ms
// per metad write (TestRetentionScale); the deletes now go
// ledger.DeleteBatch to a metad transaction, and concurrent reads share
// metad's linearizable read barriers.
const retentionDeletes = 16

// deleteRemoved deletes the ledgers and indexes of segments no list names
// (a retention, compaction or tiering CAS unlinked them, or a failed
// compaction pass wrote them), ledger.DeleteBatch at a time, and returns
// how many it handled. It starts no more batches once the log stops
// (Close must not wait for thousands of deletions) or ctx ends: the rest
// are unlisted, and the controller's orphan sweeper deletes them and their
// indexes (P6).
func (l *Log) deleteRemoved(ctx context.Context, segs []*brokerpb.LedgerSegment) int {
	for done := 0; done < len(segs); done += ledger.DeleteBatch {
		select {
		case <-l.stop:
			return done
		case <-ctx.Done():
			return done
		default:
		}
		l.deleteSegments(ctx, segs[done:min(done+ledger.DeleteBatch, len(segs))])
	}
	return len(segs)
}

// deleteSegments deletes unlisted segments' ledgers and indexes
// (DeleteLedgers). Failures are logged: the orphan sweeper (ledger) and
// the bookies' own sweep (copies on bookies that were down) finish the
// job.
func (l *Log) deleteSegments(ctx context.Context, segs []*brokerpb.LedgerSegment) {
	for _, s := range segs {
		l.reads.forget(s.LedgerId)
	}
	errs, err := DeleteLedgers(ctx, l.cfg.Env, l.cfg.Store, segs)
	for i, err := range errs {
		switch {
		case err == nil, errors.Is(err, ledger.ErrNoSuchLedger):
		case errors.Is(err, ledger.ErrDeleteIncomplete):
			l.log.Warn("retention: a bookie kept its copy of a deleted ledger", "ledger", segs[i].LedgerId, "err", err)
		default:
			l.log.Warn("retention: deleting a ledger failed; the orphan sweeper retries", "ledger", segs[i].LedgerId, "err", err)
		}
	}
	if err != nil {
		l.log.Warn("retention: deleting ledger indexes failed", "ledgers", len(segs), "err", err)
	}
}

// DeleteLedgers deletes the ledgers of at most ledger.DeleteBatch segments
// that no list names (ledger.DeleteAll: their metadata in one metad
// transaction), then in one more the indexes of those whose metadata is
// gone. errs[i] is segs[i]'s outcome, ledger.DeleteAll's; indexErr is the
// index transaction's.
func DeleteLedgers(ctx context.Context, env ledger.Env, store Store, segs []*brokerpb.LedgerSegment) (errs []error, indexErr error) {
	ids := make([]uint64, len(segs))
	for i, s := range segs {
		ids[i] = s.LedgerId
	}
	return DeleteLedgerIDs(ctx, env, store, ids)
}

// DeleteLedgerIDs is DeleteLedgers for ledgers given by id (at most
// ledger.DeleteBatch).
func DeleteLedgerIDs(ctx context.Context, env ledger.Env, store Store, ids []uint64) (errs []error, indexErr error) {
	errs = ledger.DeleteAll(ctx, env, ids, retentionDeletes)
	var indexes []string
	for i, err := range errs {
		if err == nil || errors.Is(err, ledger.ErrNoSuchLedger) || errors.Is(err, ledger.ErrDeleteIncomplete) {
			indexes = append(indexes, IndexKey(ids[i]))
		}
	}
	if len(indexes) > 0 {
		indexErr = store.DeleteKeys(ctx, indexes)
	}
	return errs, indexErr
}

// LastRetention is when retention last looked at the log (zero: never).
func (l *Log) LastRetention() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.lastRetention
}
