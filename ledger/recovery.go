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
//  4. read the entries up to that LAC (prefixLength); one of the last
//     fragment that bookies explicitly lack proves the LAC false: it is
//     dropped, logged and counted (R10);
//  5. read forward with fencing reads (R2, R3, R4), rewriting each entry
//     found to its whole write set with recovery adds (R5);
//  6. at the first absent entry, compare-and-set CLOSED with last_entry_id
//     and length (R6). When the CAS loses, re-read: CLOSED by a concurrent
//     recovery means that recovery's last entry is THE last entry, and it
//     is returned, so concurrent recoveries converge on one answer.
//
// Errors: ErrNoSuchLedger; ErrInvalid (malformed metadata, or a bookie
// rejected a recovery add as invalid); ErrEntryConflict (two bookies hold
// different bytes for one entry, R7); ctx's error when too few bookies
// answer to decide, or when an acknowledged entry cannot be read (never a
// truncation: an error is never "absent"; an acknowledged entry that
// every bookie lacks is logged and counted, see prefixLength).
//
// length needs the size of every entry up to the last one, and entries do
// not carry a cumulative length (BookKeeper's do, in their header), so
// Recover also streams the entries below its start point from the bookies
// (prefixLength), which is also how it checks the LAC (R10). That costs
// one read of the ledger per recovery, which RecoverVisit hands to a
// caller that needs the entries too.
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
// bookies serve. Entries up to the LAC are visited as they are read;
// after a false LAC (R10), those up to the first entry no bookie holds,
// which this recovery keeps whatever it finds above them. Entries above
// are visited only once the close is decided; when a concurrent recovery
// closed the ledger first, the entries up to its end are visited, read
// from the bookies where this recovery did not find them (and when it
// closed the ledger below an entry already visited, which only a false LAC
// makes possible, RecoverVisit fails with ErrMetadataConflict).
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
	prefix, err := runRecovery(ctx, env, md, m, visit)
	if err != nil {
		return nil, fmt.Errorf("ledger %d: recovering: %w", id, err)
	}
	if m.digestMismatches > 0 {
		log.Warn("recovery: bookies served entry copies whose digest does not match; other copies were used",
			"copies", m.digestMismatches)
		for range m.digestMismatches {
			env.Metrics.digestMismatch()
		}
	}
	last, _, length, _ := m.result()
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
	// holds them (R3): one that closed first cannot end below start-1,
	// unless a false LAC made this recovery visit entries another decided
	// absent (R10).
	end := closed.LastEntryId
	if end < start-1 {
		return fmt.Errorf("%w: ledger %d was closed at entry %d, below entry %d, which this recovery visited",
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

// runRecovery drives m over the network: it fences (R1), sizes and
// visits the entries below m's start, probing and distrusting a LAC that
// names an entry nobody serves (R10), then reads forward until m is done,
// and returns the payload bytes of the entries below m's counted start.
func runRecovery(ctx context.Context, env Env, md *ledgerpb.LedgerMetadata, m *recoveryMachine,
	visit func(Entry) error) (int64, error) {
	d := newRecoveryDriver(ctx, env, m)
	defer d.stop()
	if err := d.run(m.begin(), func() bool { return m.fencingDone }); err != nil {
		return 0, err
	}
	start := m.readStart()
	prefix, end, err := prefixLength(ctx, env, md, start, visit, d.probe)
	if err != nil {
		return 0, fmt.Errorf("sizing entries below %d: %w", start, err)
	}
	if end < start {
		dropped := m.distrust(end)
		env.Metrics.lacDistrusted()
		logger(env).Warn("recovery: a LAC names an entry no bookie holds (absent from enough members of its "+
			"write set); not trusted, the ledger ends before that entry unless it turns up",
			"ledger", m.ledgerID, "entry", end, "lacs_dropped", dropped, "read_from", m.readStart())
	}
	if err := d.run(m.proceed(), m.done); err != nil {
		return 0, err
	}
	_, _, _, err = m.result()
	return prefix, err
}

// recoveryDriver sends a recovery machine's requests, each on its own
// goroutine (after a backoff when it is a retry), and hands the answers
// back to the machine on the goroutine that calls run. stop cancels the
// requests in flight and waits for them.
type recoveryDriver struct {
	ctx    context.Context
	cancel context.CancelFunc
	env    Env
	m      *recoveryMachine
	wg     sync.WaitGroup
	inbox  struct {
		sync.Mutex
		answers []func() []recoveryOp
	}
	signal chan struct{}
}

func newRecoveryDriver(ctx context.Context, env Env, m *recoveryMachine) *recoveryDriver {
	d := &recoveryDriver{env: env, m: m, signal: make(chan struct{}, 1)}
	d.ctx, d.cancel = context.WithCancel(ctx)
	return d
}

func (d *recoveryDriver) stop() {
	d.cancel()
	d.wg.Wait()
}

// run sends ops and hands answers to the machine (sending the requests it
// returns) until until reports true or ctx ends.
func (d *recoveryDriver) run(ops []recoveryOp, until func() bool) error {
	for _, op := range ops {
		d.send(op)
	}
	for !until() {
		select {
		case <-d.ctx.Done():
			return d.ctx.Err()
		case <-d.signal:
		}
		d.inbox.Lock()
		answers := d.inbox.answers
		d.inbox.answers = nil
		d.inbox.Unlock()
		for _, f := range answers {
			for _, op := range f() {
				d.send(op)
			}
		}
	}
	return nil
}

// probe decides entry e (R10): found, with its copy as a bookie stores
// it, or absent; ctx's error when it cannot be decided.
func (d *recoveryDriver) probe(e int64) (found bool, stored []byte, err error) {
	if err := d.run(d.m.probe(e), func() bool { decided, _, _ := d.m.probed(e); return decided }); err != nil {
		return false, nil, err
	}
	_, found, stored = d.m.probed(e)
	return found, stored, nil
}

func (d *recoveryDriver) post(f func() []recoveryOp) {
	d.inbox.Lock()
	d.inbox.answers = append(d.inbox.answers, f)
	d.inbox.Unlock()
	select {
	case d.signal <- struct{}{}:
	default:
	}
}

func (d *recoveryDriver) send(op recoveryOp) {
	ctx, m := d.ctx, d.m
	d.wg.Go(func() {
		if op.attempt > 0 {
			if sleepReal(ctx, op.attempt) != nil {
				return
			}
		}
		switch op.kind {
		case opFence:
			resp, err := d.env.Bookies.Fence(ctx, op.bookie, m.ledgerID)
			d.post(func() []recoveryOp { return m.onFence(op.bookie, resp, err, op.attempt) })
		case opRead:
			resp, err := d.env.Bookies.ReadEntry(ctx, op.bookie, &bookiepb.ReadEntryRequest{
				LedgerId: m.ledgerID, EntryId: uint64(op.entry), Fence: op.fence, // R2
			})
			d.post(func() []recoveryOp { return m.onRead(op.bookie, op.entry, resp, err) })
		case opRecoveryAdd:
			d.env.Bookies.Add(op.bookie, &bookiepb.AddRequest{
				LedgerId: m.ledgerID, EntryId: uint64(op.entry), Lac: op.lac, Payload: op.payload, Recovery: true,
			}, func(resp *bookiepb.AddResponse, err error) {
				d.post(func() []recoveryOp { return m.onAdd(op.bookie, op.entry, resp, err) })
			})
		}
	})
}

// prefixLength sums the payload sizes of entries 0..upTo-1, which the
// LACs call acknowledged, by streaming them from the bookies of their
// write sets, and returns the sum and upTo. With E = Qw one stream per
// fragment usually does it; with striping a bookie's stream stops at the
// first entry it does not hold and the next member of the next entry's
// write set takes over.
//
// An entry of the last fragment that no member serves is handed to probe
// (R10), which decides it with fencing reads: found, its copy is taken;
// absent, the LAC that called it acknowledged is false, and prefixLength
// returns the sum of the entries below it and its id. With a nil probe it
// is treated as below.
//
// An entry below the last fragment that no member serves is retried until
// ctx ends: the writer acknowledged it before it started the next
// fragment, so closing the ledger without it would truncate acknowledged
// data. When every member explicitly answers that it does not hold it,
// data was lost: recovery cannot finish by itself, so this is logged as a
// warning naming the ledger and the entry and counted once in
// strata_ledger_recoveries_stuck_total, and logged again every
// stuckLogEvery attempts while it lasts.
//
// visit, when not nil, is handed each entry as it is read; its error ends
// prefixLength with that error.
func prefixLength(ctx context.Context, env Env, md *ledgerpb.LedgerMetadata, upTo int64, visit func(Entry) error,
	probe func(e int64) (found bool, stored []byte, err error)) (total, end int64, err error) {
	p := &prefixReader{ctx: ctx, env: env, md: md, dig: newDigester(md), visit: visit, upTo: upTo}
	for i, f := range md.Fragments {
		last := upTo - 1
		if i+1 < len(md.Fragments) {
			last = min(last, md.Fragments[i+1].FirstEntryId-1)
		}
		lastFragment := i == len(md.Fragments)-1 && probe != nil
		for next, attempt := f.FirstEntryId, 0; next <= last; {
			ws := writeSet(f.Bookies, next, int(md.WriteQuorum))
			if n, err := p.stream(ws, next, last); err != nil || n > next {
				next, attempt = n, 0
				if err != nil {
					return 0, 0, err
				}
				continue
			}
			attempt++
			if lastFragment {
				found, stored, err := probe(next)
				switch {
				case err != nil:
					return 0, 0, fmt.Errorf("entry %d unreadable: %w", next, err)
				case !found:
					return p.total, next, nil
				}
				payload, err := p.dig.open(next, stored) // checked by the probe
				if err == nil {
					err = p.take(next, payload)
				}
				if err != nil {
					return 0, 0, err
				}
				next, attempt = next+1, 0
				continue
			}
			p.unreadable(ws, next, attempt)
			if err := sleepReal(ctx, attempt); err != nil {
				return 0, 0, fmt.Errorf("entry %d unreadable: %w", next, err)
			}
		}
	}
	return p.total, upTo, nil
}

// prefixReader is prefixLength's state.
type prefixReader struct {
	ctx   context.Context
	env   Env
	md    *ledgerpb.LedgerMetadata
	dig   digester
	visit func(Entry) error
	upTo  int64
	total int64
	stuck bool // reported for this recovery
}

// stream reads entries next..last from the first member of ws that
// serves next, and returns the entry after the last one taken (next when
// none was) or visit's error.
func (p *prefixReader) stream(ws []string, next, last int64) (int64, error) {
	errStop := errors.New("stop")
	var visitErr error
	// Any member of next's write set may serve it (it was acknowledged
	// by Qa of them); one that cannot (error, or it does not hold next)
	// hands over to the next member.
	for _, b := range ws {
		from := next
		_ = p.env.Bookies.ReadEntries(p.ctx, b, &bookiepb.ReadEntriesRequest{
			LedgerId: p.md.Id, FirstEntryId: uint64(next), LastEntryId: uint64(last),
		}, func(r *bookiepb.ReadEntryResponse) error {
			if r.Status != bookiepb.ReadStatus_READ_OK || r.EntryId != uint64(next) {
				return errStop
			}
			payload, err := p.dig.open(next, r.Payload)
			if err != nil {
				p.env.Metrics.digestMismatch()
				logger(p.env).Warn("recovery: a bookie served an entry whose digest does not match; reading another copy",
					"bookie", b, "err", err)
				return errStop
			}
			if visitErr = p.take(next, payload); visitErr != nil {
				return errStop
			}
			next++
			return nil
		})
		if visitErr != nil {
			return next, visitErr
		}
		if next > from || p.ctx.Err() != nil {
			break
		}
	}
	return next, nil
}

// take counts and visits entry e, whose payload (digest checked and
// removed) is payload.
func (p *prefixReader) take(e int64, payload []byte) error {
	if p.visit != nil {
		if err := p.visit(Entry{ID: e, Payload: payload}); err != nil {
			return err
		}
	}
	p.total += int64(len(payload))
	return nil
}

// unreadable reports an entry below the last fragment (or any, without a
// probe) that no member of ws served on attempt.
func (p *prefixReader) unreadable(ws []string, e int64, attempt int) {
	switch {
	case !p.stuck && absentEverywhere(p.ctx, p.env, p.md.Id, ws, e):
		p.stuck = true
		p.env.Metrics.recoveryStuck()
		logger(p.env).Warn("recovery cannot finish: an acknowledged entry is absent from every bookie of its "+
			"write set (lost data); retrying until cancelled",
			"ledger", p.md.Id, "entry", e, "recovery_start", p.upTo, "bookies", ws)
	case attempt%stuckLogEvery == 0:
		logger(p.env).Warn("recovery still cannot read an acknowledged entry; retrying",
			"ledger", p.md.Id, "entry", e, "recovery_start", p.upTo, "bookies", ws, "attempts", attempt,
			"absent_everywhere", p.stuck)
	}
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
