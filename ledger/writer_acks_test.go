package ledger_test

import (
	"errors"
	"sync"
	"testing"

	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/ledger/ledgertest"
)

// levelRecorder records level callbacks.
type levelRecorder struct {
	mu   sync.Mutex
	done map[int64]error
}

func newLevelRecorder() *levelRecorder { return &levelRecorder{done: make(map[int64]error)} }

func (r *levelRecorder) cb(t *testing.T) func(int64, error) {
	return func(id int64, err error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		if _, dup := r.done[id]; dup {
			t.Errorf("entry %d: second level callback (%v)", id, err)
		}
		r.done[id] = err
	}
}

func (r *levelRecorder) get(id int64) (error, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	err, ok := r.done[id]
	return err, ok
}

// AckOne fires at the first ADD_OK of the entry's write set, before the
// entry (or a lower one) is acknowledged; the LAC does not move.
func TestWriterAckOne(t *testing.T) {
	c := ledgertest.NewCluster(3)
	c.Bookies.SetManual(true)
	w := wtCreate(t, c, ledger.CreateOptions{})
	defer wtClose(t, c, w)
	r := newWTRecorder(t, c, w)
	lr := newLevelRecorder()
	if err := w.AppendAcks(wtCtx(t), []byte("e0"), ledger.AckOne, r.cb, lr.cb(t)); err != nil {
		t.Fatal(err)
	}
	if err := w.AppendAcks(wtCtx(t), []byte("e1"), ledger.AckOne, r.cb, lr.cb(t)); err != nil {
		t.Fatal(err)
	}
	// Entry 1 reaches one bookie first: its level fires, entry 0's not.
	c.Bookies.Deliver(ledgertest.ToEntry(wtAddr(0), 1))
	if err, ok := lr.get(1); !ok || err != nil {
		t.Fatalf("entry 1 level callback: %v, %v; want nil after one bookie", err, ok)
	}
	if _, ok := lr.get(0); ok {
		t.Fatalf("entry 0 level callback before any bookie answered")
	}
	wtWantAcked(t, r)
	if lac := w.LastAddConfirmed(); lac != -1 {
		t.Fatalf("LAC %d after one bookie, want -1", lac)
	}
	c.Bookies.DeliverAll()
	wtWantAcked(t, r, 0, 1)
	if err, ok := lr.get(0); !ok || err != nil {
		t.Fatalf("entry 0 level callback: %v, %v", err, ok)
	}
}

// AckAll waits for the third bookie, after the quorum acknowledgement.
func TestWriterAckAll(t *testing.T) {
	c := ledgertest.NewCluster(3)
	c.Bookies.SetManual(true)
	w := wtCreate(t, c, ledger.CreateOptions{})
	defer wtClose(t, c, w)
	r := newWTRecorder(t, c, w)
	lr := newLevelRecorder()
	if err := w.AppendAcks(wtCtx(t), []byte("e0"), ledger.AckAll, r.cb, lr.cb(t)); err != nil {
		t.Fatal(err)
	}
	c.Bookies.Deliver(ledgertest.To(wtAddr(0)))
	c.Bookies.Deliver(ledgertest.To(wtAddr(1)))
	wtWantAcked(t, r, 0)
	if _, ok := lr.get(0); ok {
		t.Fatalf("AckAll fired with two of three bookies")
	}
	c.Bookies.Deliver(ledgertest.To(wtAddr(2)))
	if err, ok := lr.get(0); !ok || err != nil {
		t.Fatalf("AckAll after the third bookie: %v, %v", err, ok)
	}
}

// AckQuorum's level callback runs with the acknowledgement.
func TestWriterAckQuorumLevel(t *testing.T) {
	c := ledgertest.NewCluster(3)
	c.Bookies.SetManual(true)
	w := wtCreate(t, c, ledger.CreateOptions{})
	defer wtClose(t, c, w)
	r := newWTRecorder(t, c, w)
	lr := newLevelRecorder()
	if err := w.AppendAcks(wtCtx(t), []byte("e0"), ledger.AckQuorum, r.cb, lr.cb(t)); err != nil {
		t.Fatal(err)
	}
	c.Bookies.Deliver(ledgertest.To(wtAddr(0)))
	if _, ok := lr.get(0); ok {
		t.Fatalf("quorum level fired after one bookie")
	}
	c.Bookies.Deliver(ledgertest.To(wtAddr(2)))
	wtWantAcked(t, r, 0)
	if err, ok := lr.get(0); !ok || err != nil {
		t.Fatalf("quorum level: %v, %v", err, ok)
	}
}

// AckAll after an ensemble change: the replacement's answer counts; with
// no spare the acknowledged entry can never be complete.
func TestWriterAckAllEnsembleChange(t *testing.T) {
	t.Run("replacement", func(t *testing.T) {
		c := ledgertest.NewCluster(4)
		c.Bookies.SetManual(true)
		w := wtCreate(t, c, ledger.CreateOptions{})
		defer wtClose(t, c, w)
		r := newWTRecorder(t, c, w)
		lr := newLevelRecorder()
		ensemble := wtMetadata(t, c, w.ID()).Fragments[0].Bookies
		if err := w.AppendAcks(wtCtx(t), []byte("e0"), ledger.AckAll, r.cb, lr.cb(t)); err != nil {
			t.Fatal(err)
		}
		c.Bookies.Fail(ledgertest.To(ensemble[1]), false)
		c.Bookies.Deliver(ledgertest.To(ensemble[0]))
		wtWantAcked(t, r)
		c.Scheduler.RunDue() // ensemble change at entry 0, durable
		if md := wtMetadata(t, c, w.ID()); md.Fragments[0].Bookies[1] == ensemble[1] {
			t.Fatalf("no ensemble change: %v", md.Fragments)
		}
		c.Bookies.Deliver(ledgertest.To(ensemble[2]))
		wtWantAcked(t, r, 0)
		if _, ok := lr.get(0); ok {
			t.Fatalf("AckAll fired before the replacement answered")
		}
		c.Bookies.DeliverAll()
		if err, ok := lr.get(0); !ok || err != nil {
			t.Fatalf("AckAll after the replacement stored it: %v, %v", err, ok)
		}
		if md := wtMetadata(t, c, w.ID()); wtCopies(c, md, 0) != 3 {
			t.Fatalf("entry 0 copies %d, want 3", wtCopies(c, md, 0))
		}
	})
	t.Run("no spare", func(t *testing.T) {
		c := ledgertest.NewCluster(3)
		w := wtCreate(t, c, ledger.CreateOptions{})
		defer wtClose(t, c, w)
		r := newWTRecorder(t, c, w)
		lr := newLevelRecorder()
		c.Bookies.Crash(wtAddr(1))
		if err := w.AppendAcks(wtCtx(t), []byte("e0"), ledger.AckAll, r.cb, lr.cb(t)); err != nil {
			t.Fatal(err)
		}
		c.Scheduler.RunDue()
		wtWantAcked(t, r, 0)
		if err, ok := lr.get(0); !ok || !errors.Is(err, ledger.ErrUnderReplicated) {
			t.Fatalf("AckAll with a dead member and no spare: %v, %v; want ErrUnderReplicated", err, ok)
		}
	})
}

// A fenced writer fails pending level callbacks: AckAll waiting for the
// third bookie of an acknowledged entry, and AckOne with no answer yet.
func TestWriterAckLevelsFenced(t *testing.T) {
	c := ledgertest.NewCluster(3)
	c.Bookies.SetManual(true)
	w := wtCreate(t, c, ledger.CreateOptions{})
	r := newWTRecorder(t, c, w)
	lr := newLevelRecorder()
	if err := w.AppendAcks(wtCtx(t), []byte("e0"), ledger.AckAll, r.cb, lr.cb(t)); err != nil {
		t.Fatal(err)
	}
	c.Bookies.Deliver(ledgertest.To(wtAddr(0)))
	c.Bookies.Deliver(ledgertest.To(wtAddr(1)))
	wtWantAcked(t, r, 0)
	if err := w.AppendAcks(wtCtx(t), []byte("e1"), ledger.AckOne, r.cb, lr.cb(t)); err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{wtAddr(0), wtAddr(1), wtAddr(2)} {
		if _, err := c.Bookies.Fence(wtCtx(t), b, w.ID()); err != nil {
			t.Fatal(err)
		}
	}
	c.Bookies.DeliverAll()
	for id := range int64(2) {
		if err, ok := lr.get(id); !ok || err == nil {
			t.Fatalf("entry %d level callback: %v, %v; want an error", id, err, ok)
		}
	}
	if err, _ := lr.get(1); !errors.Is(err, ledger.ErrFenced) {
		t.Errorf("entry 1: %v, want ErrFenced", err)
	}
	wtClose(t, c, w)
}

// Close waits for a pending AckAll.
func TestWriterCloseWaitsForAckAll(t *testing.T) {
	c := ledgertest.NewCluster(3)
	c.Bookies.SetManual(true)
	w := wtCreate(t, c, ledger.CreateOptions{})
	r := newWTRecorder(t, c, w)
	lr := newLevelRecorder()
	if err := w.AppendAcks(wtCtx(t), []byte("e0"), ledger.AckAll, r.cb, lr.cb(t)); err != nil {
		t.Fatal(err)
	}
	c.Bookies.Deliver(ledgertest.To(wtAddr(0)))
	c.Bookies.Deliver(ledgertest.To(wtAddr(1)))
	done := make(chan error, 1)
	go func() { done <- w.Close(wtCtx(t)) }()
	select {
	case err := <-done:
		t.Fatalf("Close returned %v while AckAll was pending", err)
	default:
	}
	c.Bookies.Deliver(ledgertest.To(wtAddr(2)))
	if err := <-done; err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err, ok := lr.get(0); !ok || err != nil {
		t.Fatalf("AckAll: %v, %v", err, ok)
	}
}
