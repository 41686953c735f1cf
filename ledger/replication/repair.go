package replication

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/strata-log/strata/internal/ctxtime"
	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/proto/bookiepb"
	"github.com/strata-log/strata/proto/ledgerpb"
)

// Outcome is how a repair ended without error.
type Outcome int

const (
	// Repaired: the entries were copied and the metadata now names the
	// replacement instead of the bad bookie.
	Repaired Outcome = iota + 1
	// AlreadyRepaired: the fragment no longer names the bad bookie
	// (another replicator, or an earlier attempt whose answer was lost).
	AlreadyRepaired
	// LedgerGone: the ledger was deleted; there is nothing to repair.
	LedgerGone
)

func (o Outcome) String() string {
	switch o {
	case Repaired:
		return "repaired"
	case AlreadyRepaired:
		return "already repaired"
	case LedgerGone:
		return "ledger deleted"
	}
	return "?"
}

// RepairResult reports one repair.
type RepairResult struct {
	Outcome     Outcome
	Replacement string
	// EntriesCopied and BytesCopied count the copies written (to the
	// replacement, and to surviving members found lacking an entry).
	EntriesCopied int64
	BytesCopied   int64
}

// Errors of a repair. Every failed repair is retried by a later round; a
// partial copy is harmless (a later add of the same entry replaces it, and
// nothing references the copy until the metadata names it).
var (
	// ErrNoReplacement: no writable bookie outside the fragment (and not
	// decommissioned) is registered. It wraps ledger.ErrNotEnoughBookies.
	ErrNoReplacement = errors.New("replication: no bookie to replace it with")
	// ErrCopyFailed: an entry could not be read from any copy, or a
	// bookie did not acknowledge a copy (ADD_OK).
	ErrCopyFailed = errors.New("replication: copying entries failed")
	// ErrChanged: the ledger's metadata changed in a way a repair does
	// not expect (IN_RECOVERY, the fragment moved, became an OPEN
	// ledger's last, or now holds entries that were not copied): audit
	// again.
	ErrChanged = errors.New("replication: ledger metadata changed under the repair")
)

// maxUpdateAttempts bounds the compare-and-set loop of one repair: each
// conflict means someone else changed the ledger: for a closed ledger only
// other repairs do; for an open one also its writer (an ensemble change, a
// close), a few times at most during one repair.
const maxUpdateAttempts = 16

// worker repairs fixed fragments (fragmentFixed): those of closed
// ledgers, and those before the last of open ones.
type worker struct {
	env         ledger.Env
	log         *slog.Logger
	parallelism int
	// requestTimeout bounds each read and add.
	requestTimeout time.Duration
}

// repair copies the entries of task's fragment that task.Bookie held to a
// replacement bookie and then swaps the replacement into the fragment by
// compare-and-set:
//
//  1. read the metadata: gone → LedgerGone; the fragment is not fixed
//     (IN_RECOVERY, or an OPEN ledger's last) → ErrChanged; the fragment
//     no longer names the bookie → AlreadyRepaired;
//  2. choose a replacement among the writable bookies, excluding the
//     fragment's members and avoid (decommissioned bookies), preferring a
//     rack the fragment's other members are not in, else the one they use
//     least (ledger.Placement.ChooseReplacement);
//  3. copy every entry of the fragment (fragmentRange: fixed, also while
//     the ledger is open) whose write set includes the bad bookie: read it
//     from the other members of its write set in this fragment (the bad
//     bookie last: a decommissioned one still serves), write it to the
//     replacement with a recovery add (accepted on fenced ledgers) and
//     require ADD_OK. A surviving member that answered "no such entry" gets
//     the copy too, so the entry is back at Qw copies;
//  4. compare-and-set the metadata with the replacement at the bad
//     bookie's position, changing nothing else (an OPEN ledger stays OPEN:
//     its writer accepts the swap, ledger W7), only while the fragment
//     still names the bad bookie, is still fixed, and holds no entry beyond
//     those copied; on a conflict (for an open ledger: its writer changed
//     the metadata) or an unknown outcome re-read and decide again.
//
// The metadata changes only after every copy is durable, so a reader never
// finds the replacement lacking an entry.
func (w *worker) repair(ctx context.Context, t Task, avoid map[string]bool) (RepairResult, error) {
	var res RepairResult
	md, _, err := w.env.Meta.Get(ctx, t.Ledger)
	if errors.Is(err, ledger.ErrNoSuchLedger) {
		res.Outcome = LedgerGone
		return res, nil
	}
	if err != nil {
		return res, fmt.Errorf("replication: ledger %d: read metadata: %w", t.Ledger, err)
	}
	fi, err := findFragment(md, t)
	if err != nil {
		return res, err
	}
	frag := md.GetFragments()[fi]
	if !slices.Contains(frag.GetBookies(), t.Bookie) {
		res.Outcome = AlreadyRepaired
		return res, nil
	}
	replacement, err := w.chooseReplacement(ctx, frag.GetBookies(), t.Bookie, avoid)
	if err != nil {
		return res, fmt.Errorf("ledger %d fragment %d: %w", t.Ledger, fi, err)
	}
	res.Replacement = replacement
	log := w.log.With("ledger", t.Ledger, "fragment", fi, "replacing", t.Bookie, "replacement", replacement)
	first, last := fragmentRange(md, fi)
	log.Info("re-replicating fragment", "entries", fmt.Sprintf("%d..%d", first, last),
		"state", md.GetState().String(), "reason", t.Reason)
	if err := w.copyFragment(ctx, md, fi, t.Bookie, replacement, &res); err != nil {
		// A ledger deleted during the copy fails its reads: that is no
		// failure of the repair.
		if _, _, gerr := w.env.Meta.Get(ctx, t.Ledger); errors.Is(gerr, ledger.ErrNoSuchLedger) {
			res.Outcome = LedgerGone
			return res, nil
		}
		return res, fmt.Errorf("ledger %d fragment %d: %w", t.Ledger, fi, err)
	}
	res.Outcome, err = w.swap(ctx, t, replacement, last)
	if err != nil {
		return res, err
	}
	log.Info("fragment re-replicated", "outcome", res.Outcome.String(), "entries_copied", res.EntriesCopied)
	return res, nil
}

// findFragment returns the index of the fragment t was audited on, if it is
// still there and fixed (fragmentFixed).
func findFragment(md *ledgerpb.LedgerMetadata, t Task) (int, error) {
	frags := md.GetFragments()
	if t.Fragment < 0 || t.Fragment >= len(frags) || frags[t.Fragment].GetFirstEntryId() != t.FirstEntry {
		return 0, fmt.Errorf("%w: ledger %d has no fragment %d starting at entry %d", ErrChanged, t.Ledger, t.Fragment, t.FirstEntry)
	}
	if !fragmentFixed(md, t.Fragment) {
		return 0, fmt.Errorf("%w: ledger %d is %s; fragment %d of %d is not repaired in place",
			ErrChanged, t.Ledger, md.GetState(), t.Fragment, len(frags))
	}
	return t.Fragment, nil
}

// fragmentRange is the entries of fixed fragment fi (last < first when it
// holds none). A fragment before the last ends where the next begins: its
// entries are fixed also while the ledger is OPEN, whose last_entry_id is
// meaningless (-1) until it closes. A closed ledger's may end earlier, at
// last_entry_id (a fragment started after the last entry, by an ensemble
// change whose entry was never acknowledged).
func fragmentRange(md *ledgerpb.LedgerMetadata, fi int) (first, last int64) {
	frags := md.GetFragments()
	first = frags[fi].GetFirstEntryId()
	closed := md.GetState() == ledgerpb.LedgerState_CLOSED
	switch {
	case fi+1 < len(frags) && closed:
		last = min(md.GetLastEntryId(), frags[fi+1].GetFirstEntryId()-1)
	case fi+1 < len(frags):
		last = frags[fi+1].GetFirstEntryId() - 1
	default:
		last = md.GetLastEntryId()
	}
	return first, last
}

// writeSet is entry e's write set in ensemble: Qw consecutive members from
// e mod E. It repeats the ledger package's (unexported) striping rule,
// which is part of the protocol and never changes.
func writeSet(ensemble []string, e int64, writeQuorum int) []string {
	n := len(ensemble)
	ws := make([]string, 0, writeQuorum)
	start := int(e % int64(n))
	for i := range writeQuorum {
		ws = append(ws, ensemble[(start+i)%n])
	}
	return ws
}

// chooseReplacement picks a bookie for bad's place in ensemble
// (ledger.Placement.ChooseReplacement: writable, neither in ensemble nor
// in avoid, preferably in a rack none of the other members is in, else
// the least used one).
func (w *worker) chooseReplacement(ctx context.Context, ensemble []string, bad string, avoid map[string]bool) (string, error) {
	infos, err := w.env.Registry.Writable(ctx)
	if err != nil {
		return "", fmt.Errorf("replication: list writable bookies: %w", err)
	}
	exclude := maps.Clone(avoid)
	if exclude == nil {
		exclude = map[string]bool{}
	}
	exclude[bad] = true
	pick, err := w.env.Placement.ChooseReplacement(infos, ensemble, bad, exclude)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrNoReplacement, err)
	}
	return pick, nil
}

// copyFragment copies the entries of fragment fi whose write set includes
// bad to replacement, parallelism entries at a time.
func (w *worker) copyFragment(ctx context.Context, md *ledgerpb.LedgerMetadata, fi int, bad, replacement string, res *RepairResult) error {
	ensemble := md.GetFragments()[fi].GetBookies()
	qw := int(md.GetWriteQuorum())
	first, last := fragmentRange(md, fi)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		next         = first
		mu           sync.Mutex
		firstErr     error
		wg           sync.WaitGroup
		copied, size atomic.Int64
	)
	claim := func() (int64, bool) {
		mu.Lock()
		defer mu.Unlock()
		for ; next <= last && firstErr == nil; next++ {
			if slices.Contains(writeSet(ensemble, next, qw), bad) {
				e := next
				next++
				return e, true
			}
		}
		return 0, false
	}
	for range w.parallelism {
		wg.Go(func() {
			for {
				e, ok := claim()
				if !ok {
					return
				}
				n, bytes, err := w.copyEntry(ctx, md, writeSet(ensemble, e, qw), e, bad, replacement)
				copied.Add(n)
				size.Add(bytes)
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
						cancel()
					}
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	res.EntriesCopied += copied.Load()
	res.BytesCopied += size.Load()
	return firstErr
}

// copyEntry reads entry e from its write set ws (the bad bookie last) and
// writes it to replacement, and to every surviving member that explicitly
// lacks it. It returns the copies written and their bytes.
func (w *worker) copyEntry(ctx context.Context, md *ledgerpb.LedgerMetadata, ws []string, e int64, bad, replacement string) (int64, int64, error) {
	ledgerID := md.GetId()
	sources := make([]string, 0, len(ws))
	for _, b := range ws {
		if b != bad {
			sources = append(sources, b)
		}
	}
	sources = append(sources, bad)
	var (
		found   *bookiepb.ReadEntryResponse
		lacking []string
		errs    []error
	)
	for _, src := range sources {
		rctx, cancel := context.WithTimeout(ctx, w.requestTimeout)
		resp, err := w.env.Bookies.ReadEntry(rctx, src, &bookiepb.ReadEntryRequest{LedgerId: ledgerID, EntryId: uint64(e)})
		cancel()
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("bookie %s: %w", src, err))
		case resp.GetStatus() == bookiepb.ReadStatus_READ_NO_ENTRY:
			errs = append(errs, fmt.Errorf("bookie %s: no such entry", src))
			if src != bad {
				lacking = append(lacking, src)
			}
		case resp.GetLedgerId() != ledgerID || resp.GetEntryId() != uint64(e):
			errs = append(errs, fmt.Errorf("bookie %s: answered with entry %d/%d", src, resp.GetLedgerId(), resp.GetEntryId()))
		default:
			// A copy with a wrong digest is never copied on (D1).
			if _, err := ledger.OpenEntry(md, e, resp.GetPayload()); err != nil {
				errs = append(errs, fmt.Errorf("bookie %s: %w", src, err))
				continue
			}
			found = resp
		}
		if found != nil {
			break
		}
	}
	if found == nil {
		if ctx.Err() != nil {
			return 0, 0, ctx.Err()
		}
		return 0, 0, fmt.Errorf("%w: entry %d/%d: %w: %w", ErrCopyFailed, ledgerID, e, ledger.ErrEntryUnreadable, errors.Join(errs...))
	}
	var n, bytes int64
	for _, dst := range append([]string{replacement}, lacking...) {
		req := &bookiepb.AddRequest{LedgerId: ledgerID, EntryId: uint64(e), Lac: found.GetLac(), Payload: found.GetPayload(), Recovery: true}
		if err := w.add(ctx, dst, req); err != nil {
			return n, bytes, err
		}
		n++
		bytes += int64(len(found.GetPayload()))
	}
	return n, bytes, nil
}

// add sends one recovery add and waits for ADD_OK.
func (w *worker) add(ctx context.Context, bookie string, req *bookiepb.AddRequest) error {
	type answer struct {
		resp *bookiepb.AddResponse
		err  error
	}
	done := make(chan answer, 1)
	w.env.Bookies.Add(bookie, req, func(resp *bookiepb.AddResponse, err error) { done <- answer{resp, err} })
	t := time.NewTimer(w.requestTimeout)
	defer t.Stop()
	select {
	case a := <-done:
		switch {
		case a.err != nil:
			return fmt.Errorf("%w: entry %d/%d to bookie %s: %w", ErrCopyFailed, req.LedgerId, req.EntryId, bookie, a.err)
		case a.resp.GetStatus() != bookiepb.AddStatus_ADD_OK:
			return fmt.Errorf("%w: entry %d/%d to bookie %s: %s %s", ErrCopyFailed, req.LedgerId, req.EntryId, bookie,
				a.resp.GetStatus(), a.resp.GetMessage())
		}
		return nil
	case <-t.C:
		return fmt.Errorf("%w: entry %d/%d to bookie %s: no answer within %v", ErrCopyFailed, req.LedgerId, req.EntryId, bookie, w.requestTimeout)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// swap compare-and-sets the fragment with replacement in bad's position;
// copiedTo is the last entry copied. Each attempt re-reads the metadata and
// decides again: the fragment must still be fixed (an open ledger's writer
// may have closed it, or changed its ensemble meanwhile) and hold no entry
// beyond copiedTo, and nothing but that one bookie changes (an OPEN ledger
// stays OPEN, its later fragments as they are).
func (w *worker) swap(ctx context.Context, t Task, replacement string, copiedTo int64) (Outcome, error) {
	var lastErr error
	for attempt := range maxUpdateAttempts {
		if attempt > 0 && !errors.Is(lastErr, ledger.ErrMetadataConflict) {
			// The store is unavailable or the outcome unknown: back off.
			if err := ctxtime.Sleep(ctx, min(50*time.Millisecond<<attempt, time.Second)); err != nil {
				return 0, fmt.Errorf("replication: ledger %d: %w (last error: %v)", t.Ledger, err, lastErr)
			}
		}
		md, version, err := w.env.Meta.Get(ctx, t.Ledger)
		switch {
		case errors.Is(err, ledger.ErrNoSuchLedger):
			return LedgerGone, nil
		case err != nil:
			lastErr = err
			continue
		}
		fi, err := findFragment(md, t)
		if err != nil {
			return 0, err
		}
		bookies := md.GetFragments()[fi].GetBookies()
		pos := slices.Index(bookies, t.Bookie)
		switch {
		case pos < 0 && slices.Contains(bookies, replacement):
			return Repaired, nil // an attempt whose answer was lost applied
		case pos < 0:
			return AlreadyRepaired, nil
		case slices.Contains(bookies, replacement):
			return 0, fmt.Errorf("%w: ledger %d fragment %d already has %s", ErrChanged, t.Ledger, fi, replacement)
		}
		if _, last := fragmentRange(md, fi); last > copiedTo {
			return 0, fmt.Errorf("%w: ledger %d fragment %d now ends at entry %d; copied up to %d",
				ErrChanged, t.Ledger, fi, last, copiedTo)
		}
		updated := proto.Clone(md).(*ledgerpb.LedgerMetadata)
		updated.Fragments[fi].Bookies[pos] = replacement
		_, err = w.env.Meta.Update(ctx, updated, version)
		if err == nil {
			return Repaired, nil
		}
		// A conflict, or an unknown outcome: read again and decide.
		lastErr = err
	}
	return 0, fmt.Errorf("replication: ledger %d: metadata update gave up after %d attempts: %w", t.Ledger, maxUpdateAttempts, lastErr)
}
