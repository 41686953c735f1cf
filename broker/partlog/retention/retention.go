package retention

import (
	"context"

	"github.com/strata-log/strata/broker/partlog"
	"github.com/strata-log/strata/broker/partlog/tierpass"
	"github.com/strata-log/strata/internal/failpoint"
	"github.com/strata-log/strata/proto/brokerpb"
)

// Round enforces retention once (Enforce) as one of the log's passes
// (partlog.Log.RunPass: Close waits for it; a closing or failed log skips
// it), logging a failure. The owner runs it every
// --retention-check-interval.
func Round(l *partlog.Log) {
	l.RunPass(func(ctx context.Context) {
		if _, err := Enforce(ctx, l); err != nil && ctx.Err() == nil {
			partlog.Logger(l.Config()).Warn("retention failed", "err", err)
		}
	})
}

// Enforce deletes what the retention policy no longer keeps (P6): one
// swap removes the leading tiered segments and ledgers and moves the log
// start offset to the first offset kept, then their ledgers, indexes and
// objects are deleted. A crash after the swap leaves unlisted ledgers and
// objects, which the controller's orphan sweeper and the tier's orphan
// sweep delete; a failed swap fails the log (P3).
func Enforce(ctx context.Context, l *partlog.Log) (Cut, error) {
	var c Cut
	var gone []*brokerpb.LedgerSegment
	var goneObjects []string
	_, err := partlog.Update(ctx, l, func(s partlog.Snapshot) (*brokerpb.PartitionLog, error) {
		l.MarkRetention(s.Now)
		c = cut(logPieces(s.List, s.OpenBytes), s.Now.UnixMilli(), s.Policy)
		if c.Pieces == 0 {
			return nil, partlog.ErrNoChange
		}
		var next *brokerpb.PartitionLog
		next, gone, goneObjects = apply(s, c.Start)
		return next, nil
	})
	if err != nil || c.Pieces == 0 {
		return Cut{}, err
	}
	cfg := l.Config()
	partlog.Logger(cfg).Info("retention", "reason", c.Reason, "pieces", c.Pieces, "bytes", c.Bytes, "log_start_offset", c.Start,
		"ledgers", len(gone), "objects", len(goneObjects))
	failpoint.Hit("retention.after_cas")
	deleteRemoved(ctx, l, gone, goneObjects)
	cfg.Metrics.RetentionSegments.Add(float64(c.Pieces))
	cfg.Metrics.RetentionBytes.Add(float64(c.Bytes))
	return c, nil
}

// deleteRemoved deletes what a swap unlisted: the ledgers, and the
// objects through the garbage queue. What it does not delete the orphan
// sweeps and the queue's retries do.
func deleteRemoved(ctx context.Context, l *partlog.Log, gone []*brokerpb.LedgerSegment, goneObjects []string) {
	log := partlog.Logger(l.Config())
	if n := l.DeleteUnlisted(ctx, gone); n < len(gone) {
		log.Info("retention: stopped deleting; the orphan sweeper deletes the rest", "deleted", n, "left", len(gone)-n)
	}
	if len(goneObjects) > 0 {
		if err := tierpass.CollectGarbage(ctx, l); err != nil {
			log.Warn("retention: deleting unlinked objects; the garbage queue retries", "err", err)
		}
	}
}

// DeleteBefore moves the log start to offset (Kafka's DeleteRecords) as
// Enforce moves it: one swap removes the tiered segments and closed
// ledgers wholly below it and sets the log start, then their ledgers and
// objects are deleted. offset -1 is the high watermark; an offset below the
// log start changes nothing; above the high watermark it is a
// *partlog.OutOfRangeError. It returns the log start after the change.
func DeleteBefore(ctx context.Context, l *partlog.Log, offset int64) (int64, error) {
	hw := l.HighWatermark()
	if offset == -1 {
		offset = hw
	}
	if offset < 0 || offset > hw {
		return 0, &partlog.OutOfRangeError{Offset: offset, Start: l.LogStartOffset(), End: hw}
	}
	var gone []*brokerpb.LedgerSegment
	var goneObjects []string
	var start int64
	changed := false
	_, err := partlog.Update(ctx, l, func(s partlog.Snapshot) (*brokerpb.PartitionLog, error) {
		if s.Err != nil {
			return nil, s.Err
		}
		start, changed = s.List.GetLogStartOffset(), false
		if offset <= start {
			return nil, partlog.ErrNoChange
		}
		var next *brokerpb.PartitionLog
		next, gone, goneObjects = apply(s, offset)
		start, changed = next.LogStartOffset, true
		return next, nil
	})
	if err != nil {
		return 0, err
	}
	if !changed {
		return start, nil
	}
	partlog.Logger(l.Config()).Info("records deleted", "log_start_offset", start, "ledgers", len(gone), "objects", len(goneObjects))
	deleteRemoved(ctx, l, gone, goneObjects)
	return start, nil
}

// apply is s's list with everything below start removed (a pure
// function): the leading tiered segments, queued for deletion in the same
// change that unlinks them (T6), and the leading closed ledgers, which it
// returns with the objects' keys; the log start moves to start.
func apply(s partlog.Snapshot, start int64) (next *brokerpb.PartitionLog, gone []*brokerpb.LedgerSegment, goneObjects []string) {
	next = s.Edit()
	for len(next.Tiered) > 0 && next.Tiered[0].LastOffset < start {
		goneObjects = append(goneObjects, next.Tiered[0].ObjectKey)
		next.Garbage = append(next.Garbage, &brokerpb.GarbageObject{ObjectKey: next.Tiered[0].ObjectKey, SinceMs: s.Now.UnixMilli()})
		next.Tiered = next.Tiered[1:]
	}
	for len(next.Segments) > 0 && next.Segments[0].Closed && next.Segments[0].LastOffset < start {
		gone = append(gone, next.Segments[0])
		next.Segments = next.Segments[1:]
	}
	next.LogStartOffset = max(next.LogStartOffset, start)
	return next, gone, goneObjects
}

// Cut is what retention removes: the first Pieces pieces of the
// log (tiered segments, then ledgers), up to offset Start (the new log
// start), and why ("time", "size" or "time+size").
type Cut struct {
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
	end := partlog.TieredEnd(pl)
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

// cut decides which leading pieces of a partition's log may be
// deleted (P6): only closed ones (the open ledger, the last, never goes),
// only a prefix, by time when a piece's newest record is older than
// r.RetentionMs before now (a piece without records counts from its
// creation), by size while what remains still holds at least
// r.RetentionBytes. It is a pure function of its inputs.
func cut(pieces []piece, nowMs int64, r partlog.Policy) Cut {
	var c Cut
	if !r.Delete {
		return c
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
			return c
		}
		if c.Reason == "" || c.Reason == reason {
			c.Reason = reason
		} else {
			c.Reason = "time+size"
		}
		c.Pieces++
		c.Bytes += p.bytes
		c.Start = p.last + 1
		total -= p.bytes
	}
	return c
}
