package ledger_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/ledger/ledgertest"
	"github.com/strata-log/strata/proto/bookiepb"
	"github.com/strata-log/strata/proto/ledgerpb"
)

// wrKill crashes bookie b and removes its registration.
func wrKill(c *ledgertest.Cluster, b string) {
	c.Bookies.Crash(b)
	c.Registry.Deregister(b)
}

// wrSpare is a registered bookie named by no fragment of md.
func wrSpare(t *testing.T, c *ledgertest.Cluster, md *ledgerpb.LedgerMetadata, n int) string {
	t.Helper()
	for i := range n {
		a := wtAddr(i)
		named := false
		for _, f := range md.Fragments {
			named = named || slices.Contains(f.Bookies, a)
		}
		if !named && !c.Bookies.Down(a) {
			return a
		}
	}
	t.Fatal("no spare bookie")
	return ""
}

// wrSwap does what the replicator does to fragment fi of an OPEN ledger
// (ledger/replication, repair.go): copies the entries first..last whose
// write set holds bad from a surviving member to replacement, then swaps it
// in by compare-and-set, changing nothing else.
func wrSwap(t *testing.T, c *ledgertest.Cluster, id uint64, fi int, bad, replacement string) {
	t.Helper()
	md, version, _ := c.Meta.Ledger(id)
	if fi >= len(md.Fragments)-1 {
		t.Fatalf("fragment %d of %d is the last", fi, len(md.Fragments))
	}
	for e := md.Fragments[fi].FirstEntryId; e < md.Fragments[fi+1].FirstEntryId; e++ {
		ws := ledger.EntryWriteSet(md, e)
		if !slices.Contains(ws, bad) {
			continue
		}
		copied := false
		for _, b := range ws {
			if p, ok := c.Bookies.Stored(b, id, uint64(e)); ok && b != bad && !copied {
				c.Bookies.ForceStored(replacement, id, uint64(e), p)
				copied = true
			}
		}
		if !copied {
			t.Fatalf("entry %d: no surviving copy", e)
		}
	}
	pos := slices.Index(md.Fragments[fi].Bookies, bad)
	md.Fragments[fi].Bookies[pos] = replacement
	if _, err := c.Meta.Update(wtCtx(t), md, version); err != nil {
		t.Fatalf("swap: %v", err)
	}
}

// wrEnsembleChange kills a member of the writer's last ensemble, appends
// one entry (acknowledged by the others), and lets the writer replace it.
func wrEnsembleChange(t *testing.T, c *ledgertest.Cluster, w *ledger.Writer, r *wtRecorder, member int, p string) {
	t.Helper()
	md := w.Metadata()
	wrKill(c, md.Fragments[len(md.Fragments)-1].Bookies[member])
	wtAppend(t, w, r, p)
	c.Scheduler.RunDue()
}

// W7: a repair swapped a bookie in fragment 0 of the open ledger while its
// writer writes fragment 1. The writer keeps appending; its next ensemble
// change conflicts with the swap, rebases onto it and succeeds; Close
// closes on top. The final metadata has the swap and the writer's
// fragments, and every acknowledged entry is readable.
func TestWriterRebasesOnRepairOfEarlierFragment(t *testing.T) {
	c := ledgertest.NewCluster(7)
	w := wtCreate(t, c, ledger.CreateOptions{ExplicitLACInterval: -1})
	r := newWTRecorder(t, c, w) // checks durable write sets at each ack
	for i := range 5 {
		wtAppend(t, w, r, fmt.Sprint("e", i))
	}
	dead := w.Metadata().Fragments[0].Bookies[1]
	wrEnsembleChange(t, c, w, r, 1, "e5")
	if md := w.Metadata(); len(md.Fragments) != 2 || md.Fragments[1].FirstEntryId != 6 {
		t.Fatalf("after the first ensemble change: %v", md.Fragments)
	}
	wtWantAcked(t, r, wtSeq(0, 5)...)

	spare := wrSpare(t, c, w.Metadata(), 7)
	wrSwap(t, c, w.ID(), 0, dead, spare)
	swapped := wtMetadata(t, c, w.ID())

	for i := 6; i < 9; i++ {
		wtAppend(t, w, r, fmt.Sprint("e", i))
	}
	wrEnsembleChange(t, c, w, r, 0, "e9")
	wtAppend(t, w, r, "e10")
	wtWantAcked(t, r, wtSeq(0, 10)...)
	md := wtMetadata(t, c, w.ID())
	if md.State != ledgerpb.LedgerState_OPEN || len(md.Fragments) != 3 || md.Fragments[2].FirstEntryId != 10 {
		t.Fatalf("after the second ensemble change: %v", md)
	}
	if !proto.Equal(md.Fragments[0], swapped.Fragments[0]) || !proto.Equal(md.Fragments[1], swapped.Fragments[1]) {
		t.Fatalf("the change lost the swap or the writer's fragment:\n got %v\nwant %v", md.Fragments, swapped.Fragments)
	}
	if got := w.Metadata(); !proto.Equal(got, md) {
		t.Errorf("writer's view %v, store's %v", got, md)
	}
	if err := w.Close(wtCtx(t)); err != nil {
		t.Fatalf("Close: %v", err)
	}
	final := wtMetadata(t, c, w.ID())
	if final.State != ledgerpb.LedgerState_CLOSED || final.LastEntryId != 10 || len(final.Fragments) != 3 ||
		final.Fragments[0].Bookies[1] != spare {
		t.Fatalf("closed metadata %v", final)
	}
	rd, err := ledger.OpenReader(wtCtx(t), c.Env(), w.ID())
	if err != nil {
		t.Fatal(err)
	}
	entries, err := rd.Read(wtCtx(t), 0, 10)
	if err != nil {
		t.Fatalf("reading the acknowledged entries: %v", err)
	}
	for i, e := range entries {
		if string(e.Payload) != fmt.Sprint("e", i) {
			t.Errorf("entry %d: %q", i, e.Payload)
		}
	}
	for e := range int64(6) {
		if n := wtCopies(c, final, e); n != 3 {
			t.Errorf("entry %d: %d copies in its write set, want 3", e, n)
		}
	}
}

// W7 is only for fragments before the last: a concurrent change of the
// writer's LAST fragment still fails it (its ensemble change), and Close
// does not close on top of it.
func TestWriterFailsOnChangeOfLastFragment(t *testing.T) {
	c := ledgertest.NewCluster(7)
	w := wtCreate(t, c, ledger.CreateOptions{ExplicitLACInterval: -1})
	r := newWTRecorder(t, c, w)
	for i := range 3 {
		wtAppend(t, w, r, fmt.Sprint("e", i))
	}
	wrEnsembleChange(t, c, w, r, 1, "e3")
	md, version, _ := c.Meta.Ledger(w.ID())
	last := md.Fragments[len(md.Fragments)-1]
	last.Bookies[2] = wrSpare(t, c, md, 7)
	if _, err := c.Meta.Update(wtCtx(t), md, version); err != nil {
		t.Fatal(err)
	}
	changed := wtMetadata(t, c, w.ID())

	c.Bookies.SetManual(true)
	wrEnsembleChange(t, c, w, r, 0, "e4")
	c.Bookies.DeliverAll()
	if err := r.failure(4); !errors.Is(err, ledger.ErrWriterFailed) || !errors.Is(err, ledger.ErrMetadataConflict) {
		t.Fatalf("entry 4: %v, want ErrWriterFailed and ErrMetadataConflict", err)
	}
	if err := w.Close(wtCtx(t)); !errors.Is(err, ledger.ErrMetadataConflict) {
		t.Errorf("Close: %v, want ErrMetadataConflict", err)
	}
	if got := wtMetadata(t, c, w.ID()); !proto.Equal(got, changed) {
		t.Errorf("metadata changed to %v, want it left %v", got, changed)
	}
}

// Close alone (no ensemble change pending) on top of a change to the last
// fragment: not closed; on top of a swap in an earlier fragment: closed,
// keeping the swap.
func TestWriterCloseOnTopOfConcurrentChange(t *testing.T) {
	for _, tc := range []struct {
		name     string
		fragment int
		wantErr  error
	}{
		{"swap in an earlier fragment", 0, nil},
		{"change of the last fragment", 1, ledger.ErrMetadataConflict},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ledgertest.NewCluster(7)
			w := wtCreate(t, c, ledger.CreateOptions{ExplicitLACInterval: -1})
			r := newWTRecorder(t, c, w)
			for i := range 3 {
				wtAppend(t, w, r, fmt.Sprint("e", i))
			}
			dead := w.Metadata().Fragments[0].Bookies[1]
			wrEnsembleChange(t, c, w, r, 1, "e3")
			wtAppend(t, w, r, "e4")
			md := w.Metadata()
			spare := wrSpare(t, c, md, 7)
			if tc.fragment == 0 {
				wrSwap(t, c, w.ID(), 0, dead, spare)
			} else {
				md, version, _ := c.Meta.Ledger(w.ID())
				md.Fragments[1].Bookies[0] = spare
				if _, err := c.Meta.Update(wtCtx(t), md, version); err != nil {
					t.Fatal(err)
				}
			}
			before := wtMetadata(t, c, w.ID())
			err := w.Close(wtCtx(t))
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Fatalf("Close: %v, want %v", err, tc.wantErr)
			}
			got := wtMetadata(t, c, w.ID())
			if tc.wantErr != nil {
				if !proto.Equal(got, before) {
					t.Errorf("metadata changed to %v", got)
				}
				return
			}
			if got.State != ledgerpb.LedgerState_CLOSED || got.LastEntryId != 4 || !proto.Equal(got.Fragments[0], before.Fragments[0]) ||
				!proto.Equal(got.Fragments[1], before.Fragments[1]) {
				t.Errorf("closed metadata %v, want the swap kept (%v)", got, before.Fragments)
			}
		})
	}
}

// W7 with an unknown outcome: the writer's ensemble change applied but its
// answer was lost, and before the writer re-read, a repair swapped a bookie
// in the fragment that the change made non-last. The writer finds its
// change there (with the swap below it) and commits it.
func TestWriterLostAnswerThenRepairBelowNewLastFragment(t *testing.T) {
	c := ledgertest.NewCluster(7)
	w := wtCreate(t, c, ledger.CreateOptions{ExplicitLACInterval: -1})
	defer wtClose(t, c, w)
	r := newWTRecorder(t, c, w)
	for i := range 3 {
		wtAppend(t, w, r, fmt.Sprint("e", i))
	}
	wrEnsembleChange(t, c, w, r, 1, "e3")
	wtAppend(t, w, r, "e4")
	killed := w.Metadata().Fragments[1].Bookies[0]
	c.Meta.LoseAnswers(1)
	wrEnsembleChange(t, c, w, r, 0, "e5")
	wtAppend(t, w, r, "e6") // its write set changes: it waits for the change
	wtWantAcked(t, r, wtSeq(0, 5)...)
	if md := wtMetadata(t, c, w.ID()); len(md.Fragments) != 3 {
		t.Fatalf("the change did not apply: %v", md.Fragments)
	}
	wrSwap(t, c, w.ID(), 1, killed, wrSpare(t, c, wtMetadata(t, c, w.ID()), 7))
	c.Scheduler.Advance(ledger.DefaultMetadataRetryMin)
	wtWantAcked(t, r, wtSeq(0, 6)...)
	if got, want := w.Metadata(), wtMetadata(t, c, w.ID()); !proto.Equal(got, want) {
		t.Errorf("writer's metadata %v, store's %v", got, want)
	}
	if err := w.Close(wtCtx(t)); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// invalidBookies answers ADD_INVALID for one entry's non-recovery adds.
type invalidBookies struct {
	*ledgertest.FakeBookies
	entry uint64
}

func (b invalidBookies) Add(bookie string, req *bookiepb.AddRequest, cb func(*bookiepb.AddResponse, error)) {
	if req.EntryId == b.entry && !req.Recovery {
		cb(&bookiepb.AddResponse{LedgerId: req.LedgerId, EntryId: req.EntryId, Status: bookiepb.AddStatus_ADD_INVALID}, nil)
		return
	}
	b.FakeBookies.Add(bookie, req, cb)
}

// TestWriterCloseAfterFailureWithLostAnswerChange: an ensemble change
// applies but its answer is lost; before the writer re-reads, it fails (an
// add refused as invalid). Close still finds the change's metadata stored
// and closes on top of it instead of leaving the ledger OPEN for a
// takeover to fence (W7).
func TestWriterCloseAfterFailureWithLostAnswerChange(t *testing.T) {
	c := ledgertest.NewCluster(7)
	env := c.Env()
	env.Bookies = invalidBookies{c.Bookies, 4}
	w, err := ledger.Create(wtCtx(t), env, c.Options(ledger.CreateOptions{ExplicitLACInterval: -1}))
	if err != nil {
		t.Fatal(err)
	}
	r := newWTRecorder(t, c, w)
	for i := range 3 {
		wtAppend(t, w, r, fmt.Sprint("e", i))
	}
	c.Meta.LoseAnswers(1)
	wrEnsembleChange(t, c, w, r, 1, "e3") // the change at 4 applies; its answer is lost
	if md := wtMetadata(t, c, w.ID()); len(md.Fragments) != 2 {
		t.Fatalf("change did not apply: %v", md.Fragments)
	}
	wtAppend(t, w, r, "e4") // ADD_INVALID: the writer fails and drops the change
	if err := r.failure(4); !errors.Is(err, ledger.ErrWriterFailed) {
		t.Fatalf("entry 4: %v", err)
	}
	err = w.Close(wtCtx(t))
	if md := wtMetadata(t, c, w.ID()); md.State != ledgerpb.LedgerState_CLOSED || md.LastEntryId != 3 {
		t.Fatalf("Close left the ledger %v at last entry %d (%v)", md.State, md.LastEntryId, err)
	}
}
