package tierpass

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/strata-log/strata/broker/partlog"
	"github.com/strata-log/strata/internal/failpoint"
	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/proto/brokerpb"
)

// pass is one tier pass over a log.
type pass struct {
	l       *partlog.Log
	cfg     partlog.Config
	tier    *partlog.Tier
	objects *Objects
	log     *slog.Logger
	metrics *partlog.Metrics
}

func newPass(l *partlog.Log) *pass {
	cfg := l.Config()
	return &pass{l: l, cfg: cfg, tier: cfg.Tier, objects: NewObjects(cfg), log: partlog.Logger(cfg), metrics: cfg.Metrics}
}

// Round runs the tier's work once (Run; sweep: the orphan sweep too) as
// one of the log's passes (partlog.Log.RunPass: Close waits for it; a
// closing or failed log skips it), counting and logging a failure. Rounds
// of one log must not overlap.
func Round(l *partlog.Log, sweep bool) {
	if l.Config().Tier == nil {
		return
	}
	l.RunPass(func(ctx context.Context) {
		if err := Run(ctx, l, sweep); err != nil && ctx.Err() == nil {
			cfg := l.Config()
			cfg.Metrics.TierErrors.Inc()
			partlog.Logger(cfg).Warn("tiering", "err", err)
		}
	})
}

// Run uploads what is due, deletes local copies local retention no
// longer keeps, deletes the queued garbage that is due and, with sweep,
// deletes orphan objects. A log without a Tier has nothing to do.
func Run(ctx context.Context, l *partlog.Log, sweep bool) error {
	if l.Config().Tier == nil {
		return nil
	}
	p := newPass(l)
	var errs []error
	for {
		uploaded, err := p.uploadOnce(ctx)
		if err != nil {
			errs = append(errs, err)
		}
		if !uploaded || err != nil {
			break
		}
	}
	if err := p.deleteLocalCopies(ctx); err != nil {
		errs = append(errs, err)
	}
	if err := p.collectGarbage(ctx); err != nil {
		errs = append(errs, err)
	}
	if sweep {
		if err := p.sweepOrphanObjects(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// uploadRun decides which closed ledgers to copy next (T3, T4): the run
// of closed segments that starts where the tiered segments end (at the
// first segment when nothing is tiered yet), cut once it holds
// segmentBytes, or all of it once its oldest segment is maxDelay old. It
// returns nil when nothing is due. A pure function of its inputs.
func uploadRun(pl *brokerpb.PartitionLog, nowMs int64, segmentBytes int64, maxDelay time.Duration) []*brokerpb.LedgerSegment {
	end := partlog.TieredEnd(pl)
	var run []*brokerpb.LedgerSegment
	var bytes int64
	for _, s := range pl.GetSegments() {
		if end >= 0 && s.LastOffset < end {
			continue // covered already (a local copy local retention keeps)
		}
		if !s.Closed {
			break
		}
		if len(run) == 0 && end >= 0 && s.FirstOffset != end {
			return nil // not contiguous: never leave a hole (T4)
		}
		run = append(run, s)
		bytes += s.Bytes
		if bytes >= segmentBytes {
			return run
		}
	}
	if len(run) == 0 || bytes == 0 || run[0].CreatedAtMs > nowMs-maxDelay.Milliseconds() {
		return nil
	}
	return run
}

// localDeletable is how many leading segments local retention may delete
// from the bookies: closed ones that a committed object covers (T8: it was
// verified before the commit) and whose newest record is older than
// localRetentionMs (-1: keep them until retention). A pure function.
func localDeletable(pl *brokerpb.PartitionLog, nowMs, localRetentionMs int64) int {
	end := partlog.TieredEnd(pl)
	if end < 0 || localRetentionMs < 0 {
		return 0
	}
	n := 0
	for _, s := range pl.GetSegments() {
		newest := s.MaxTimestampMs
		if s.LastOffset < s.FirstOffset || newest < 0 {
			newest = s.CreatedAtMs
		}
		if !s.Closed || s.LastOffset >= end || newest >= nowMs-localRetentionMs {
			break
		}
		n++
	}
	return n
}

// Lag is the upload lag of a log with tier (nil: none) as of snap: the
// bytes of closed ledgers no object covers and the age of the oldest of
// them (from its newest record, or its creation when it has none). Zero
// without tiering.
func Lag(snap partlog.Snapshot, tier *partlog.Tier) (bytes int64, age time.Duration) {
	if tier == nil || !snap.Policy.RemoteStorage {
		return 0, 0
	}
	end := partlog.TieredEnd(snap.List)
	now := snap.Now.UnixMilli()
	for _, s := range snap.List.GetSegments() {
		if !s.Closed || s.LastOffset < end || s.LastOffset < s.FirstOffset {
			continue
		}
		bytes += s.Bytes
		newest := s.MaxTimestampMs
		if newest < 0 {
			newest = s.CreatedAtMs
		}
		age = max(age, time.Duration(now-newest)*time.Millisecond)
	}
	return bytes, age
}

// QueuedGarbage is how many unlinked objects wait for deletion (T6).
func QueuedGarbage(snap partlog.Snapshot) int { return len(snap.List.GetGarbage()) }

// uploadOnce copies the next due run of ledgers into one object, verifies
// it and commits it (T2, T7, T8). A crash or failure at any step leaves
// either nothing visible or an unreferenced object, which the orphan sweep
// deletes; produce goes on meanwhile.
func (p *pass) uploadOnce(ctx context.Context) (bool, error) {
	snap := p.l.Snapshot()
	if !snap.Policy.RemoteStorage {
		return false, nil
	}
	run := uploadRun(snap.List, snap.Now.UnixMilli(), p.tier.SegmentBytes, p.tier.MaxDelay)
	if len(run) == 0 {
		return false, nil
	}
	if p.tier.Uploads != nil {
		select {
		case p.tier.Uploads <- struct{}{}:
			defer func() { <-p.tier.Uploads }()
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
	start := time.Now()
	base, last := run[0].FirstOffset, run[len(run)-1].LastOffset
	// Ledgers below cleaned_offset were rewritten by compaction (P7):
	// their offsets have holes and the run may end in one. The ones at or
	// after it are as written, dense, and keep segfile's dense check (T8).
	compacted := base < snap.List.GetCleanedOffset()
	seg, err := p.objects.Put(ctx, base, last, compacted, ledgerIDs(run), func(ctx context.Context, out *ObjectOutput) error {
		return p.copyLedgers(ctx, out, run)
	})
	if err != nil {
		return false, err
	}
	if sent, err := partlog.Update(ctx, p.l, func(s partlog.Snapshot) (*brokerpb.PartitionLog, error) {
		return commitTiered(s.List, seg, run)
	}); err != nil {
		// The object is unnamed unless the CAS was sent and its outcome
		// is unknown: then it may be listed (and the bookie copies deleted
		// on the strength of it), so only the orphan sweep, which checks
		// the list, may delete it.
		if !sent || errors.Is(err, partlog.ErrConflict) {
			p.objects.Delete(ctx, []string{seg.ObjectKey})
		}
		return false, err
	}
	failpoint.Hit("tier.after_commit")
	p.log.Info("tiered", "object", seg.ObjectKey, "base_offset", seg.BaseOffset, "last_offset", seg.LastOffset,
		"bytes", seg.SizeBytes, "ledgers", len(run), "took", time.Since(start).Round(time.Millisecond))
	return true, nil
}

// copyLedgers appends every entry of run's ledgers, in order, read from
// the bookies.
func (p *pass) copyLedgers(ctx context.Context, out *ObjectOutput, run []*brokerpb.LedgerSegment) error {
	for _, s := range run {
		if s.LastEntryId < 0 {
			continue
		}
		r, err := ledger.OpenReader(ctx, p.cfg.Env, s.LedgerId)
		if err != nil {
			return fmt.Errorf("opening ledger %d: %w", s.LedgerId, err)
		}
		r.AdvanceLAC(s.LastEntryId) // closed: every entry is acknowledged
		err = r.ReadRange(ctx, 0, s.LastEntryId, func(e ledger.Entry) error {
			p.metrics.BookieReadBytes.Add(float64(len(e.Payload)))
			return out.Append(e.Payload)
		})
		if err != nil {
			return fmt.Errorf("copying ledger %d: %w", s.LedgerId, err)
		}
	}
	return nil
}

func ledgerIDs(segs []*brokerpb.LedgerSegment) []uint64 {
	out := make([]uint64, len(segs))
	for i, s := range segs {
		out[i] = s.LedgerId
	}
	return out
}

// commitTiered is pl with seg, the copy of run, added (T4, T7), unless
// the log changed so that it no longer follows (retention moved the log
// start past it) or run is no longer what the list holds there
// (compaction swapped those ledgers for rewritten ones meanwhile: the
// object would bring back what the pass removed, below cleaned_offset
// where no later pass looks for it). Then nothing is committed and the
// caller deletes it. A pure function; pl is not modified.
func commitTiered(pl *brokerpb.PartitionLog, seg *brokerpb.TieredSegment, run []*brokerpb.LedgerSegment) (*brokerpb.PartitionLog, error) {
	if end := partlog.TieredEnd(pl); (end >= 0 && end != seg.BaseOffset) || pl.LogStartOffset > seg.BaseOffset {
		return nil, fmt.Errorf("partlog: segment %d-%d no longer follows (tiered end %d, log start %d)",
			seg.BaseOffset, seg.LastOffset, end, pl.LogStartOffset)
	}
	i := slices.IndexFunc(pl.Segments, func(s *brokerpb.LedgerSegment) bool { return s.LedgerId == run[0].LedgerId })
	for j, s := range run {
		if i < 0 || i+j >= len(pl.Segments) || pl.Segments[i+j].LedgerId != s.LedgerId {
			return nil, fmt.Errorf("partlog: segment %d-%d: ledger %d is no longer listed (compacted meanwhile)",
				seg.BaseOffset, seg.LastOffset, s.LedgerId)
		}
	}
	next := partlog.Snapshot{List: pl}.Edit()
	next.Tiered = append(next.Tiered, seg)
	return next, nil
}

// deleteLocalCopies deletes the ledgers a committed object covers once
// local retention allows: one swap drops them from the list (the log start
// does not move: the object serves those offsets), then the ledgers go.
func (p *pass) deleteLocalCopies(ctx context.Context) error {
	if p.tier.CanDestroy != nil {
		snap := p.l.Snapshot()
		if localDeletable(snap.List, snap.Now.UnixMilli(), snap.Policy.LocalRetentionMs) == 0 {
			return nil
		}
		if err := p.tier.CanDestroy(ctx); err != nil {
			return fmt.Errorf("partlog: keeping local copies: %w", err)
		}
	}
	var gone []*brokerpb.LedgerSegment
	_, err := partlog.Update(ctx, p.l, func(s partlog.Snapshot) (*brokerpb.PartitionLog, error) {
		gone = nil // the edit may run again on a newer snapshot
		n := localDeletable(s.List, s.Now.UnixMilli(), s.Policy.LocalRetentionMs)
		if n == 0 {
			return nil, partlog.ErrNoChange
		}
		next := s.Edit()
		gone = slices.Clone(next.Segments[:n])
		next.Segments = next.Segments[n:]
		return next, nil
	})
	if err != nil || len(gone) == 0 {
		return err
	}
	failpoint.Hit("tier.after_local_unlink")
	if n := p.l.DeleteUnlisted(ctx, gone); n < len(gone) {
		p.log.Info("tier: stopped deleting local copies; the orphan sweeper deletes the rest", "deleted", n, "left", len(gone)-n)
	}
	p.metrics.TierLocalDeleted.Add(float64(len(gone)))
	p.log.Info("deleted local copies of tiered ledgers", "ledgers", len(gone), "first_ledger", gone[0].LedgerId,
		"last_offset", gone[len(gone)-1].LastOffset)
	return nil
}
