package ledger_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/strata-log/strata/internal/testwait"
	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/ledger/ledgertest"
	"github.com/strata-log/strata/proto/bookiepb"
	"github.com/strata-log/strata/proto/ledgerpb"
)

func TestWriterCreate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		bookies int
		opts    ledger.CreateOptions
		wantErr error
		want    [3]int32
	}{
		{name: "defaults", bookies: 3, want: [3]int32{3, 3, 2}},
		{name: "striped", bookies: 5, opts: ledger.CreateOptions{EnsembleSize: 5, WriteQuorum: 3, AckQuorum: 2}, want: [3]int32{5, 3, 2}},
		{name: "single copy", bookies: 1, opts: ledger.CreateOptions{EnsembleSize: 1, WriteQuorum: 1, AckQuorum: 1}, want: [3]int32{1, 1, 1}},
		{name: "Qw above E", bookies: 3, opts: ledger.CreateOptions{EnsembleSize: 2}, wantErr: ledger.ErrInvalid},
		{name: "Qa above Qw", bookies: 3, opts: ledger.CreateOptions{AckQuorum: 4}, wantErr: ledger.ErrInvalid},
		{name: "Qa below 1", bookies: 3, opts: ledger.CreateOptions{AckQuorum: -1}, wantErr: ledger.ErrInvalid},
		{name: "not enough bookies", bookies: 2, wantErr: ledger.ErrNotEnoughBookies},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ledgertest.NewCluster(tc.bookies)
			opts := tc.opts
			opts.Properties = map[string]string{"topic": "t-0"}
			w, err := ledger.Create(wtCtx(t), c.Env(), c.Options(opts))
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("Create: %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Create: %v", err)
			}
			defer wtClose(t, c, w)
			md := wtMetadata(t, c, w.ID())
			if got := [3]int32{md.EnsembleSize, md.WriteQuorum, md.AckQuorum}; got != tc.want {
				t.Errorf("E/Qw/Qa = %v, want %v", got, tc.want)
			}
			if md.State != ledgerpb.LedgerState_OPEN || md.LastEntryId != -1 || len(md.Fragments) != 1 ||
				md.Fragments[0].FirstEntryId != 0 || len(md.Fragments[0].Bookies) != int(tc.want[0]) ||
				md.Properties["topic"] != "t-0" {
				t.Errorf("metadata %v", md)
			}
		})
	}
}

// Entry e goes to the Qw consecutive members starting at e mod E, carrying
// the LAC at send time.
func TestWriterWriteSetsAndPiggybackedLAC(t *testing.T) {
	for _, q := range [][3]int{{3, 3, 2}, {5, 3, 2}, {4, 2, 1}, {3, 2, 2}} {
		c := ledgertest.NewCluster(5)
		c.Bookies.SetManual(true)
		w := wtCreate(t, c, ledger.CreateOptions{EnsembleSize: q[0], WriteQuorum: q[1], AckQuorum: q[2]})
		r := newWTRecorder(t, c, w)
		ensemble := wtMetadata(t, c, w.ID()).Fragments[0].Bookies
		for e := range int64(7) {
			wtAppend(t, w, r, "x")
			var got []string
			for _, a := range c.Bookies.InFlight() {
				if a.EntryID != uint64(e) {
					t.Fatalf("%v: unexpected add %+v", q, a)
				}
				if a.LAC != e-1 {
					t.Errorf("%v: entry %d carries LAC %d, want %d", q, e, a.LAC, e-1)
				}
				got = append(got, a.Bookie)
			}
			var want []string
			for i := range q[1] {
				want = append(want, ensemble[(int(e)+i)%q[0]])
			}
			if !slices.Equal(got, want) {
				t.Errorf("%v: entry %d sent to %v, want %v", q, e, got, want)
			}
			c.Bookies.DeliverAll()
		}
		wtWantAcked(t, r, wtSeq(0, 6)...)
		wtClose(t, c, w)
	}
}

// Entry e is acknowledged when Qa members of its write set have it AND
// every lower entry is acknowledged.
func TestWriterAcksInOrderAtAckQuorum(t *testing.T) {
	c := ledgertest.NewCluster(3)
	c.Bookies.SetManual(true)
	w := wtCreate(t, c, ledger.CreateOptions{})
	defer wtClose(t, c, w)
	r := newWTRecorder(t, c, w)
	for _, p := range []string{"a", "b", "c"} {
		wtAppend(t, w, r, p)
	}
	b0, b1, b2 := wtAddr(0), wtAddr(1), wtAddr(2)
	steps := []struct {
		deliver func(ledgertest.InFlightAdd) bool
		want    []int64
	}{
		{ledgertest.ToEntry(b0, 2), nil},
		{ledgertest.ToEntry(b1, 2), nil}, // entry 2 has Qa, waits for 0 and 1
		{ledgertest.ToEntry(b0, 1), nil},
		{ledgertest.ToEntry(b0, 0), nil},              // 1 of Qa=2
		{ledgertest.ToEntry(b2, 0), []int64{0}},       // 1 still has one copy
		{ledgertest.ToEntry(b2, 1), []int64{0, 1, 2}}, // 1 and 2 together
	}
	for i, s := range steps {
		if n := c.Bookies.Deliver(s.deliver); n != 1 {
			t.Fatalf("step %d delivered %d adds", i, n)
		}
		if got := r.ackedIDs(); !slices.Equal(got, s.want) && len(got)+len(s.want) > 0 {
			t.Fatalf("step %d: acknowledged %v, want %v", i, got, s.want)
		}
	}
	if lac := w.LastAddConfirmed(); lac != 2 {
		t.Errorf("LAC %d, want 2", lac)
	}
}

// A failing bookie is replaced by CAS on the metadata BEFORE any entry
// written to the replacement is acknowledged; the new fragment starts at
// LAC+1 and unacknowledged entries are resent to the replacement.
func TestWriterEnsembleChangeIsDurableBeforeAck(t *testing.T) {
	c := ledgertest.NewCluster(4)
	c.Bookies.SetManual(true)
	w := wtCreate(t, c, ledger.CreateOptions{})
	defer wtClose(t, c, w)
	r := newWTRecorder(t, c, w) // checks durable write sets at each ack
	b0, b1, b2, b3 := wtAddr(0), wtAddr(1), wtAddr(2), wtAddr(3)
	wtAppend(t, w, r, "e0")
	wtAppend(t, w, r, "e1")
	c.Bookies.DeliverAll()
	wtWantAcked(t, r, 0, 1)

	wtAppend(t, w, r, "e2")
	wtAppend(t, w, r, "e3")
	c.Bookies.Fail(ledgertest.To(b1), false)
	c.Bookies.Deliver(ledgertest.To(b0))
	c.Scheduler.RunDue() // replacement chosen, metadata written
	md := wtMetadata(t, c, w.ID())
	if len(md.Fragments) != 2 || md.Fragments[1].FirstEntryId != 2 ||
		!slices.Equal(md.Fragments[1].Bookies, []string{b0, b3, b2}) {
		t.Fatalf("fragments after the change: %v", md.Fragments)
	}
	// Resent to the replacement only.
	for _, a := range c.Bookies.InFlight() {
		if a.Bookie == b1 || a.Bookie == b0 {
			t.Errorf("unexpected add in flight %+v", a)
		}
	}
	c.Bookies.DeliverAll()
	wtWantAcked(t, r, 0, 1, 2, 3)
	if got := w.Stats().EnsembleChanges; got != 1 {
		t.Errorf("EnsembleChanges %d, want 1", got)
	}
	if w.UnderReplicated() {
		t.Errorf("under-replicated after a replacement: %+v", w.Stats())
	}
}

// With no spare bookie the writer keeps writing to the live members while
// Qa can be met (two copies, counted as under-replicated); when Qa can no
// longer be met entries wait, and a periodic retry takes bookies back.
func TestWriterNoSpareBookie(t *testing.T) {
	c := ledgertest.NewCluster(3)
	w := wtCreate(t, c, ledger.CreateOptions{})
	defer wtClose(t, c, w)
	r := newWTRecorder(t, c, w)
	b0, b1, b2 := wtAddr(0), wtAddr(1), wtAddr(2)
	wtAppend(t, w, r, "e0")
	c.Bookies.Crash(b1)
	for _, p := range []string{"e1", "e2", "e3"} {
		wtAppend(t, w, r, p)
	}
	c.Scheduler.RunDue() // replacement attempt: no spare
	wtWantAcked(t, r, 0, 1, 2, 3)
	md := wtMetadata(t, c, w.ID())
	if len(md.Fragments) != 1 {
		t.Fatalf("fragments %v, want the original one", md.Fragments)
	}
	for e := int64(1); e <= 3; e++ {
		if n := wtCopies(c, md, e); n != 2 {
			t.Errorf("entry %d has %d copies, want 2", e, n)
		}
	}
	if s := w.Stats(); !w.UnderReplicated() || s.UnderReplicatedEntries != 3 || s.FailedBookies != 1 {
		t.Errorf("stats %+v, want 3 under-replicated entries and 1 failed bookie", s)
	}
	if wtStalled(w) {
		t.Error("stalled with two of three bookies taking writes")
	}

	c.Bookies.Crash(b2) // Qa can no longer be met
	wtAppend(t, w, r, "e4")
	if wtStalled(w) {
		t.Error("stalled before trying to replace the bookie")
	}
	c.Scheduler.RunDue()
	wtWantAcked(t, r, 0, 1, 2, 3)
	if _, ok := c.Bookies.Stored(b0, w.ID(), 4); !ok {
		t.Fatalf("entry 4 not on the live bookie")
	}
	if w.CanAcknowledge() || !wtStalled(w) {
		t.Errorf("CanAcknowledge %v, stalled %v with one bookie of three and no spare; want false, true", w.CanAcknowledge(), wtStalled(w))
	}

	c.Bookies.Restart(b1)
	c.Bookies.Restart(b2)
	c.Scheduler.Advance(ledger.DefaultReplacementRetryInterval) // both taken back
	wtWantAcked(t, r, 0, 1, 2, 3, 4)
	if !w.CanAcknowledge() || wtStalled(w) {
		t.Errorf("CanAcknowledge %v, stalled %v once the bookies are back; want true, false", w.CanAcknowledge(), wtStalled(w))
	}
	if n := wtCopies(c, wtMetadata(t, c, w.ID()), 4); n != 3 {
		t.Errorf("entry 4 has %d copies after the bookies came back, want 3", n)
	}
	if s := w.Stats(); s.FailedBookies != 0 {
		t.Errorf("stats %+v, want no failed bookie", s)
	}
}

// wtStalled reports whether the writer's Stalled channel is closed.
func wtStalled(w *ledger.Writer) bool {
	select {
	case <-w.Stalled():
		return true
	default:
		return false
	}
}

// ADD_FENCED from any bookie stops the writer: pending entries fail with
// ErrFenced (unknown outcome), nothing more is acknowledged.
func TestWriterAddFenced(t *testing.T) {
	c := ledgertest.NewCluster(3)
	w := wtCreate(t, c, ledger.CreateOptions{})
	r := newWTRecorder(t, c, w)
	wtAppend(t, w, r, "e0")
	c.Bookies.SetManual(true)
	if _, err := c.Bookies.Fence(wtCtx(t), wtAddr(0), w.ID()); err != nil {
		t.Fatal(err)
	}
	wtAppend(t, w, r, "e1")
	wtAppend(t, w, r, "e2")
	c.Bookies.Deliver(ledgertest.To(wtAddr(0)))
	for _, e := range []int64{1, 2} {
		if err := r.failure(e); !errors.Is(err, ledger.ErrFenced) {
			t.Errorf("entry %d: %v, want ErrFenced", e, err)
		}
	}
	c.Bookies.DeliverAll() // the other two bookies accept: too late
	wtWantAcked(t, r, 0)
	if err := w.Append(wtCtx(t), []byte("x"), r.cb); !errors.Is(err, ledger.ErrFenced) {
		t.Errorf("Append after fencing: %v", err)
	}
	if err := w.Close(wtCtx(t)); !errors.Is(err, ledger.ErrFenced) {
		t.Errorf("Close: %v, want ErrFenced", err)
	}
}

// The ledger closes exactly once, by CAS.
func TestWriterCloseExactlyOnce(t *testing.T) {
	setup := func(t *testing.T) (*ledgertest.Cluster, *ledger.Writer, *wtRecorder) {
		c := ledgertest.NewCluster(3)
		w := wtCreate(t, c, ledger.CreateOptions{ExplicitLACInterval: -1})
		r := newWTRecorder(t, c, w)
		for _, p := range []string{"aa", "bbb", "c"} {
			wtAppend(t, w, r, p)
		}
		return c, w, r
	}
	t.Run("clean", func(t *testing.T) {
		c, w, r := setup(t)
		if err := w.Close(wtCtx(t)); err != nil {
			t.Fatal(err)
		}
		md := wtMetadata(t, c, w.ID())
		if md.State != ledgerpb.LedgerState_CLOSED || md.LastEntryId != 2 || md.Length != 6 || md.ClosedAtMs == 0 {
			t.Errorf("metadata %v", md)
		}
		if err := w.Close(wtCtx(t)); err != nil {
			t.Errorf("second Close: %v", err)
		}
		if err := w.Append(wtCtx(t), []byte("x"), r.cb); !errors.Is(err, ledger.ErrLedgerClosed) {
			t.Errorf("Append after Close: %v", err)
		}
		if n := c.Meta.Updates(); n != 1 {
			t.Errorf("%d metadata updates, want 1", n)
		}
	})
	t.Run("waits for pending entries", func(t *testing.T) {
		c, w, r := setup(t)
		c.Bookies.SetManual(true)
		wtAppend(t, w, r, "dddd")
		done := make(chan error, 1)
		go func() { done <- w.Close(wtCtx(t)) }()
		c.Bookies.DeliverAll()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if md := wtMetadata(t, c, w.ID()); md.LastEntryId != 3 || md.Length != 10 {
			t.Errorf("metadata %v", md)
		}
	})
	t.Run("gives up on pending entries", func(t *testing.T) {
		c, w, r := setup(t)
		c.Bookies.SetManual(true)
		wtAppend(t, w, r, "dddd")
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := w.Close(ctx); err == nil {
			t.Fatal("Close with a cancelled context succeeded")
		}
		if err := r.failure(3); !errors.Is(err, ledger.ErrLedgerClosed) {
			t.Errorf("pending entry: %v, want ErrLedgerClosed", err)
		}
	})
	t.Run("lost answer", func(t *testing.T) {
		c, w, _ := setup(t)
		c.Meta.LoseAnswers(1)
		done := make(chan error, 1)
		go func() { done <- w.Close(wtCtx(t)) }()
		testwait.Until(t, wtTimeout, "Close's backoff timer", func() bool { return c.Scheduler.Pending() > 0 })
		c.Scheduler.Advance(time.Minute)
		if err := <-done; err != nil {
			t.Fatalf("Close after a lost answer: %v", err)
		}
		if md := wtMetadata(t, c, w.ID()); md.State != ledgerpb.LedgerState_CLOSED || md.LastEntryId != 2 {
			t.Errorf("metadata %v", md)
		}
	})
	for _, tc := range []struct {
		name    string
		state   ledgerpb.LedgerState
		last    int64
		wantErr error
	}{
		{"closed by recovery at the same entry", ledgerpb.LedgerState_CLOSED, 2, nil},
		{"closed by recovery further", ledgerpb.LedgerState_CLOSED, 3, ledger.ErrFenced},
		{"in recovery", ledgerpb.LedgerState_IN_RECOVERY, -1, ledger.ErrFenced},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, w, _ := setup(t)
			md := wtMetadata(t, c, w.ID())
			md.State, md.LastEntryId = tc.state, tc.last
			c.Meta.Set(md)
			if err := w.Close(wtCtx(t)); !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Fatalf("Close: %v, want %v", err, tc.wantErr)
			}
			if got := wtMetadata(t, c, w.ID()); got.State != tc.state || got.LastEntryId != tc.last {
				t.Errorf("Close changed the metadata to %v", got)
			}
		})
	}
}

// An ensemble change whose CAS conflicts with a recovery (state no longer
// OPEN) fences the writer.
func TestWriterEnsembleChangeConflictFences(t *testing.T) {
	c := ledgertest.NewCluster(4)
	w := wtCreate(t, c, ledger.CreateOptions{})
	r := newWTRecorder(t, c, w)
	wtAppend(t, w, r, "e0")
	md := wtMetadata(t, c, w.ID())
	md.State = ledgerpb.LedgerState_IN_RECOVERY
	c.Meta.Set(md)

	c.Bookies.SetManual(true)
	wtAppend(t, w, r, "e1")
	c.Bookies.Fail(ledgertest.To(wtAddr(1)), false)
	c.Scheduler.RunDue()
	if err := r.failure(1); !errors.Is(err, ledger.ErrFenced) {
		t.Fatalf("entry 1: %v, want ErrFenced", err)
	}
	c.Bookies.DeliverAll()
	wtWantAcked(t, r, 0)
	if got := wtMetadata(t, c, w.ID()); len(got.Fragments) != 1 {
		t.Errorf("fragments %v", got.Fragments)
	}
	if err := w.Close(wtCtx(t)); !errors.Is(err, ledger.ErrFenced) {
		t.Errorf("Close: %v", err)
	}
}

// An ensemble change whose answer was lost is resolved by reading the
// metadata: it applied, so it is durable.
func TestWriterEnsembleChangeUnknownOutcome(t *testing.T) {
	c := ledgertest.NewCluster(4)
	c.Bookies.SetManual(true)
	w := wtCreate(t, c, ledger.CreateOptions{})
	defer wtClose(t, c, w)
	r := newWTRecorder(t, c, w)
	wtAppend(t, w, r, "e0")
	c.Bookies.Fail(ledgertest.To(wtAddr(1)), true)
	c.Meta.LoseAnswers(1)
	c.Scheduler.RunDue()
	c.Bookies.DeliverAll()
	wtWantAcked(t, r) // the writer does not know the change is durable yet
	c.Scheduler.Advance(ledger.DefaultMetadataRetryMin)
	wtWantAcked(t, r, 0)
	if got, want := w.Metadata(), wtMetadata(t, c, w.ID()); got.String() != want.String() {
		t.Errorf("writer's metadata %v, store's %v", got, want)
	}
	if n := c.Meta.Updates(); n != 1 {
		t.Errorf("%d updates, want 1", n)
	}
}

// An idle writer sends its LAC to the ensemble.
func TestWriterExplicitLAC(t *testing.T) {
	c := ledgertest.NewCluster(3)
	w := wtCreate(t, c, ledger.CreateOptions{ExplicitLACInterval: time.Second})
	defer wtClose(t, c, w)
	r := newWTRecorder(t, c, w)
	for _, p := range []string{"a", "b", "c"} {
		wtAppend(t, w, r, p)
	}
	if lac := c.Bookies.LAC(wtAddr(0), w.ID()); lac != 1 {
		t.Fatalf("piggybacked LAC %d, want 1", lac)
	}
	c.Scheduler.Advance(500 * time.Millisecond)
	wtAppend(t, w, r, "d") // activity: the idle period starts again
	c.Scheduler.Advance(600 * time.Millisecond)
	if lac := c.Bookies.LAC(wtAddr(0), w.ID()); lac != 2 {
		t.Fatalf("LAC %d before the writer was idle for a whole interval, want 2", lac)
	}
	c.Scheduler.Advance(time.Second)
	for i := range 3 {
		if lac := c.Bookies.LAC(wtAddr(i), w.ID()); lac != 3 {
			t.Errorf("%s: LAC %d after the idle interval, want 3", wtAddr(i), lac)
		}
	}
}

// Append waits while MaxInFlightBytes are unacknowledged, honouring ctx.
func TestWriterBackPressure(t *testing.T) {
	c := ledgertest.NewCluster(3)
	c.Bookies.SetManual(true)
	w := wtCreate(t, c, ledger.CreateOptions{MaxInFlightBytes: 10})
	defer wtClose(t, c, w)
	r := newWTRecorder(t, c, w)
	wtAppend(t, w, r, "12345678")

	ctx, cancel := context.WithCancel(wtCtx(t))
	cancelled := make(chan error, 1)
	go func() { cancelled <- w.Append(ctx, []byte("12345678"), r.cb) }()
	cancel()
	if err := <-cancelled; !errors.Is(err, context.Canceled) {
		t.Fatalf("Append with a cancelled context: %v", err)
	}

	done := make(chan error, 1)
	go func() { done <- w.Append(wtCtx(t), []byte("12345678"), r.cb) }()
	select {
	case err := <-done:
		t.Fatalf("Append did not wait: %v", err)
	default:
	}
	c.Bookies.DeliverAll()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	c.Bookies.DeliverAll()
	wtWantAcked(t, r, 0, 1)
}

// Concurrent appenders with a bookie client answering on other goroutines:
// callbacks stay in order and dense (run with -race).
func TestWriterConcurrentAppends(t *testing.T) {
	c := ledgertest.NewCluster(3)
	env := c.Env()
	env.Bookies = asyncBookies{c.Bookies}
	w, err := ledger.Create(wtCtx(t), env, c.Options(ledger.CreateOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []int64
	var wg sync.WaitGroup
	var acked sync.WaitGroup
	const writers, each = 8, 50
	acked.Add(writers * each)
	for range writers {
		wg.Go(func() {
			for range each {
				if err := w.Append(wtCtx(t), []byte("x"), func(id int64, err error) {
					defer acked.Done()
					if err != nil {
						t.Errorf("entry %d: %v", id, err)
					}
					mu.Lock()
					got = append(got, id)
					mu.Unlock()
				}); err != nil {
					t.Error(err)
					acked.Done()
				}
			}
		})
	}
	wg.Wait()
	acked.Wait()
	if !slices.Equal(got, wtSeq(0, writers*each-1)) {
		t.Errorf("callbacks out of order: %v", got)
	}
	if err := w.Close(wtCtx(t)); err != nil {
		t.Fatal(err)
	}
}

// asyncBookies answers adds on new goroutines, like a network client.
type asyncBookies struct{ *ledgertest.FakeBookies }

func (a asyncBookies) Add(bookie string, req *bookiepb.AddRequest, cb func(*bookiepb.AddResponse, error)) {
	go a.FakeBookies.Add(bookie, req, cb)
}

// With real timers, background work runs on its own goroutines; Close
// waits for all of them.
func TestWriterCloseWaitsForBackgroundWork(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	c := ledgertest.NewCluster(4)
	w, err := ledger.Create(wtCtx(t), c.Env(), ledger.CreateOptions{ExplicitLACInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	r := newWTRecorder(t, c, w)
	wtAppend(t, w, r, "e0")
	c.Bookies.Crash(wtAddr(1))
	if _, err := w.AppendSync(wtCtx(t), []byte("e1")); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, wtTimeout, "one ensemble change", func() bool { return w.Stats().EnsembleChanges == 1 })
	if _, err := w.AppendSync(wtCtx(t), []byte("e2")); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(wtCtx(t)); err != nil {
		t.Fatal(err)
	}
	if md := wtMetadata(t, c, w.ID()); md.LastEntryId != 2 || len(md.Fragments) != 2 {
		t.Errorf("metadata %v", md)
	}
}

// An ensemble change keeps one copy per rack: the replacement comes from
// the failed bookie's rack (the one no other member is in), not from the
// rack that sorts first.
func TestWriterEnsembleChangeKeepsRacks(t *testing.T) {
	c := ledgertest.NewCluster(6)
	for i := range 6 {
		c.Registry.Register(&bookiepb.BookieInfo{Id: wtAddr(i), Address: wtAddr(i),
			State: bookiepb.BookieState_WRITABLE, Rack: fmt.Sprintf("r%d", i%3)})
	}
	w := wtCreate(t, c, ledger.CreateOptions{})
	defer wtClose(t, c, w)
	r := newWTRecorder(t, c, w)
	if got := wtMetadata(t, c, w.ID()).Fragments[0].Bookies; !slices.Equal(got, []string{wtAddr(0), wtAddr(1), wtAddr(2)}) {
		t.Fatalf("ensemble %v, want bookies 0, 1, 2 (racks r0, r1, r2)", got)
	}
	wtAppend(t, w, r, "e0")
	c.Bookies.Crash(wtAddr(1))
	wtAppend(t, w, r, "e1")
	c.Scheduler.RunDue()
	wtWantAcked(t, r, 0, 1)
	md := wtMetadata(t, c, w.ID())
	if last := md.Fragments[len(md.Fragments)-1].Bookies; !slices.Equal(last, []string{wtAddr(0), wtAddr(4), wtAddr(2)}) {
		t.Fatalf("ensemble after the change %v, want bookie-1 replaced by bookie-4 (its rack, r1)", last)
	}
}

// sentAdds records the adds a writer sends, then passes them on.
type sentAdds struct {
	*ledgertest.FakeBookies
	mu   sync.Mutex
	reqs []*bookiepb.AddRequest
}

func (s *sentAdds) Add(bookie string, req *bookiepb.AddRequest, cb func(*bookiepb.AddResponse, error)) {
	s.mu.Lock()
	s.reqs = append(s.reqs, req)
	s.mu.Unlock()
	s.FakeBookies.Add(bookie, req, cb)
}

// The adds a writer sends reference the appended payload, with the tag
// apart (a copy of every payload saved); the bookies store the two as one
// entry, which a reader checks and opens to the payload.
func TestWriterSendsPayloadUncopied(t *testing.T) {
	c := ledgertest.NewCluster(3)
	env := c.Env()
	sent := &sentAdds{FakeBookies: c.Bookies}
	env.Bookies = sent
	w, err := ledger.Create(wtCtx(t), env, c.Options(ledger.CreateOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	payloads := [][]byte{[]byte("first entry"), bytes.Repeat([]byte("second "), 1000)}
	for _, p := range payloads {
		if _, err := w.AppendSync(wtCtx(t), p); err != nil {
			t.Fatal(err)
		}
	}
	sent.mu.Lock()
	for _, req := range sent.reqs {
		p := payloads[req.EntryId]
		if len(req.Payload) != len(p) || &req.Payload[0] != &p[0] || len(req.PayloadTail) != ledger.DigestSize {
			t.Fatalf("entry %d sent as %d bytes (the payload itself: %t) and a %d-byte tail; want the payload uncopied and a %d-byte tag",
				req.EntryId, len(req.Payload), len(req.Payload) > 0 && &req.Payload[0] == &p[0], len(req.PayloadTail), ledger.DigestSize)
		}
	}
	sent.mu.Unlock()
	if err := w.Close(wtCtx(t)); err != nil {
		t.Fatal(err)
	}
	r, err := ledger.OpenReader(wtCtx(t), env, w.ID())
	if err != nil {
		t.Fatal(err)
	}
	entries, err := r.Read(wtCtx(t), 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range entries {
		if !bytes.Equal(e.Payload, payloads[i]) {
			t.Fatalf("entry %d read back as %d bytes, want %d", i, len(e.Payload), len(payloads[i]))
		}
	}
}

// A bookie that fails every add it has in flight (a stalled disk times
// out thousands at once) is logged once at Warn, when it is marked
// failed, not once per add: a nemesis run's fsync stall logged 32,000
// lines in 4 s.
func TestWriterWarnsOncePerFailedBookie(t *testing.T) {
	c := ledgertest.NewCluster(3)
	env := c.Env()
	logs := &syncBuffer{}
	env.Logger = slog.New(slog.NewTextHandler(logs, nil))
	w, err := ledger.Create(wtCtx(t), env, c.Options(ledger.CreateOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	defer wtClose(t, c, w)
	r := newWTRecorder(t, c, w)
	c.Bookies.SetManual(true)
	for i := range 50 {
		wtAppend(t, w, r, fmt.Sprintf("e%d", i))
	}
	stalled := wtAddr(1)
	if n := c.Bookies.Fail(func(a ledgertest.InFlightAdd) bool { return a.Bookie == stalled }, false); n != 50 {
		t.Fatalf("%d adds of %s failed, want 50", n, stalled)
	}
	c.Bookies.DeliverAll()
	wtWantAcked(t, r, wtSeq(0, 49)...)
	if n := strings.Count(logs.String(), `level=WARN msg="add failed; replacing the bookie"`); n != 1 {
		t.Fatalf("%d warnings for one failed bookie's 50 adds, want 1:\n%s", n, logs.String())
	}
}
