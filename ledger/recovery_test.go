package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/ledger/ledgertest"
	"github.com/strata-log/strata/proto/ledgerpb"
)

func TestRecoverClosedLedgerUnchanged(t *testing.T) {
	c := ledgertest.NewCluster(3)
	w := wtCreate(t, c, ledger.CreateOptions{})
	r := newWTRecorder(t, c, w)
	wtAppend(t, w, r, "e0")
	if err := w.Close(wtCtx(t)); err != nil {
		t.Fatal(err)
	}
	updates := c.Meta.Updates()
	md, visited := recoverVisited(t, wtCtx(t), c, w.ID())
	if got := fmt.Sprint(visited); got != "[e0]" {
		t.Errorf("visited %s, want the closed ledger's [e0]", got)
	}
	if md.State != ledgerpb.LedgerState_CLOSED || md.LastEntryId != 0 || c.Meta.Updates() != updates {
		t.Errorf("Recover of a closed ledger: %v, %d updates", md, c.Meta.Updates()-updates)
	}
	if c.Bookies.Fenced(wtAddr(0), w.ID()) {
		t.Error("Recover fenced a closed ledger")
	}
}

func TestRecoverNoSuchLedger(t *testing.T) {
	c := ledgertest.NewCluster(3)
	if _, err := ledger.Recover(wtCtx(t), c.Env(), 99); !errors.Is(err, ledger.ErrNoSuchLedger) {
		t.Fatalf("Recover: %v", err)
	}
}

func TestRecoverEmptyLedgerFencesWriter(t *testing.T) {
	c := ledgertest.NewCluster(3)
	w := wtCreate(t, c, ledger.CreateOptions{})
	md, err := ledger.Recover(wtCtx(t), c.Env(), w.ID())
	if err != nil {
		t.Fatal(err)
	}
	if md.LastEntryId != -1 || md.Length != 0 {
		t.Errorf("recovered %v", md)
	}
	if _, err := w.AppendSync(wtCtx(t), []byte("late")); !errors.Is(err, ledger.ErrFenced) {
		t.Errorf("old writer's append: %v, want ErrFenced", err)
	}
	if err := w.Close(wtCtx(t)); !errors.Is(err, ledger.ErrFenced) {
		t.Errorf("old writer's Close: %v", err)
	}
}

// Recovery includes every acknowledged entry and any entry one bookie has
// (an unknown outcome may resolve either way), rewrites what it finds to
// the whole write set, and stops at the first entry Qw-Qa+1 bookies
// explicitly lack.
func TestRecoverFindsAndRewritesEntries(t *testing.T) {
	for _, q := range [][3]int{{3, 3, 2}, {4, 3, 2}, {5, 2, 2}, {3, 3, 1}} {
		t.Run(fmt.Sprint(q), func(t *testing.T) {
			c := ledgertest.NewCluster(5)
			c.Bookies.SetManual(true)
			w := wtCreate(t, c, ledger.CreateOptions{EnsembleSize: q[0], WriteQuorum: q[1], AckQuorum: q[2]})
			r := newWTRecorder(t, c, w)
			for i := range 5 {
				wtAppend(t, w, r, fmt.Sprintf("entry-%d", i))
				c.Bookies.DeliverAll()
			}
			wtAppend(t, w, r, "entry-5") // reaches one bookie only
			first := c.Bookies.InFlight()[0]
			c.Bookies.Deliver(ledgertest.ToEntry(first.Bookie, 5))
			wtAppend(t, w, r, "entry-6") // reaches none
			c.Bookies.SetManual(false)   // recovery's adds answer at once; the writer's stay in flight

			md, visited := recoverVisited(t, wtCtx(t), c, w.ID())
			if want := wantEntries(md); fmt.Sprint(visited) != fmt.Sprint(want) {
				t.Errorf("visited %v, want %v", visited, want)
			}
			// Entry 5 has one copy: unless Qa=1 acknowledged it, it may be
			// found (one positive answer) or called absent (Qw-Qa+1
			// negatives first). Entry 6 has none: absent.
			if md.LastEntryId != 5 && (q[2] == 1 || md.LastEntryId != 4) {
				t.Fatalf("recovered last entry %d, want 5 (or 4 when entry 5 is unacknowledged)", md.LastEntryId)
			}
			var length int64
			for e := int64(0); e <= md.LastEntryId; e++ {
				length += int64(len(fmt.Sprintf("entry-%d", e)))
			}
			if md.Length != length {
				t.Errorf("length %d, want %d", md.Length, length)
			}
			if n := wtCopies(c, md, md.LastEntryId); n < q[2] {
				t.Errorf("last entry has %d copies after recovery, want >= Qa=%d", n, q[2])
			}
			c.Bookies.DeliverAll()
			if got := r.maxAcked(); got > md.LastEntryId {
				t.Errorf("writer acknowledged entry %d beyond the recovered end %d", got, md.LastEntryId)
			}
			wtClose(t, c, w)
		})
	}
}

// Concurrent recoveries converge on one last entry.
func TestRecoverConcurrent(t *testing.T) {
	c := ledgertest.NewCluster(3)
	c.Bookies.SetManual(true)
	w := wtCreate(t, c, ledger.CreateOptions{})
	r := newWTRecorder(t, c, w)
	for i := range 4 {
		wtAppend(t, w, r, fmt.Sprint(i))
	}
	c.Bookies.Deliver(ledgertest.To(wtAddr(0)))
	c.Bookies.SetManual(false)
	results := make([]*ledgerpb.LedgerMetadata, 4)
	var wg sync.WaitGroup
	visits := make([][]string, len(results))
	for i := range results {
		wg.Go(func() { results[i], visits[i] = recoverVisited(t, wtCtx(t), c, w.ID()) })
	}
	wg.Wait()
	final := wtMetadata(t, c, w.ID())
	want := make([]string, final.LastEntryId+1)
	for e := range want {
		want[e] = fmt.Sprint(e)
	}
	for i, md := range results {
		if md == nil || md.State != ledgerpb.LedgerState_CLOSED || md.LastEntryId != final.LastEntryId || md.Length != final.Length {
			t.Errorf("recovery %d returned %v, the store holds %v", i, md, final)
		}
		// Each visits the entries of the ledger as closed, whichever
		// recovery closed it.
		if fmt.Sprint(visits[i]) != fmt.Sprint(want) {
			t.Errorf("recovery %d visited %v, want %v", i, visits[i], want)
		}
	}
	wtClose(t, c, w)
}

// An error or a timeout is never "absent": with one explicit negative and
// two bookies that do not answer, recovery cannot decide and must not
// close the ledger. Once the bookies answer, it finds the entry. (b2 does
// not answer at all: its fence answer, complete, would be an explicit
// negative for entry 1, R9.)
func TestRecoverErrorsAreNotAbsent(t *testing.T) {
	c := ledgertest.NewCluster(3)
	c.Bookies.SetManual(true)
	w := wtCreate(t, c, ledger.CreateOptions{})
	r := newWTRecorder(t, c, w)
	wtAppend(t, w, r, "e0")
	c.Bookies.DeliverAll()
	wtAppend(t, w, r, "e1")
	c.Bookies.Deliver(ledgertest.ToEntry(wtAddr(0), 1)) // one copy: unknown outcome
	c.Bookies.SetManual(false)
	c.Bookies.Blackhole(wtAddr(0), ledgertest.RPCReadEntry)
	c.Bookies.Blackhole(wtAddr(2), ledgertest.RPCReadEntry, ledgertest.RPCFence)

	ctx, cancel := context.WithTimeout(wtCtx(t), 100*time.Millisecond)
	defer cancel()
	if _, err := ledger.Recover(ctx, c.Env(), w.ID()); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Recover with undecidable reads: %v, want a deadline error", err)
	}
	if md := wtMetadata(t, c, w.ID()); md.State != ledgerpb.LedgerState_IN_RECOVERY {
		t.Fatalf("state %v after an undecided recovery, want IN_RECOVERY", md.State)
	}

	// b0 answers again; b2 still does not, so entry 1 can only be found
	// (one negative is not enough), and entry 2 is absent (b0, b1).
	c.Bookies.Blackhole(wtAddr(0))
	md, err := ledger.Recover(wtCtx(t), c.Env(), w.ID())
	if err != nil {
		t.Fatal(err)
	}
	if md.LastEntryId != 1 {
		t.Errorf("recovered last entry %d, want 1 (the entry one bookie holds)", md.LastEntryId)
	}
	wtClose(t, c, w)
}

// Recovery starts at the last fragment: entries of earlier fragments were
// acknowledged before the change, even if the new ensemble knows no LAC.
func TestRecoverAfterEnsembleChange(t *testing.T) {
	c := ledgertest.NewCluster(4)
	w := wtCreate(t, c, ledger.CreateOptions{})
	r := newWTRecorder(t, c, w)
	for i := range 3 {
		wtAppend(t, w, r, fmt.Sprint(i))
	}
	c.Bookies.Crash(wtAddr(1))
	wtAppend(t, w, r, "3")
	c.Scheduler.RunDue()
	wtAppend(t, w, r, "4")
	wtWantAcked(t, r, 0, 1, 2, 3, 4)
	if md := wtMetadata(t, c, w.ID()); len(md.Fragments) != 2 {
		t.Fatalf("fragments %v", md.Fragments)
	}
	md, visited := recoverVisited(t, wtCtx(t), c, w.ID())
	if md.LastEntryId != 4 || md.Length != 5 {
		t.Errorf("recovered %v, want last entry 4, length 5", md)
	}
	if got := fmt.Sprint(visited); got != "[0 1 2 3 4]" {
		t.Errorf("visited %s across both fragments, want [0 1 2 3 4]", got)
	}
	wtClose(t, c, w)
}

// recoverVisited runs RecoverVisit and returns the metadata and the
// payloads visited, checking that the entries came as 0..LastEntryId, in
// order.
func recoverVisited(t *testing.T, ctx context.Context, c *ledgertest.Cluster, id uint64) (*ledgerpb.LedgerMetadata, []string) {
	t.Helper()
	var visited []string
	md, err := ledger.RecoverVisit(ctx, c.Env(), id, func(e ledger.Entry) error {
		if e.ID != int64(len(visited)) {
			return fmt.Errorf("visited entry %d after %d entries", e.ID, len(visited))
		}
		visited = append(visited, string(e.Payload))
		return nil
	})
	if err != nil {
		t.Error(err)
		return nil, nil
	}
	if int64(len(visited)) != md.LastEntryId+1 {
		t.Errorf("visited %d entries of a ledger closed at entry %d", len(visited), md.LastEntryId)
	}
	return md, visited
}

// wantEntries is the payloads "entry-0".."entry-<last>" of md.
func wantEntries(md *ledgerpb.LedgerMetadata) []string {
	var want []string
	for e := int64(0); e <= md.GetLastEntryId(); e++ {
		want = append(want, fmt.Sprintf("entry-%d", e))
	}
	return want
}

// An error from visit stops the recovery before it closes the ledger (the
// entries below the LAC are visited first); a later recovery finishes it.
func TestRecoverVisitErrorLeavesTheLedgerInRecovery(t *testing.T) {
	c := ledgertest.NewCluster(3)
	w := wtCreate(t, c, ledger.CreateOptions{})
	r := newWTRecorder(t, c, w)
	for i := range 3 {
		wtAppend(t, w, r, fmt.Sprintf("entry-%d", i))
	}
	wtWantAcked(t, r, 0, 1, 2)
	refused := errors.New("refused")
	_, err := ledger.RecoverVisit(wtCtx(t), c.Env(), w.ID(), func(e ledger.Entry) error {
		if e.ID == 1 {
			return refused
		}
		return nil
	})
	if !errors.Is(err, refused) {
		t.Fatalf("RecoverVisit with a failing visit: %v, want the visit's error", err)
	}
	if md := wtMetadata(t, c, w.ID()); md.State != ledgerpb.LedgerState_IN_RECOVERY {
		t.Fatalf("state %v after a visit failed, want IN_RECOVERY", md.State)
	}
	md, visited := recoverVisited(t, wtCtx(t), c, w.ID())
	if fmt.Sprint(visited) != fmt.Sprint(wantEntries(md)) || md.LastEntryId < 2 {
		t.Errorf("second recovery: %v visited %v", md, visited)
	}
	wtClose(t, c, w)
}
