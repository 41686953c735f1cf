package compaction

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/strata-log/strata/broker/partlog"
	"github.com/strata-log/strata/broker/partlog/tierpass"
	"github.com/strata-log/strata/internal/failpoint"
	"github.com/strata-log/strata/proto/brokerpb"
)

// swap is the swap stage: one swap of the list (partlog.Update), whose
// edit checks again against what changed meanwhile (swapCompacted). On
// failure the outputs are deleted unless the swap may have stored them;
// on success the replaced ledgers, and the local copies the swap
// unlinked, are deleted, and the replaced objects collected once their
// delay passed (T6).
func (p *pass) swap(ctx context.Context, began time.Time, in inputs, out outputs, nowMs int64) error {
	failpoint.Hit("compaction.before_cas")
	var copies []*brokerpb.LedgerSegment // local copies the swap unlinked
	sent, err := partlog.Update(ctx, p.l, func(s partlog.Snapshot) (*brokerpb.PartitionLog, error) {
		if err := p.checkFresh(s, began, len(out.objects) > 0); err != nil {
			return nil, err
		}
		next := s.Edit()
		var err error
		copies, err = swapCompacted(next, compactionSwap{
			objectInputs: in.objects, objectOutputs: out.objects, ledgerInputs: in.ledgers, ledgerOutputs: out.ledgers,
			end: in.end, nowMs: nowMs, tombstoneHorizonMs: out.stats.TombstoneHorizonMs,
		})
		return next, err
	})
	if err != nil {
		// Nothing names the outputs unless the CAS was sent and its
		// outcome is unknown: then the list decides, and the orphan
		// sweeps delete what it does not name.
		if !sent || errors.Is(err, partlog.ErrConflict) {
			dctx, cancel := cleanupContext(ctx)
			p.l.DeleteUnlisted(dctx, out.ledgers)
			p.deleteObjectOutputs(dctx, out.objects)
			cancel()
		}
		return err
	}
	failpoint.Hit("compaction.after_cas")
	p.l.DeleteUnlisted(ctx, slices.Concat(copies, in.ledgers))
	if len(in.objects) > 0 {
		// Queued by the swap (T6): collected once Tier.DeleteDelay has
		// passed, now or by a later check.
		if err := tierpass.CollectGarbage(ctx, p.l); err != nil {
			p.log.Warn("compaction: deleting replaced objects; the garbage queue retries", "err", err)
		}
	}
	return nil
}

// checkFresh refuses (ErrStale) a swap whose outputs may have been swept
// meanwhile (the pass outlived Options.MaxDuration, or half the orphan
// object grace when it wrote objects) or whose topic no longer compacts:
// a topic switched off compact meanwhile keeps every record from the
// switch on (Kafka aborts the cleaning too).
func (p *pass) checkFresh(s partlog.Snapshot, began time.Time, wroteObjects bool) error {
	took := time.Since(began)
	if p.opts.MaxDuration > 0 && took > p.opts.MaxDuration {
		return fmt.Errorf("%w: the pass took %v, more than %v: its outputs may have been swept", ErrStale,
			took.Round(time.Millisecond), p.opts.MaxDuration)
	}
	if wroteObjects && took > p.cfg.Tier.OrphanGrace/2 {
		return fmt.Errorf("%w: the pass took %v, more than half the orphan object grace %v: its objects may have been swept",
			ErrStale, took.Round(time.Millisecond), p.cfg.Tier.OrphanGrace)
	}
	if !s.Policy.Compact {
		return fmt.Errorf("%w: cleanup.policy no longer contains compact", ErrStale)
	}
	return nil
}

// compactionSwap is what a pass replaces: leading segment objects by new
// objects, then ledgers by new ledgers, covering offsets up to end.
// tombstoneHorizonMs is the earliest delete horizon of the tombstones its
// outputs keep (0: none).
type compactionSwap struct {
	objectInputs, objectOutputs []*brokerpb.TieredSegment
	ledgerInputs, ledgerOutputs []*brokerpb.LedgerSegment
	end, nowMs                  int64
	tombstoneHorizonMs          int64
}

// swapCompacted applies a pass to pl, a copy of the list to change (pure):
// the inputs must still be listed, consecutive, and the ledger inputs
// closed and untiered, or ErrStale (retention or tiering moved meanwhile;
// pl is then untouched). Replaced objects are queued in pl's garbage list
// in the same change (T6); cleaned_offset moves to end and
// tombstone_horizon_ms becomes the pass's: a pass rewrites every piece
// below end, and end is at least the cleaned_offset it started from
// (cover checks it; passes on a log are one at a time), beyond which no
// batch carries a horizon. The local copies of the replaced objects
// (ledgers kept for local.retention.ms) hold records the pass removed:
// they are unlinked too, so that fetches read the compacted objects, and
// returned for deletion.
func swapCompacted(pl *brokerpb.PartitionLog, sw compactionSwap) ([]*brokerpb.LedgerSegment, error) {
	oi, li, err := swapPositions(pl, sw)
	if err != nil {
		return nil, err
	}
	if in := sw.objectInputs; len(in) > 0 {
		for _, o := range in {
			pl.Garbage = append(pl.Garbage, &brokerpb.GarbageObject{ObjectKey: o.ObjectKey, SinceMs: sw.nowMs})
		}
		pl.Tiered = slices.Concat(pl.Tiered[:oi], sw.objectOutputs, pl.Tiered[oi+len(in):])
	}
	if in := sw.ledgerInputs; len(in) > 0 {
		pl.Segments = slices.Concat(pl.Segments[:li], sw.ledgerOutputs, pl.Segments[li+len(in):])
	}
	var copies []*brokerpb.LedgerSegment
	if in := sw.objectInputs; len(in) > 0 {
		te, last := partlog.TieredEnd(pl), in[len(in)-1].LastOffset
		n := 0
		for n < len(pl.Segments) && pl.Segments[n].FirstOffset < te && pl.Segments[n].LastOffset <= last {
			n++
		}
		copies = slices.Clone(pl.Segments[:n])
		pl.Segments = pl.Segments[n:]
	}
	pl.TombstoneHorizonMs = sw.tombstoneHorizonMs
	pl.CleanedOffset = max(pl.CleanedOffset, sw.end)
	pl.LastCompactionMs = sw.nowMs
	return copies, nil
}

// swapPositions finds the swap's inputs in pl: the index of the first
// object input among pl's objects and of the first ledger input among its
// segments, or ErrStale when they are not all listed there, in order (the
// ledgers closed and untiered).
func swapPositions(pl *brokerpb.PartitionLog, sw compactionSwap) (oi, li int, err error) {
	if in := sw.objectInputs; len(in) > 0 {
		oi = slices.IndexFunc(pl.Tiered, func(t *brokerpb.TieredSegment) bool { return t.ObjectKey == in[0].ObjectKey })
		if oi < 0 || oi+len(in) > len(pl.Tiered) {
			return 0, 0, fmt.Errorf("%w: object %s is no longer listed", ErrStale, in[0].ObjectKey)
		}
		for j, o := range in {
			if pl.Tiered[oi+j].ObjectKey != o.ObjectKey {
				return 0, 0, fmt.Errorf("%w: object %s is no longer listed after %s", ErrStale, o.ObjectKey, in[0].ObjectKey)
			}
		}
	}
	if in := sw.ledgerInputs; len(in) > 0 {
		li = slices.IndexFunc(pl.Segments, func(s *brokerpb.LedgerSegment) bool { return s.LedgerId == in[0].LedgerId })
		if li < 0 || li+len(in) > len(pl.Segments) {
			return 0, 0, fmt.Errorf("%w: ledger %d is no longer listed", ErrStale, in[0].LedgerId)
		}
		for j, s := range in {
			if cur := pl.Segments[li+j]; cur.LedgerId != s.LedgerId || !cur.Closed {
				return 0, 0, fmt.Errorf("%w: ledger %d is no longer listed after ledger %d", ErrStale, s.LedgerId, in[0].LedgerId)
			}
		}
		if te := partlog.TieredEnd(pl); te > in[0].FirstOffset {
			return 0, 0, fmt.Errorf("%w: offsets up to %d were tiered meanwhile", ErrStale, te-1)
		}
	}
	return oi, li, nil
}

// cleanupContext bounds the deletion of a failed pass's outputs, also
// when the pass's ctx ended (a broker closing): what it does not delete,
// the orphan sweeper does.
func cleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
}
