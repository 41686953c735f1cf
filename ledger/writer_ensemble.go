package ledger

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/strata-log/strata/proto/ledgerpb"
)

// The writer's background work: ensemble changes (choose a replacement,
// compare-and-set the metadata, retry), taking back a failed bookie when
// no spare exists, and the explicit LAC of an idle writer. It runs through
// the Scheduler, one run at a time (w.mu.working), and never sleeps: a
// retry is a scheduled run. So with ledgertest.ManualScheduler a test
// decides exactly when each step happens.
//
// Retry policy: a failed
// metadata update is retried with exponential backoff
// (MetadataRetryMin..MetadataRetryMax); a failed bookie with no spare is
// retried every ReplacementRetryInterval, and a new failure triggers an
// attempt at once.

// ensembleChange is an ensemble change being made durable.
type ensembleChange struct {
	// start is the new fragment's first entry: LAC+1 when decided (W4).
	start int64
	// ensemble is the new ensemble: the durable last one with each
	// replaced member swapped for its replacement, in place.
	ensemble []string
	replaced map[string]string // old -> new
	// md is the metadata to write (never modified once built; a rebase
	// on a repair, W7, replaces it).
	md *ledgerpb.LedgerMetadata
	// attemptDue: an attempt should run now (false while a backoff runs).
	attemptDue bool
	// reread: the last attempt conflicted or its outcome is unknown; read
	// the metadata before writing again.
	reread bool
}

// work runs background tasks until none is due.
func (w *Writer) work() {
	w.mu.Lock()
	w.mu.workQueued = false
	if w.mu.working {
		w.mu.Unlock()
		return
	}
	w.mu.working = true
	for {
		task := w.nextTaskLocked()
		if task == nil {
			break
		}
		w.mu.Unlock()
		task()
		w.flush()
		w.mu.Lock()
	}
	w.mu.working = false
	w.notifyLocked()
	w.mu.Unlock()
}

// nextTaskLocked picks the next due task and clears its due flag.
// REQUIRES: w.mu held.
func (w *Writer) nextTaskLocked() func() {
	if w.mu.err != nil || w.mu.stopped {
		return nil
	}
	if c := w.mu.change; c != nil {
		if c.attemptDue {
			c.attemptDue = false
			return changeAttempt{w, c}.run
		}
		// One change at a time: new failures wait for this one.
	} else if w.mu.replaceDue {
		w.mu.replaceDue = false
		rejoin := w.mu.rejoinOK
		w.mu.rejoinOK = false
		return func() { w.replace(rejoin) }
	}
	if w.mu.lacDue && !w.mu.closing {
		w.mu.lacDue = false
		return w.writeExplicitLAC
	}
	return nil
}

// replace finds replacements for the failed members of the ensemble
// (ChooseReplacement: preferably in a rack no other member is in) and
// starts an ensemble change. A replacement is never a member of the
// ensemble, nor a quarantined bookie. When rejoin is set (a timed retry,
// after an attempt found no spare), the quarantine is lifted, and a failed
// member that the registry lists as writable is chosen for its own
// position: it is taken back without a metadata change (it is in the
// durable metadata), and pending entries are resent to it.
func (w *Writer) replace(rejoin bool) {
	w.mu.Lock()
	if rejoin {
		clear(w.mu.quarantined)
	}
	quarantined := maps.Clone(w.mu.quarantined)
	ensemble := slices.Clone(w.currentEnsembleLocked())
	var failed []string
	for _, b := range ensemble {
		if w.mu.failed[b] {
			failed = append(failed, b)
		}
	}
	w.mu.Unlock()
	if len(failed) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(w.bgCtx, w.opts.MetadataTimeout)
	infos, err := w.env.Registry.Writable(ctx)
	cancel()
	replaced := make(map[string]string)
	var back []string
	if err != nil {
		w.log.Warn("listing bookies for a replacement", "err", err)
	} else {
		// current is the ensemble as it will be: each replacement
		// chosen so far in place, so that the next one avoids its rack.
		current := slices.Clone(ensemble)
		for _, f := range failed {
			exclude := maps.Clone(quarantined)
			exclude[f] = !rejoin
			pick, err := w.env.Placement.ChooseReplacement(infos, current, f, exclude)
			switch {
			case err != nil:
				w.log.Warn("no spare bookie; writing on with fewer copies", "failed", f, "err", err)
			case pick == f:
				back = append(back, f)
			default:
				replaced[f] = pick
				current[slices.Index(current, f)] = pick
			}
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.mu.err != nil || w.mu.stopped {
		return
	}
	if len(back) > 0 {
		for _, b := range back {
			delete(w.mu.failed, b)
		}
		w.log.Info("taking failed bookies back", "bookies", back)
		w.resendLocked()
	}
	if len(replaced) > 0 && w.mu.change == nil {
		w.startChangeLocked(replaced)
	}
	w.updateStalledLocked(true)
	if len(back)+len(replaced) < len(failed) && !w.mu.replaceTimer {
		w.mu.replaceTimer = true
		w.bg.after(w.opts.ReplacementRetryInterval, func() {
			w.mu.Lock()
			defer w.mu.Unlock()
			w.mu.replaceTimer = false
			w.mu.replaceDue, w.mu.rejoinOK = true, true
			w.kickLocked()
		})
	}
}

// startChangeLocked builds the new fragment at LAC+1 (W4) and resends
// every pending entry to the members of its new write set that lack it.
// Nothing is acknowledged on the strength of a replacement until the
// metadata is durable (W3, ackableLocked).
// REQUIRES: w.mu held, w.mu.change nil.
func (w *Writer) startChangeLocked(replaced map[string]string) {
	start := w.mu.lac + 1
	ensemble := slices.Clone(lastEnsemble(w.mu.md))
	for i, b := range ensemble {
		if r, ok := replaced[b]; ok {
			ensemble[i] = r
		}
	}
	md := proto.Clone(w.mu.md).(*ledgerpb.LedgerMetadata)
	if last := md.Fragments[len(md.Fragments)-1]; last.FirstEntryId == start {
		// Nothing of the last fragment is acknowledged: replace it.
		last.Bookies = ensemble
	} else {
		md.Fragments = append(md.Fragments, &ledgerpb.Fragment{FirstEntryId: start, Bookies: ensemble})
	}
	w.mu.change = &ensembleChange{start: start, ensemble: ensemble, replaced: replaced, md: md, attemptDue: true}
	w.log.Info("ensemble change", "start", start, "replaced", replaced, "ensemble", ensemble)
	w.resendLocked()
}

// changeAttempt is the writing of one ensemble change's metadata: an
// attempt, and the rebase, retry or commit it leads to (W3, W7).
type changeAttempt struct {
	w *Writer
	c *ensembleChange
}

// run makes one attempt to write the change's metadata (or, after a
// conflict or an unknown outcome, to read what the store holds).
func (a changeAttempt) run() {
	w, c := a.w, a.c
	w.mu.Lock()
	version, reread := w.mu.version, c.reread
	w.mu.Unlock()
	ctx, cancel := context.WithTimeout(w.bgCtx, w.opts.MetadataTimeout)
	defer cancel()
	if !reread {
		v, err := w.env.Meta.Update(ctx, c.md, version)
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.mu.change != c {
			return
		}
		switch {
		case err == nil:
			a.commitLocked(c.md, v)
		case errors.Is(err, ErrMetadataConflict):
			c.reread, c.attemptDue = true, true
		default:
			// Unknown outcome: read before deciding.
			c.reread = true
			a.retryLaterLocked(err)
		}
		return
	}
	got, v, err := w.env.Meta.Get(ctx, w.id)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.mu.change != c {
		return
	}
	switch {
	case err != nil:
		a.retryLaterLocked(err)
	case got.State != ledgerpb.LedgerState_OPEN:
		// Someone is recovering the ledger (W5).
		w.failLocked(fmt.Errorf("%w: ledger %d is %s", ErrFenced, w.id, got.State))
	case swapsBelowLast(got, c.md):
		// An attempt whose answer was lost did apply (and a repair may
		// have swapped a bookie below its new last fragment since: W7).
		w.mu.levels.adoptSwaps(w.mu.md, got)
		a.commitLocked(got, v)
	case v == version:
		// It did not apply: write again.
		c.reread, c.attemptDue = false, true
	case swapsBelowLast(got, w.mu.md):
		// It did not apply; a repair swapped bookies in fragments before
		// the last (W7): adopt them and write the change on top.
		a.rebaseLocked(got, v)
		c.reread, c.attemptDue = false, true
	default:
		w.failLocked(fmt.Errorf("%w: %w: ledger %d changed under its writer (version %d, expected %d)",
			ErrWriterFailed, ErrMetadataConflict, w.id, v, version))
	}
}

// swapsBelowLast reports whether stored is OPEN, well formed, and equal to
// mine except for the bookies of fragments before the last (W7): the only
// change to an OPEN ledger's metadata the writer accepts from someone else.
// Same number of fragments, same first entries, same ensemble sizes, an
// identical last fragment, and every other field equal.
func swapsBelowLast(stored, mine *ledgerpb.LedgerMetadata) bool {
	if stored.GetState() != ledgerpb.LedgerState_OPEN || validateMetadata(stored) != nil ||
		len(stored.Fragments) != len(mine.GetFragments()) {
		return false
	}
	// Compare a copy of stored that carries mine's earlier bookies.
	cmp := proto.Clone(stored).(*ledgerpb.LedgerMetadata)
	for i := range len(cmp.Fragments) - 1 {
		if len(cmp.Fragments[i].Bookies) != len(mine.Fragments[i].GetBookies()) {
			return false
		}
		cmp.Fragments[i].Bookies = slices.Clone(mine.Fragments[i].Bookies)
	}
	return proto.Equal(cmp, mine)
}

// rebaseLocked adopts stored (version) as the durable metadata and rebuilds
// the change's metadata on top of it: stored's earlier fragments, the
// change's own last fragment(s). swapsBelowLast(stored, w.mu.md) holds, so
// only bookies of fragments below the durable last one differ, and every
// entry there is acknowledged (W4): no pending entry's write set changes.
// REQUIRES: w.mu held, w.mu.err nil, w.mu.change == c.
func (a changeAttempt) rebaseLocked(stored *ledgerpb.LedgerMetadata, version int64) {
	w, c := a.w, a.c
	md := proto.Clone(c.md).(*ledgerpb.LedgerMetadata)
	below := len(stored.Fragments) - 1
	for i := range below {
		md.Fragments[i].Bookies = slices.Clone(stored.Fragments[i].Bookies)
	}
	c.md = md
	w.mu.levels.adoptSwaps(w.mu.md, stored)
	w.mu.md, w.mu.version = stored, version
	w.mu.levels.checkAll(w.mu.md, w.mu.change)
	w.log.Info("ensemble change: rebased on a repair of earlier fragments", "version", version)
}

// retryLaterLocked schedules the next attempt after a backoff.
// Acknowledgements that need the new ensemble wait meanwhile.
// REQUIRES: w.mu held.
func (a changeAttempt) retryLaterLocked(err error) {
	w, c := a.w, a.c
	w.mu.backoff = min(max(2*w.mu.backoff, w.opts.MetadataRetryMin), w.opts.MetadataRetryMax)
	w.log.Warn("ensemble change: metadata unavailable; retrying", "err", err, "in", w.mu.backoff)
	w.bg.after(w.mu.backoff, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.mu.change == c {
			c.attemptDue = true
			w.kickLocked()
		}
	})
}

// commitLocked records a durable ensemble change and acknowledges what it
// allows.
// REQUIRES: w.mu held.
func (a changeAttempt) commitLocked(md *ledgerpb.LedgerMetadata, version int64) {
	w, c := a.w, a.c
	w.mu.md, w.mu.version = md, version
	w.mu.change = nil
	w.mu.backoff = 0
	w.mu.ensembleChanges++
	for old := range maps.Keys(c.replaced) {
		delete(w.mu.failed, old)
	}
	w.log.Info("ensemble change durable", "start", c.start, "version", version)
	w.updateStalledLocked(false)
	w.ackLocked()
	w.mu.levels.checkAll(w.mu.md, w.mu.change) // a replacement's answers count from now on
	// Failures seen while this change was being written.
	for _, b := range lastEnsemble(md) {
		if w.mu.failed[b] {
			w.mu.replaceDue = true
			w.kickLocked()
			break
		}
	}
	w.notifyLocked()
}

// scheduleLACLocked arms the idle timer after an acknowledgement. The timer
// sends the explicit LAC only if nothing happened for a whole interval.
// REQUIRES: w.mu held.
func (w *Writer) scheduleLACLocked() {
	if w.opts.ExplicitLACInterval <= 0 || w.mu.lacTimer || w.mu.stopped {
		return
	}
	w.mu.lacTimer = true
	seen := w.mu.activity
	w.bg.after(w.opts.ExplicitLACInterval, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.mu.lacTimer = false
		switch {
		case w.mu.err != nil || w.mu.closing:
		case w.mu.activity != seen:
			w.scheduleLACLocked() // not idle yet
		case len(w.mu.entries) == 0 && w.mu.lac > w.mu.sentLAC:
			w.mu.lacDue = true
			w.kickLocked()
		}
	})
}

// writeExplicitLAC sends the LAC to the live members of the durable last
// ensemble (BookKeeper's explicit LAC): readers learn that the last entry
// is acknowledged even though no later add piggybacks it. Best effort.
func (w *Writer) writeExplicitLAC() {
	w.mu.Lock()
	lac := w.mu.lac
	var members []string
	for _, b := range lastEnsemble(w.mu.md) {
		if !w.mu.failed[b] {
			members = append(members, b)
		}
	}
	w.mu.Unlock()
	ctx, cancel := context.WithTimeout(w.bgCtx, w.opts.MetadataTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, b := range members {
		wg.Go(func() {
			if err := w.env.Bookies.WriteLAC(ctx, b, w.id, lac); err != nil {
				w.log.Debug("explicit LAC", "bookie", b, "err", err)
			}
		})
	}
	wg.Wait()
	w.mu.Lock()
	w.mu.sentLAC = max(w.mu.sentLAC, lac)
	w.mu.Unlock()
}

// sleep waits d on the Scheduler (so a test's clock drives it) or until ctx
// ends.
func sleep(ctx context.Context, s Scheduler, d time.Duration) error {
	done := make(chan struct{})
	stop := s.AfterFunc(d, func() { close(done) })
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		if !stop() {
			<-done
		}
		return ctx.Err()
	}
}
