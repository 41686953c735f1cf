package ledger

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/strata-log/strata/internal/ctxtime"
	"github.com/strata-log/strata/proto/bookiepb"
	"github.com/strata-log/strata/proto/ledgerpb"
)

// Retry backoff for recovery's requests and metadata calls. Recover has no
// options; these are short because a recovery is on the fail-over path.
const (
	recoveryRetryMin = 20 * time.Millisecond
	recoveryRetryMax = time.Second
)

// Recover opens ledger id with fencing and closes it (BookKeeper's recovery
// open; DESIGN.md §3), and returns its CLOSED metadata:
//
//  1. read the metadata; CLOSED: return it as it is;
//  2. compare-and-set the state to IN_RECOVERY (already IN_RECOVERY: a
//     concurrent or repeated recovery; go on). From here the old writer's
//     ensemble changes fail, so the ensemble recovery reads is final;
//  3. fence the last ensemble until every write set is covered (R1) and
//     take the highest LAC the fenced bookies report;
//  4. read forward with fencing reads (R2, R3, R4), rewriting each entry
//     found to its whole write set with recovery adds (R5);
//  5. at the first absent entry, compare-and-set CLOSED with last_entry_id
//     and length (R6). When the CAS loses, re-read: CLOSED by a concurrent
//     recovery means that recovery's last entry is THE last entry, and it
//     is returned, so concurrent recoveries converge on one answer.
//
// Errors: ErrNoSuchLedger; ErrInvalid (malformed metadata, or a bookie
// rejected a recovery add as invalid); ErrEntryConflict (two bookies hold
// different bytes for one entry, R7); ctx's error when too few bookies
// answer to decide, or when an entry below the LAC cannot be read (never a
// truncation: an error is never "absent"; the second case is logged and
// counted, see prefixLength).
//
// length needs the size of every entry up to the last one, and entries do
// not carry a cumulative length (BookKeeper's do, in their header), so
// Recover also streams the entries below its start point from the bookies
// (prefixLength). That costs one read of the ledger per recovery, which
// RecoverVisit hands to a caller that needs the entries too.
func Recover(ctx context.Context, env Env, id uint64) (*ledgerpb.LedgerMetadata, error) {
	return RecoverVisit(ctx, env, id, nil)
}

// RecoverVisit is Recover that also hands visit every entry of the
// recovered ledger: entries 0..LastEntryId of the metadata it returns, in
// order, once each, digest removed (the payload is valid only during the
// call). Recovery reads them anyway (the entries below its start point
// to size them, those above to rewrite them), so a caller that needs the
// ledger's contents, as a partition's new owner does to index it, does not
// read the ledger a second time: on a takeover that halves what the
// bookies serve. Entries above the LAC are visited only once the close
// is decided; when a concurrent recovery closed the ledger first, the
// entries up to its end are visited, read from the bookies where this
// recovery did not find them.
//
// An error from visit stops the recovery and is returned wrapped; the
// ledger then stays IN_RECOVERY (a later recovery finishes it), unless
// the close was already written.
func RecoverVisit(ctx context.Context, env Env, id uint64, visit func(Entry) error) (*ledgerpb.LedgerMetadata, error) {
	log := logger(env).With("ledger", id)
	md, version, err := markInRecovery(ctx, env, id)
	if err != nil {
		return nil, err
	}
	if md.State == ledgerpb.LedgerState_CLOSED {
		if err := visitClosed(ctx, env, md, 0, visit); err != nil {
			return nil, err
		}
		return md, nil
	}
	m, err := newRecoveryMachine(md)
	if err != nil {
		return nil, err
	}
	m.keepFound = visit != nil
	if err := runRecovery(ctx, env, m); err != nil {
		return nil, fmt.Errorf("ledger %d: recovering: %w", id, err)
	}
	if m.digestMismatches > 0 {
		log.Warn("recovery: bookies served entry copies whose digest does not match; other copies were used",
			"copies", m.digestMismatches)
		for range m.digestMismatches {
			env.Metrics.digestMismatch()
		}
	}
	last, start, length, _ := m.result()
	prefix, err := prefixLength(ctx, env, md, start, visit)
	if err != nil {
		return nil, fmt.Errorf("ledger %d: recovering: sizing entries below %d: %w", id, start, err)
	}
	closed, err := closeRecovered(ctx, env, md, version, last, prefix+length)
	if err != nil {
		return nil, err
	}
	log.Debug("ledger recovered", "last_entry", closed.LastEntryId, "length", closed.Length)
	if err := visitRecovered(ctx, env, closed, m, visit); err != nil {
		return nil, err
	}
	return closed, nil
}

// visitRecovered hands visit (when not nil) the entries m found, start..
// last, and what else the ledger as closed holds: a concurrent recovery
// that closed it first may have ended it before last, or after it (those
// entries are read from the bookies). The entries below start were
// visited as prefixLength read them.
func visitRecovered(ctx context.Context, env Env, closed *ledgerpb.LedgerMetadata, m *recoveryMachine, visit func(Entry) error) error {
	if visit == nil {
		return nil
	}
	last, start, _, _ := m.result()
	// Entries below start are acknowledged, so every recovery's result
	// holds them (R3): one that closed first cannot end below start-1.
	end := closed.LastEntryId
	if end < start-1 {
		return fmt.Errorf("%w: ledger %d was closed at entry %d, below its acknowledged entry %d",
			ErrMetadataConflict, closed.Id, end, start-1)
	}
	for i, payload := range m.found[:max(min(end, last)-start+1, 0)] {
		if err := visit(Entry{ID: start + int64(i), Payload: payload}); err != nil {
			return fmt.Errorf("ledger %d: %w", closed.Id, err)
		}
	}
	return visitClosed(ctx, env, closed, last+1, visit)
}

// visitClosed hands visit (when not nil) entries from..LastEntryId of the
// closed ledger md, read from its bookies.
func visitClosed(ctx context.Context, env Env, md *ledgerpb.LedgerMetadata, from int64, visit func(Entry) error) error {
	if visit == nil || from > md.LastEntryId {
		return nil
	}
	r, err := ReaderFor(env, md, ReaderOptions{})
	if err != nil {
		return fmt.Errorf("ledger %d: reading the closed ledger: %w", md.Id, err)
	}
	if err := r.ReadRange(ctx, from, md.LastEntryId, visit); err != nil {
		return fmt.Errorf("ledger %d: reading the closed ledger: %w", md.Id, err)
	}
	return nil
}

// markInRecovery moves an OPEN ledger to IN_RECOVERY and returns the
// metadata and its version; CLOSED and IN_RECOVERY ledgers are returned as
// they are.
func markInRecovery(ctx context.Context, env Env, id uint64) (*ledgerpb.LedgerMetadata, int64, error) {
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			if err := sleepReal(ctx, attempt); err != nil {
				return nil, 0, fmt.Errorf("ledger %d: marking in recovery: %w", id, err)
			}
		}
		md, version, err := env.Meta.Get(ctx, id)
		if errors.Is(err, ErrNoSuchLedger) {
			return nil, 0, err
		}
		if err != nil {
			continue
		}
		if md.State != ledgerpb.LedgerState_OPEN {
			return md, version, nil
		}
		md = proto.Clone(md).(*ledgerpb.LedgerMetadata)
		md.State = ledgerpb.LedgerState_IN_RECOVERY
		v, err := env.Meta.Update(ctx, md, version)
		if err == nil {
			return md, v, nil
		}
		// Conflict (the writer changed its ensemble, or another recovery
		// won) or unknown outcome: read again.
		if errors.Is(err, ErrMetadataConflict) {
			attempt = -1
		}
	}
}

// closeRecovered compare-and-sets the metadata to CLOSED at last. A lost
// CAS re-reads: CLOSED (by a concurrent recovery, or by an attempt of ours
// whose answer was lost) is returned as THE result.
func closeRecovered(ctx context.Context, env Env, md *ledgerpb.LedgerMetadata, version, last, length int64) (*ledgerpb.LedgerMetadata, error) {
	for attempt := 0; ; attempt++ {
		closed := proto.Clone(md).(*ledgerpb.LedgerMetadata)
		closed.State = ledgerpb.LedgerState_CLOSED
		closed.LastEntryId = last
		closed.Length = length
		closed.ClosedAtMs = now(env).UnixMilli()
		_, err := env.Meta.Update(ctx, closed, version)
		if err == nil {
			return closed, nil
		}
		if !errors.Is(err, ErrMetadataConflict) {
			if serr := sleepReal(ctx, attempt+1); serr != nil {
				return nil, fmt.Errorf("ledger %d: closing after recovery: %w (last error: %w)", md.Id, serr, err)
			}
		}
		got, gotVersion, err := env.Meta.Get(ctx, md.Id)
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return nil, fmt.Errorf("ledger %d: closing after recovery: %w", md.Id, err)
			}
		case got.State == ledgerpb.LedgerState_CLOSED:
			return got, nil
		case got.State == ledgerpb.LedgerState_IN_RECOVERY:
			md, version = got, gotVersion
		default:
			return nil, fmt.Errorf("%w: ledger %d went back to %s during recovery", ErrMetadataConflict, md.Id, got.State)
		}
	}
}

// runRecovery drives m over the network: each op runs on its own goroutine
// (after a backoff when it is a retry) and its answer goes back to m on
// this goroutine. Outstanding requests are cancelled and waited for before
// it returns.
func runRecovery(ctx context.Context, env Env, m *recoveryMachine) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	var inbox struct {
		sync.Mutex
		answers []func() []recoveryOp
	}
	signal := make(chan struct{}, 1)
	post := func(f func() []recoveryOp) {
		inbox.Lock()
		inbox.answers = append(inbox.answers, f)
		inbox.Unlock()
		select {
		case signal <- struct{}{}:
		default:
		}
	}
	send := func(op recoveryOp) {
		wg.Go(func() {
			if op.attempt > 0 {
				if sleepReal(ctx, op.attempt) != nil {
					return
				}
			}
			switch op.kind {
			case opFence:
				resp, err := env.Bookies.Fence(ctx, op.bookie, m.ledgerID)
				post(func() []recoveryOp { return m.onFence(op.bookie, resp, err, op.attempt) })
			case opRead:
				resp, err := env.Bookies.ReadEntry(ctx, op.bookie, &bookiepb.ReadEntryRequest{
					LedgerId: m.ledgerID, EntryId: uint64(op.entry), Fence: op.fence, // R2
				})
				post(func() []recoveryOp { return m.onRead(op.bookie, op.entry, resp, err) })
			case opRecoveryAdd:
				env.Bookies.Add(op.bookie, &bookiepb.AddRequest{
					LedgerId: m.ledgerID, EntryId: uint64(op.entry), Lac: op.lac, Payload: op.payload, Recovery: true,
				}, func(resp *bookiepb.AddResponse, err error) {
					post(func() []recoveryOp { return m.onAdd(op.bookie, op.entry, resp, err) })
				})
			}
		})
	}
	for _, op := range m.begin() {
		send(op)
	}
	for !m.done() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-signal:
		}
		inbox.Lock()
		answers := inbox.answers
		inbox.answers = nil
		inbox.Unlock()
		for _, f := range answers {
			for _, op := range f() {
				send(op)
			}
		}
	}
	_, _, _, err := m.result()
	return err
}

// prefixLength sums the payload sizes of entries 0..upTo-1, all of them
// acknowledged, by streaming them from the bookies of their write sets.
// With E = Qw one stream per fragment usually does it; with striping a
// bookie's stream stops at the first entry it does not hold and the next
// member of the next entry's write set takes over.
//
// An entry below upTo that no member serves is retried until ctx ends: it
// is acknowledged (below the LAC), so closing the ledger without it would
// truncate acknowledged data. When every member explicitly answers that it
// does not hold it, the LAC was inflated (a buggy or hostile WriteLAC
// stored before bookies refused them, ledger/storage/doc.go H1) or data
// was lost: recovery cannot finish by itself, so this is logged as a
// warning naming the ledger and the entry and counted once in
// strata_ledger_recoveries_stuck_total, and logged again every
// stuckLogEvery attempts while it lasts.
//
// visit, when not nil, is handed each entry as it is read; its error ends
// prefixLength with that error.
func prefixLength(ctx context.Context, env Env, md *ledgerpb.LedgerMetadata, upTo int64, visit func(Entry) error) (int64, error) {
	var total int64
	var visitErr error
	errStop := errors.New("stop")
	stuck := false // reported for this recovery
	dig := newDigester(md)
	for i, f := range md.Fragments {
		end := upTo - 1
		if i+1 < len(md.Fragments) {
			end = min(end, md.Fragments[i+1].FirstEntryId-1)
		}
		next := f.FirstEntryId
		for attempt := 0; next <= end; {
			progressed := false
			// Any member of next's write set may serve it (it was
			// acknowledged by Qa of them); one that cannot (error, or
			// it does not hold next) hands over to the next member.
			ws := writeSet(f.Bookies, next, int(md.WriteQuorum))
			for _, b := range ws {
				_ = env.Bookies.ReadEntries(ctx, b, &bookiepb.ReadEntriesRequest{
					LedgerId: md.Id, FirstEntryId: uint64(next), LastEntryId: uint64(end),
				}, func(r *bookiepb.ReadEntryResponse) error {
					if r.Status != bookiepb.ReadStatus_READ_OK || r.EntryId != uint64(next) {
						return errStop
					}
					payload, err := dig.open(next, r.Payload)
					if err != nil {
						env.Metrics.digestMismatch()
						logger(env).Warn("recovery: a bookie served an entry whose digest does not match; reading another copy",
							"bookie", b, "err", err)
						return errStop
					}
					if visit != nil {
						if visitErr = visit(Entry{ID: next, Payload: payload}); visitErr != nil {
							return errStop
						}
					}
					total += dig.payloadLen(r.Payload)
					next++
					progressed = true
					return nil
				})
				if visitErr != nil {
					return 0, visitErr
				}
				if progressed || ctx.Err() != nil {
					break
				}
			}
			if progressed {
				attempt = 0
				continue
			}
			attempt++
			switch {
			case !stuck && absentEverywhere(ctx, env, md.Id, ws, next):
				stuck = true
				env.Metrics.recoveryStuck()
				logger(env).Warn("recovery cannot finish: an entry below the LAC is absent from every bookie of its "+
					"write set (an inflated LAC, or lost data); retrying until cancelled",
					"ledger", md.Id, "entry", next, "recovery_start", upTo, "bookies", ws)
			case attempt%stuckLogEvery == 0:
				logger(env).Warn("recovery still cannot read an entry below the LAC; retrying",
					"ledger", md.Id, "entry", next, "recovery_start", upTo, "bookies", ws, "attempts", attempt,
					"absent_everywhere", stuck)
			}
			if err := sleepReal(ctx, attempt); err != nil {
				return 0, fmt.Errorf("entry %d unreadable: %w", next, err)
			}
		}
	}
	return total, nil
}

// stuckLogEvery is how many failed attempts (about a second each, at the
// longest backoff) pass between two warnings about an entry recovery
// cannot read.
const stuckLogEvery = 30

// absentEverywhere reports whether every bookie in ws explicitly answers
// that it does not hold the entry. An error or a timeout is not "absent"
// (DESIGN.md §3), so any of them makes it false.
func absentEverywhere(ctx context.Context, env Env, ledgerID uint64, ws []string, entry int64) bool {
	for _, b := range ws {
		resp, err := env.Bookies.ReadEntry(ctx, b, &bookiepb.ReadEntryRequest{LedgerId: ledgerID, EntryId: uint64(entry)})
		if err != nil || resp.GetStatus() != bookiepb.ReadStatus_READ_NO_ENTRY {
			return false
		}
	}
	return len(ws) > 0
}

// sleepReal waits the backoff for attempt (1, 2, ...) or until ctx ends.
func sleepReal(ctx context.Context, attempt int) error {
	d := recoveryRetryMin << min(attempt-1, 10)
	return ctxtime.Sleep(ctx, min(d, recoveryRetryMax))
}
