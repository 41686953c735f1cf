package ledger

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/strata-log/strata/proto/ledgerpb"
)

// AckLevel is how many bookies of an entry's write set must have it
// before AppendAcks's level callback runs. It changes nothing about the
// LAC: readers still see an entry only once it is acknowledged at the ack
// quorum, in order (W2). The levels exist for produce acks (DESIGN §5).
type AckLevel int

const (
	// AckQuorum: the entry is acknowledged (Qa bookies of its write set,
	// every lower entry acknowledged): the level callback runs with the
	// append callback.
	AckQuorum AckLevel = iota
	// AckOne: one bookie of the entry's durable write set answered
	// ADD_OK (fsynced). It may come before lower entries are acknowledged,
	// and promises nothing about them. An entry at AckOne may still be
	// lost: recovery can truncate it if the writer dies before Qa.
	AckOne
	// AckAll: the entry is acknowledged AND every member of its write set
	// in the durable metadata answered ADD_OK (after an ensemble change,
	// the replacement's answer counts, the replaced bookie's does not).
	AckAll
)

func (l AckLevel) String() string {
	switch l {
	case AckQuorum:
		return "quorum"
	case AckOne:
		return "one"
	case AckAll:
		return "all"
	}
	return fmt.Sprintf("AckLevel(%d)", int(l))
}

// ErrUnderReplicated is the AckAll level callback's error when the entry
// was acknowledged (it is durable at the ack quorum and part of the
// ledger) but a member of its write set failed it and, the write set of an
// acknowledged entry being fixed, never will have it (no spare bookie, or
// the failure came after the acknowledgement). Re-replication repairs it.
var ErrUnderReplicated = errors.New("ledger: entry acknowledged but not stored by its whole write set")

// AppendAcks is Append with a second callback: cb behaves exactly as
// Append's (called once, in entry order, at the ack quorum, or with an
// unknown-outcome error), and levelCB (may be nil) is called exactly once,
// when the entry reaches level (nil error), or with an error:
//
//   - the writer's terminal error (ErrFenced, ErrWriterFailed,
//     ErrLedgerClosed) if it stops before the level is reached: the
//     outcome is unknown, as for cb;
//   - ErrUnderReplicated (AckAll only): acknowledged, but the write set
//     can no longer be complete.
//
// For AckQuorum levelCB runs right after cb. For AckOne it may run before
// cb and before lower entries' callbacks; for AckAll after cb. Both run
// on an arbitrary goroutine and must not block. Close waits for pending
// level callbacks like for pending entries.
func (w *Writer) AppendAcks(ctx context.Context, payload []byte, level AckLevel, cb, levelCB func(entryID int64, err error)) error {
	switch level {
	case AckQuorum:
		if levelCB == nil {
			return w.append(ctx, payload, cb, AckQuorum, nil)
		}
		both := func(id int64, err error) {
			if cb != nil {
				cb(id, err)
			}
			levelCB(id, err)
		}
		return w.append(ctx, payload, both, AckQuorum, nil)
	case AckOne, AckAll:
		return w.append(ctx, payload, cb, level, levelCB)
	}
	return fmt.Errorf("%w: ack level %v", ErrInvalid, level)
}

// ackLevels holds the entries whose AppendAcks level callback has not run
// yet, by id, and decides when each runs. It does no I/O and has no lock
// of its own: it lives in the writer's mu (w.mu.levels), and every method
// REQUIRES w.mu held. md and change, where a method takes them, are the
// writer's durable metadata and pending ensemble change.
type ackLevels struct {
	ledgerID uint64
	waiters  map[int64]*entry
	// deliver queues a decided callback on the writer's deliveries, in the
	// order decided; drained runs when a decision leaves no waiter (Close
	// waits for the last one).
	deliver func(delivery)
	drained func()
}

// add makes e, whose levelCB is set, a waiter.
func (a *ackLevels) add(e *entry) { a.waiters[e.id] = e }

// pending is the number of waiters.
func (a *ackLevels) pending() int { return len(a.waiters) }

// appendLevelSet appends to dst the set of bookies whose ADD_OK for e
// counts towards AckOne: the members of e's durable write set that stay
// in it if a pending ensemble change covering e commits (W3: a
// replacement counts only once the change is durable).
func appendLevelSet(dst []string, e *entry, md *ledgerpb.LedgerMetadata, change *ensembleChange) []string {
	ws := appendEntryWriteSet(dst, md, e.id)
	if change == nil || e.id < change.start {
		return ws
	}
	var buf writeSetBuf
	next := appendWriteSet(buf[:0], change.ensemble, e.id, int(md.WriteQuorum))
	return slices.DeleteFunc(ws, func(b string) bool { return !slices.Contains(next, b) })
}

// check runs e's level callback if its level is reached or can no longer
// be.
// REQUIRES: w.mu held, w.mu.err nil.
func (a *ackLevels) check(e *entry, md *ledgerpb.LedgerMetadata, change *ensembleChange) {
	if e.levelCB == nil {
		return
	}
	var buf writeSetBuf
	switch e.level {
	case AckOne:
		for _, b := range appendLevelSet(buf[:0], e, md, change) {
			if e.oks.has(b) {
				a.resolve(e, nil)
				return
			}
		}
	case AckAll:
		if !e.acked {
			return
		}
		// An acknowledged entry's write set never changes (ensemble
		// changes start above the LAC, W4).
		complete := true
		for _, b := range appendEntryWriteSet(buf[:0], md, e.id) {
			switch {
			case e.oks.has(b):
			case !e.sent.has(b):
				// Failed or never sent: acknowledged entries are not resent.
				a.resolve(e, fmt.Errorf("%w: ledger %d entry %d: bookie %s does not have it",
					ErrUnderReplicated, a.ledgerID, e.id, b))
				return
			default:
				complete = false
			}
		}
		if complete {
			a.resolve(e, nil)
		}
	}
}

// checkAll re-checks every waiter (after the durable metadata changed).
// REQUIRES: w.mu held, w.mu.err nil.
func (a *ackLevels) checkAll(md *ledgerpb.LedgerMetadata, change *ensembleChange) {
	for _, id := range slices.Sorted(maps.Keys(a.waiters)) {
		a.check(a.waiters[id], md, change)
	}
}

// resolve queues e's level callback with err.
// REQUIRES: w.mu held.
func (a *ackLevels) resolve(e *entry, err error) {
	a.deliver(delivery{cb: e.levelCB, id: e.id, err: err})
	e.levelCB = nil
	delete(a.waiters, e.id)
	if len(a.waiters) == 0 {
		a.drained()
	}
}

// failAll fails every waiter with err, in entry order.
// REQUIRES: w.mu held.
func (a *ackLevels) failAll(err error) {
	for _, id := range slices.Sorted(maps.Keys(a.waiters)) {
		a.resolve(a.waiters[id], err)
	}
}

// adoptSwaps prepares the waiters for the durable metadata changing from
// old to md, which differ (for entries below md's last fragment) only by
// the bookies a repair swapped in (W7): a replacement counts as holding
// the entry, since the replicator names it only once its copy is durable.
// Without this an AckAll waiter would find a write set member the writer
// never sent to and report ErrUnderReplicated. The caller re-checks the
// waiters afterwards.
// REQUIRES: w.mu held.
func (a *ackLevels) adoptSwaps(old, md *ledgerpb.LedgerMetadata) {
	lastStart := md.Fragments[len(md.Fragments)-1].FirstEntryId
	for _, e := range a.waiters {
		if e.id >= lastStart {
			continue
		}
		before := entryWriteSet(old, e.id)
		for _, b := range entryWriteSet(md, e.id) {
			if !slices.Contains(before, b) {
				e.sent.add(b)
				e.oks.add(b)
			}
		}
	}
}
