package ledger_test

// Scripted scenarios for the data-loss bugs behind the ledger protocol's
// invariants (reference/protocols.md §1, reliability.md §1).

import (
	"errors"
	"fmt"
	"testing"

	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/ledger/ledgertest"
	"github.com/strata-log/strata/proto/ledgerpb"
)

// BookKeeper #2614 (found by the TLA+ model): recovery fenced only its LAC
// read. One fence request is lost; recovery reads entry 0, two bookies say
// "no such entry" (the third, which has it, answers late) and the ledger
// closes empty; then the bookie whose fence was lost accepts the old
// writer's add, which becomes the writer's second acknowledgement: an
// acknowledged entry outside the ledger. Fencing reads fence that bookie
// before it answers, so the add is refused.
func TestBK2614LostFenceRequest(t *testing.T) {
	c := ledgertest.NewCluster(3)
	c.Bookies.SetManual(true)
	w := wtCreate(t, c, ledger.CreateOptions{})
	r := newWTRecorder(t, c, w)
	b0, b1 := wtAddr(0), wtAddr(1)

	wtAppend(t, w, r, "e0")
	c.Bookies.Deliver(ledgertest.To(b0)) // first of two acknowledgements
	c.Bookies.SetManual(false)
	c.Bookies.Blackhole(b1, ledgertest.RPCFence)     // the lost fence request
	c.Bookies.Blackhole(b0, ledgertest.RPCReadEntry) // b0's answer is late

	md, err := ledger.Recover(wtCtx(t), c.Env(), w.ID())
	if err != nil {
		t.Fatal(err)
	}
	if md.LastEntryId != -1 {
		t.Fatalf("recovered last entry %d; the scenario needs entry 0 to be called absent", md.LastEntryId)
	}
	if !c.Bookies.Fenced(b1, w.ID()) {
		t.Fatalf("%s is not fenced: its fence was lost and recovery's read did not fence it", b1)
	}
	// The old writer's adds now arrive.
	c.Bookies.DeliverAll()
	if got := r.maxAcked(); got > md.LastEntryId {
		t.Fatalf("old writer got entry %d acknowledged; recovered ledger ends at %d", got, md.LastEntryId)
	}
	if err := r.failure(0); !errors.Is(err, ledger.ErrFenced) {
		t.Errorf("entry 0: %v, want ErrFenced", err)
	}
	wtClose(t, c, w)
}

// BookKeeper #2908 / BP-46 scenario 2: a bookie that lost its data answers
// "no such entry" for entries it acknowledged. With Qw=3, Qa=2 an entry is
// absent only after 2 explicit negatives, so one forgetful bookie cannot
// truncate an acknowledged entry, even with another bookie down.
// (Two forgetful bookies can: that is what bookie cookies prevent.)
func TestForgetfulBookieDoesNotTruncate(t *testing.T) {
	for _, down := range []bool{false, true} {
		t.Run(fmt.Sprintf("third bookie down=%v", down), func(t *testing.T) {
			c := ledgertest.NewCluster(3)
			w := wtCreate(t, c, ledger.CreateOptions{})
			r := newWTRecorder(t, c, w)
			for i := range 6 {
				wtAppend(t, w, r, fmt.Sprintf("e%d", i))
			}
			wtWantAcked(t, r, wtSeq(0, 5)...)
			c.Bookies.Wipe(wtAddr(0))
			if down {
				c.Bookies.Crash(wtAddr(2))
			}
			md, err := ledger.Recover(wtCtx(t), c.Env(), w.ID())
			if err != nil {
				t.Fatal(err)
			}
			if md.LastEntryId != 5 {
				t.Fatalf("recovered last entry %d, want 5: an acknowledged entry was truncated", md.LastEntryId)
			}
			for e := int64(0); e <= 5; e++ {
				if n := wtCopies(c, md, e); n < 1 {
					t.Errorf("entry %d has no copy", e)
				}
			}
			wtClose(t, c, w)
		})
	}
}

// BookKeeper #1591: with Qw > Qa the client kept acknowledging entries
// while ZooKeeper stalled, so the new ensemble existed only in the client's
// memory, and a recovery reading the durable metadata lost acknowledged
// entries. Here the metadata is unavailable during an ensemble change: no
// entry written to the replacement is acknowledged until the change is
// durable. Then either the change commits (and recovery from the durable
// metadata finds every acknowledged entry) or a recovery wins (and the
// writer is fenced without having acknowledged anything it cannot find).
func TestBK1591NoAckBeforeEnsembleIsDurable(t *testing.T) {
	b0, b1, b3 := wtAddr(0), wtAddr(1), wtAddr(3)
	setup := func(t *testing.T) (*ledgertest.Cluster, *ledger.Writer, *wtRecorder) {
		c := ledgertest.NewCluster(4)
		w := wtCreate(t, c, ledger.CreateOptions{})
		r := newWTRecorder(t, c, w)
		for i := range 3 {
			wtAppend(t, w, r, fmt.Sprintf("e%d", i))
		}
		c.Bookies.SetManual(true)
		c.Meta.SetUnavailable(true)
		wtAppend(t, w, r, "e3")
		wtAppend(t, w, r, "e4")
		c.Bookies.Crash(b1)
		c.Scheduler.RunDue() // b3 replaces b1 in memory; the metadata write fails
		if md := wtMetadata(t, c, w.ID()); len(md.Fragments) != 1 {
			t.Fatalf("metadata changed while unavailable: %v", md.Fragments)
		}
		// Entries 3 and 4 reach b0 and the replacement b3: Qa copies,
		// but b3 is not in the durable metadata.
		c.Bookies.Deliver(ledgertest.To(b0))
		c.Bookies.Deliver(ledgertest.To(b3))
		c.Scheduler.Advance(ledger.DefaultMetadataRetryMin) // still unavailable
		wtWantAcked(t, r, 0, 1, 2)
		return c, w, r
	}

	t.Run("change commits", func(t *testing.T) {
		c, w, r := setup(t)
		c.Meta.SetUnavailable(false)
		c.Scheduler.Advance(ledger.DefaultMetadataRetryMax)
		wtWantAcked(t, r, 0, 1, 2, 3, 4) // the recorder checked durable write sets at each ack
		md := wtMetadata(t, c, w.ID())
		if len(md.Fragments) != 2 || md.Fragments[1].FirstEntryId != 3 || md.Fragments[1].Bookies[1] != b3 {
			t.Fatalf("fragments %v", md.Fragments)
		}
		c.Bookies.SetManual(false)
		c.Bookies.Crash(b0) // lose any one bookie
		rec, err := ledger.Recover(wtCtx(t), c.Env(), w.ID())
		if err != nil {
			t.Fatal(err)
		}
		if rec.LastEntryId < r.maxAcked() {
			t.Fatalf("recovered last entry %d, acknowledged %d", rec.LastEntryId, r.maxAcked())
		}
		wtClose(t, c, w)
	})

	t.Run("recovery wins", func(t *testing.T) {
		c, w, r := setup(t)
		c.Meta.SetUnavailable(false)
		c.Bookies.SetManual(false)
		c.Bookies.Restart(b1)                            // it never got entries 3 and 4
		c.Bookies.Blackhole(b0, ledgertest.RPCReadEntry) // b0 answers late
		rec, err := ledger.Recover(wtCtx(t), c.Env(), w.ID())
		if err != nil {
			t.Fatal(err)
		}
		// Recovery read the durable ensemble {b0,b1,b2}: b1 and b2 lack
		// entry 3, so the ledger ends at 2. Had the writer acknowledged
		// entry 3 from b0 and b3, it would now be lost.
		if rec.LastEntryId != 2 {
			t.Fatalf("recovered last entry %d, want 2", rec.LastEntryId)
		}
		c.Bookies.DeliverAll()
		c.Scheduler.Advance(ledger.DefaultMetadataRetryMax) // the writer's CAS conflicts: fenced
		if got := r.maxAcked(); got > rec.LastEntryId {
			t.Fatalf("writer acknowledged entry %d beyond the recovered end %d", got, rec.LastEntryId)
		}
		for _, e := range []int64{3, 4} {
			if err := r.failure(e); !errors.Is(err, ledger.ErrFenced) {
				t.Errorf("entry %d: %v, want ErrFenced", e, err)
			}
		}
		if md := wtMetadata(t, c, w.ID()); md.State != ledgerpb.LedgerState_CLOSED || len(md.Fragments) != 1 {
			t.Errorf("metadata %v", md)
		}
		wtClose(t, c, w)
	})
}
