package partlog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/proto/brokerpb"
)

// The background passes (tiering, retention, compaction: packages
// tierpass, retention and compaction beside this one) change a log's
// list only through this seam: a Snapshot of the list, and Swap, one
// compare-and-swap of it serialized with rolls (P11, P12).

// Snapshot is the log's segment list as stored, with what a pass decides
// by. It is a value: List is never modified, by the log or by anyone (the
// log replaces it at every change, P11); a pass that changes the list
// edits a copy (Edit).
type Snapshot struct {
	// List is the PartitionLog as stored at Version (read-only).
	List    *brokerpb.PartitionLog
	Version int64
	// Policy and Limits in force when the snapshot was taken.
	Policy Policy
	Limits Limits
	// OpenBytes: the open segment's live size (the list holds its size
	// at creation).
	OpenBytes int64
	// Now is the log's clock (Config.Now) when the snapshot was taken.
	Now time.Time
	// Err: why the log serves no more (closed, or failed: ErrClosed
	// wrapping the cause), nil while it serves.
	Err error
}

// Edit returns a copy of the list to change and Swap in.
func (s Snapshot) Edit() *brokerpb.PartitionLog {
	return proto.Clone(s.List).(*brokerpb.PartitionLog)
}

// Snapshot returns the list as stored now (P11).
func (l *Log) Snapshot() Snapshot {
	l.mu.Lock()
	defer l.mu.Unlock()
	return Snapshot{List: l.mu.pl, Version: l.mu.version, Policy: l.mu.policy, Limits: l.mu.limits,
		OpenBytes: l.mu.seg.bytes, Now: l.cfg.Now(), Err: l.readErrLocked()}
}

// Swap replaces the list by next if it has not moved since base was taken
// (P12): holding appendSem, like a roll, it compares the log's version
// with base's, then CASes next at that version in metad, and makes next
// the log's list. next is the log's from then on: the caller must not
// modify it. sent reports whether the CAS reached the store.
//
// Errors (sent false: nothing written, the log as it was): ErrListMoved;
// ErrClosed; the failed log's error; ctx's. Errors with sent true fail
// the log (P3): ErrConflict (another owner wrote: next is not stored) or
// ErrUnknownOutcome (next may be stored).
func (l *Log) Swap(ctx context.Context, base Snapshot, next *brokerpb.PartitionLog) (sent bool, err error) {
	if err := l.acquire(ctx); err != nil {
		return false, err
	}
	defer l.release()
	return l.swapLocked(ctx, base, next)
}

// swapLocked is Swap with appendSem held.
// REQUIRES: appendSem held.
func (l *Log) swapLocked(ctx context.Context, base Snapshot, next *brokerpb.PartitionLog) (sent bool, err error) {
	l.mu.Lock()
	if err := l.acceptErrLocked(); err != nil {
		l.mu.Unlock()
		return false, err
	}
	version := l.mu.version
	l.mu.Unlock()
	if version != base.Version {
		return false, fmt.Errorf("%w: at version %d, the snapshot was taken at %d", ErrListMoved, version, base.Version)
	}
	v, err := casPartitionLog(ctx, l.cfg.Store, l.cfg.Topic, l.cfg.Partition, next, version)
	if err != nil {
		if !errors.Is(err, ErrConflict) {
			err = fmt.Errorf("%w: %w", ErrUnknownOutcome, err)
		}
		l.fail(err)
		return true, err
	}
	l.mu.Lock()
	l.mu.pl, l.mu.version = next, v
	l.mu.Unlock()
	return true, nil
}

// ErrNoChange is returned by an Update edit that has nothing to change:
// Update then writes nothing and returns nil.
var ErrNoChange = errors.New("partlog: nothing to change")

// Update changes the list by edit, a pure function of a snapshot that
// returns the new list (built from Snapshot.Edit), ErrNoChange, or an
// error that Update returns as is. It holds appendSem from the snapshot
// to the swap, so the list cannot move in between (rolls and other swaps
// hold it too): a busy partition's rolls never starve a pass, and the
// edit is decided over the list it replaces. sent and the errors are
// Swap's (never ErrListMoved).
func Update(ctx context.Context, l *Log, edit func(Snapshot) (*brokerpb.PartitionLog, error)) (sent bool, err error) {
	if err := l.acquire(ctx); err != nil {
		return false, err
	}
	defer l.release()
	snap := l.Snapshot()
	next, err := edit(snap)
	if errors.Is(err, ErrNoChange) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return l.swapLocked(ctx, snap, next)
}

// RunPass runs fn with the log's own context unless the log is closing
// or failed, and makes Close wait for it; it reports whether fn ran. The
// owner runs the periodic passes (retention, tiering) over all its logs
// this way, a few at a time, rather than by a timer of each log: an idle
// log then costs no goroutine or timer (P8). Passes of one kind on one
// log must not overlap (the owner's rounds skip a log still busy).
func (l *Log) RunPass(fn func(ctx context.Context)) bool {
	l.mu.Lock()
	if l.mu.closing || l.mu.err != nil {
		l.mu.Unlock()
		return false
	}
	l.wg.Add(1) // before Close's Wait: Close sets closing under mu first
	l.mu.Unlock()
	defer l.wg.Done()
	fn(l.bgCtx)
	return true
}

// Config is the log's configuration, defaults applied.
func (l *Log) Config() Config { return l.cfg }

// Logger is the log's logger for what a pass says about it, with the
// attributes of the log's own (component, topic, partition).
func Logger(cfg Config) *slog.Logger {
	return cfg.Logger.With("component", "partlog", "topic", cfg.Topic, "partition", cfg.Partition)
}

// LedgerOptions are the options of a new ledger of the log under limits
// (its replication settings): rolls' and compaction's.
func (c Config) LedgerOptions(lim Limits) ledger.CreateOptions {
	o := c.createOptions()
	o.EnsembleSize, o.WriteQuorum, o.AckQuorum = lim.Ensemble, lim.WriteQuorum, lim.AckQuorum
	return o
}

// retentionDeletes bounds the metadata reads and bookie calls of the
// deletions in flight. One at a time, each ledger's own metad round trips
// (its metadata read and delete, its index delete) held the log's
// goroutine (rolls, Close) for 75 s per 10,000 removed ledgers at 2.9 ms
// per metad write (TestRetentionScale); the deletes now go
// ledger.DeleteBatch to a metad transaction, and concurrent reads share
// metad's linearizable read barriers.
const retentionDeletes = 16

// DeleteUnlisted deletes the ledgers and indexes of segments no list names
// (a swap unlinked them, or a failed pass wrote them), ledger.DeleteBatch
// at a time, forgets what the read path cached of them, and returns how
// many it handled. It starts no more batches once the log stops (Close
// must not wait for thousands of deletions) or ctx ends: the rest are
// unlisted, and the controller's orphan sweeper deletes them and their
// indexes (P6).
func (l *Log) DeleteUnlisted(ctx context.Context, segs []*brokerpb.LedgerSegment) int {
	for done := 0; done < len(segs); done += ledger.DeleteBatch {
		select {
		case <-l.stop:
			return done
		case <-ctx.Done():
			return done
		default:
		}
		batch := segs[done:min(done+ledger.DeleteBatch, len(segs))]
		for _, s := range batch {
			l.reads.forget(s.LedgerId)
		}
		deleteSegments(ctx, l.cfg, l.log, batch)
	}
	return len(segs)
}

// deleteSegments deletes unlisted segments' ledgers and indexes
// (DeleteLedgers). Failures are logged: the orphan sweeper (ledger) and
// the bookies' own sweep (copies on bookies that were down) finish the
// job.
func deleteSegments(ctx context.Context, cfg Config, log *slog.Logger, segs []*brokerpb.LedgerSegment) {
	errs, err := DeleteLedgers(ctx, cfg.Env, cfg.Store, segs)
	for i, err := range errs {
		switch {
		case err == nil, errors.Is(err, ledger.ErrNoSuchLedger):
		case errors.Is(err, ledger.ErrDeleteIncomplete):
			log.Warn("retention: a bookie kept its copy of a deleted ledger", "ledger", segs[i].LedgerId, "err", err)
		default:
			log.Warn("retention: deleting a ledger failed; the orphan sweeper retries", "ledger", segs[i].LedgerId, "err", err)
		}
	}
	if err != nil {
		log.Warn("retention: deleting ledger indexes failed", "ledgers", len(segs), "err", err)
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

// MarkRetention records that retention looked at the log at t
// (LastRetention).
func (l *Log) MarkRetention(t time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.mu.lastRetention = t
}
