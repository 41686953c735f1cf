package partlog

import "context"

// The periodic work of a served log that does not depend on appends
// (retention, tiering) is run by its owner over all of its logs, a few at a
// time, rather than by a timer of each log: an idle log then costs no
// goroutine or timer (P8), and the owner bounds how much of it runs at once.

// RetentionRound enforces retention once (EnforceRetention) with the log's
// own context, logging a failure. Close waits for a round in progress; a
// closing or failed log skips it.
func (l *Log) RetentionRound() {
	l.background(func(ctx context.Context) {
		if _, err := l.EnforceRetention(ctx); err != nil && ctx.Err() == nil {
			l.log.Warn("retention failed", "err", err)
		}
	})
}

// TierRound runs the tier's work once (TierOnce; sweep: the orphan sweep
// too) with the log's own context, counting and logging a failure. Like
// RetentionRound, Close waits for it. Rounds of one log must not overlap.
func (l *Log) TierRound(sweep bool) {
	if l.cfg.Tier == nil {
		return
	}
	l.background(func(ctx context.Context) {
		if err := l.TierOnce(ctx, sweep); err != nil && ctx.Err() == nil {
			l.metrics.TierErrors.Inc()
			l.log.Warn("tiering", "err", err)
		}
	})
}

// QueuedGarbage is how many unlinked objects wait for deletion (T6).
func (l *Log) QueuedGarbage() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.mu.pl.GetGarbage())
}

// background runs fn with the log's context unless the log is closing or
// failed, and makes Close wait for it (wg).
func (l *Log) background(fn func(ctx context.Context)) {
	l.mu.Lock()
	if l.mu.closing || l.mu.err != nil {
		l.mu.Unlock()
		return
	}
	l.wg.Add(1) // before Close's Wait: Close sets closing under mu first
	l.mu.Unlock()
	defer l.wg.Done()
	fn(l.bgCtx)
}
