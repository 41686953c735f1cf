package ledger

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
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

// levelSetLocked is the set of bookies whose ADD_OK for e counts towards
// AckOne: the members of e's durable write set that stay in it if a
// pending ensemble change covering e commits (W3: a replacement counts
// only once the change is durable).
// REQUIRES: w.mu held.
func (w *Writer) levelSetLocked(e *entry) []string {
	ws := entryWriteSet(w.mu.md, e.id)
	c := w.mu.change
	if c == nil || e.id < c.start {
		return ws
	}
	next := writeSet(c.ensemble, e.id, int(w.mu.md.WriteQuorum))
	return slices.DeleteFunc(ws, func(b string) bool { return !slices.Contains(next, b) })
}

// checkLevelLocked runs e's level callback if its level is reached or can
// no longer be.
// REQUIRES: w.mu held, w.mu.err nil.
func (w *Writer) checkLevelLocked(e *entry) {
	if e.levelCB == nil {
		return
	}
	switch e.level {
	case AckOne:
		for _, b := range w.levelSetLocked(e) {
			if e.oks[b] {
				w.resolveLevelLocked(e, nil)
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
		for _, b := range entryWriteSet(w.mu.md, e.id) {
			switch {
			case e.oks[b]:
			case !e.sent[b]:
				// Failed or never sent: acknowledged entries are not resent.
				w.resolveLevelLocked(e, fmt.Errorf("%w: ledger %d entry %d: bookie %s does not have it",
					ErrUnderReplicated, w.id, e.id, b))
				return
			default:
				complete = false
			}
		}
		if complete {
			w.resolveLevelLocked(e, nil)
		}
	}
}

// checkAllLevelsLocked re-checks every pending level callback (after an
// ensemble change became durable).
// REQUIRES: w.mu held, w.mu.err nil.
func (w *Writer) checkAllLevelsLocked() {
	for _, id := range slices.Sorted(maps.Keys(w.mu.levelWaiters)) {
		w.checkLevelLocked(w.mu.levelWaiters[id])
	}
}

// resolveLevelLocked queues e's level callback.
// REQUIRES: w.mu held.
func (w *Writer) resolveLevelLocked(e *entry, err error) {
	w.mu.deliveries = append(w.mu.deliveries, delivery{cb: e.levelCB, id: e.id, err: err})
	e.levelCB = nil
	delete(w.mu.levelWaiters, e.id)
	if w.mu.closing && len(w.mu.levelWaiters) == 0 {
		w.notifyLocked() // Close waits for the last one
	}
}

// failLevelWaitersLocked fails every pending level callback with err, in
// entry order.
// REQUIRES: w.mu held.
func (w *Writer) failLevelWaitersLocked(err error) {
	for _, id := range slices.Sorted(maps.Keys(w.mu.levelWaiters)) {
		w.resolveLevelLocked(w.mu.levelWaiters[id], err)
	}
}
