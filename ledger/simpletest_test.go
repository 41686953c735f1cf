package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/ledger/ledgertest"
	"github.com/strata-log/strata/proto/ledgerpb"
)

func TestPercentile(t *testing.T) {
	ms := func(ns ...int) []time.Duration {
		out := make([]time.Duration, len(ns))
		for i, n := range ns {
			out[i] = time.Duration(n) * time.Millisecond
		}
		return out
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = i + 1
	}
	thousand := make([]int, 1000)
	for i := range thousand {
		thousand[i] = i + 1
	}
	for _, tt := range []struct {
		sorted []time.Duration
		p      float64
		want   time.Duration
	}{
		{ms(7), 50, 7 * time.Millisecond},
		{ms(7), 99.9, 7 * time.Millisecond},
		{ms(1, 2), 50, 1 * time.Millisecond},
		{ms(1, 2), 51, 2 * time.Millisecond},
		{ms(hundred...), 50, 50 * time.Millisecond},
		{ms(hundred...), 99, 99 * time.Millisecond},
		{ms(hundred...), 99.9, 100 * time.Millisecond},
		{ms(hundred...), 100, 100 * time.Millisecond},
		{ms(thousand...), 99.9, 999 * time.Millisecond},
		{ms(thousand...), 0.01, 1 * time.Millisecond},
	} {
		if got := ledger.Percentile(tt.sorted, tt.p); got != tt.want {
			t.Errorf("p%v of %d values = %v, want %v", tt.p, len(tt.sorted), got, tt.want)
		}
	}
}

func TestSummarizeLatencies(t *testing.T) {
	if s := ledger.SummarizeLatencies(nil); s != (ledger.LatencySummary{}) {
		t.Fatalf("empty: %+v", s)
	}
	ds := []time.Duration{5, 1, 4, 2, 3}
	s := ledger.SummarizeLatencies(ds)
	if s.Count != 5 || s.Mean != 3 || s.P50 != 3 || s.P99 != 5 || s.P999 != 5 || s.Max != 5 {
		t.Fatalf("summary %+v", s)
	}
	if ds[0] != 5 {
		t.Fatal("SummarizeLatencies sorted its input")
	}
}

func TestRunSimpleTest(t *testing.T) {
	verifyNoLeaks(t)
	ctx := testCtx(t)
	c := ledgertest.NewCluster(4)
	var progress []ledger.SimpleTestProgress
	res, err := ledger.RunSimpleTest(ctx, c.Env(), ledger.SimpleTestConfig{
		Entries: 700, EntrySize: 100, MaxInFlight: 16,
		Progress:         func(p ledger.SimpleTestProgress) { progress = append(progress, p) },
		ProgressInterval: time.Hour, // only the final reports
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Verified != 700 || !res.Closed || !res.Deleted || res.AddLatency.Count != 700 || res.Bytes != 70000 ||
		res.E != 3 || res.Qw != 3 || res.Qa != 2 || len(res.Ensemble) != 3 {
		t.Fatalf("result %+v", res)
	}
	if len(progress) != 2 || progress[0].Phase != "write" || progress[0].Done != 700 ||
		progress[1].Phase != "read" || progress[1].Done != 700 {
		t.Fatalf("progress %+v", progress)
	}
	if _, _, ok := c.Meta.Ledger(res.LedgerID); ok {
		t.Fatal("the metadata is still there")
	}
	for _, b := range res.Ensemble {
		if n := len(c.Bookies.StoredEntries(b, res.LedgerID)); n != 0 {
			t.Fatalf("bookie %s still holds %d entries", b, n)
		}
	}

	// --keep: the closed ledger stays, striped too.
	res, err = ledger.RunSimpleTest(ctx, c.Env(), ledger.SimpleTestConfig{
		EnsembleSize: 4, WriteQuorum: 2, AckQuorum: 2, Entries: 50, EntrySize: 3, Keep: true,
	})
	if err != nil || res.Verified != 50 || res.Deleted {
		t.Fatalf("keep: %+v, %v", res, err)
	}
	md, _, ok := c.Meta.Ledger(res.LedgerID)
	if !ok || md.State != ledgerpb.LedgerState_CLOSED || md.LastEntryId != 49 || md.Length != 150 {
		t.Fatalf("kept ledger: %v", md)
	}

	// Bad configurations are refused before anything is created.
	res, err = ledger.RunSimpleTest(ctx, c.Env(), ledger.SimpleTestConfig{Entries: -1})
	if !errors.Is(err, ledger.ErrInvalid) {
		t.Fatalf("negative entries: %+v, %v", res, err)
	}
}

func TestRunSimpleTestFails(t *testing.T) {
	verifyNoLeaks(t)
	ctx := testCtx(t)
	c := ledgertest.NewCluster(2)
	if _, err := ledger.RunSimpleTest(ctx, c.Env(), ledger.SimpleTestConfig{}); !errors.Is(err, ledger.ErrNotEnoughBookies) {
		t.Fatalf("2 bookies for 3/3/2: %v", err)
	}
	// A canceled test still closes and deletes its ledger.
	c = ledgertest.NewCluster(3)
	c.Bookies.SetManual(true) // adds wait forever
	cctx, cancel := context.WithCancel(ctx)
	res, err := ledger.RunSimpleTest(cctx, c.Env(), ledger.SimpleTestConfig{
		Entries: 10, MaxInFlight: 4,
		Progress: func(p ledger.SimpleTestProgress) {
			if p.Phase == "write" {
				cancel()
			}
		},
		ProgressInterval: time.Nanosecond,
	})
	cancel()
	if !errors.Is(err, context.Canceled) || res == nil || res.Verified != 0 || !res.Deleted {
		t.Fatalf("canceled: %+v, %v", res, err)
	}
	if _, _, ok := c.Meta.Ledger(res.LedgerID); ok {
		t.Fatal("the canceled test left its ledger")
	}
}

// writeClosed creates a ledger in c through env, appends entries "x"
// and closes it.
func writeClosed(t *testing.T, ctx context.Context, env ledger.Env, c *ledgertest.Cluster, entries int) *ledger.Writer {
	t.Helper()
	w, err := ledger.Create(ctx, env, c.Options(ledger.CreateOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	for range entries {
		if _, err := w.AppendSync(ctx, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	return w
}

func TestDelete(t *testing.T) {
	verifyNoLeaks(t)
	ctx := testCtx(t)
	c := ledgertest.NewCluster(4)
	env := c.Env()
	write := func() (uint64, []string) {
		w := writeClosed(t, ctx, env, c, 5)
		return w.ID(), w.Metadata().Fragments[0].Bookies
	}
	id, ensemble := write()
	if err := ledger.Delete(ctx, env, id); err != nil {
		t.Fatal(err)
	}
	for _, b := range ensemble {
		if n := len(c.Bookies.StoredEntries(b, id)); n != 0 {
			t.Fatalf("bookie %s still holds %d entries", b, n)
		}
	}
	if err := ledger.Delete(ctx, env, id); !errors.Is(err, ledger.ErrNoSuchLedger) {
		t.Fatalf("delete again: %v", err)
	}
	// A bookie down: the metadata goes, the error names what is left.
	id, ensemble = write()
	c.Bookies.Crash(ensemble[1])
	err := ledger.Delete(ctx, env, id)
	if !errors.Is(err, ledger.ErrDeleteIncomplete) || !errors.Is(err, ledgertest.ErrBookieDown) {
		t.Fatalf("delete with a bookie down: %v", err)
	}
	if _, _, ok := c.Meta.Ledger(id); ok {
		t.Fatal("metadata survived")
	}
	if n := len(c.Bookies.StoredEntries(ensemble[0], id)); n != 0 {
		t.Fatalf("a live bookie still holds %d entries", n)
	}
}

// TestDeleteAll: many ledgers at once, as retention and compaction
// delete them: each ledger's outcome is Delete's, the metadata goes
// ledger.DeleteBatch at a time when the store batches (one by one when it
// does not), and a store that is down deletes nothing.
func TestDeleteAll(t *testing.T) {
	verifyNoLeaks(t)
	ctx := testCtx(t)
	for _, batched := range []bool{true, false} {
		t.Run(fmt.Sprintf("batched=%v", batched), func(t *testing.T) {
			c := ledgertest.NewCluster(4)
			env := c.Env()
			if !batched {
				env.Meta = struct{ ledger.MetadataStore }{c.Meta} // hides DeleteMany
			}
			const n = ledger.DeleteBatch + 6 // two batches
			var ids []uint64
			ensembles := map[uint64][]string{}
			for range n {
				w := writeClosed(t, ctx, env, c, 1)
				ids = append(ids, w.ID())
				ensembles[w.ID()] = w.Metadata().Fragments[0].Bookies
			}
			down := ensembles[ids[0]][0]
			c.Bookies.Crash(down)
			const missing = 1 << 40
			errs := ledger.DeleteAll(ctx, env, append(slices.Clone(ids), missing), 4)
			if len(errs) != n+1 {
				t.Fatalf("%d outcomes for %d ledgers", len(errs), n+1)
			}
			if !errors.Is(errs[n], ledger.ErrNoSuchLedger) {
				t.Fatalf("a ledger that does not exist: %v", errs[n])
			}
			for i, id := range ids {
				onDown := slices.Contains(ensembles[id], down)
				switch {
				case onDown && (!errors.Is(errs[i], ledger.ErrDeleteIncomplete) || !errors.Is(errs[i], ledgertest.ErrBookieDown)):
					t.Fatalf("ledger %d on the bookie that is down: %v", id, errs[i])
				case !onDown && errs[i] != nil:
					t.Fatalf("ledger %d: %v", id, errs[i])
				}
				if _, _, ok := c.Meta.Ledger(id); ok {
					t.Fatalf("ledger %d: its metadata survived", id)
				}
				for _, b := range ensembles[id] {
					if k := len(c.Bookies.StoredEntries(b, id)); b != down && k != 0 {
						t.Fatalf("ledger %d: bookie %s still holds %d entries", id, b, k)
					}
				}
			}
			if want := map[bool]int{true: 2, false: 0}[batched]; c.Meta.Batches() != want {
				t.Fatalf("%d metadata batches, want %d", c.Meta.Batches(), want)
			}

			// The store down: every outcome is its error, nothing goes.
			w := writeClosed(t, ctx, env, c, 0)
			c.Meta.SetUnavailable(true)
			errs = ledger.DeleteAll(ctx, env, []uint64{w.ID()}, 4)
			c.Meta.SetUnavailable(false)
			if !errors.Is(errs[0], ledgertest.ErrUnavailable) {
				t.Fatalf("the store down: %v", errs[0])
			}
			if _, _, ok := c.Meta.Ledger(w.ID()); !ok {
				t.Fatal("the store down: the metadata went")
			}
		})
	}
}

// TestReaderTailsWriter: a tailing reader follows a live writer through
// WaitLAC without fencing it, sees only acknowledged entries, and ends
// with the ledger's close.
func TestReaderTailsWriter(t *testing.T) {
	verifyNoLeaks(t)
	ctx := testCtx(t)
	c := ledgertest.NewCluster(3)
	env := c.Env()
	w, err := ledger.Create(ctx, env, c.Options(ledger.CreateOptions{ExplicitLACInterval: -1}))
	if err != nil {
		t.Fatal(err)
	}
	r, err := ledger.OpenReaderWith(ctx, env, w.ID(), ledger.ReaderOptions{LongPollWait: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	const n = 200
	done := make(chan error, 1)
	go func() {
		for i := range n {
			if _, err := w.AppendSync(ctx, payloadOf(int64(i))); err != nil {
				done <- err
				return
			}
		}
		done <- w.Close(ctx)
	}()
	next := int64(0)
	for {
		lac, err := r.WaitLAC(ctx, next-1)
		if errors.Is(err, ledger.ErrLedgerClosed) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if wlac := w.LastAddConfirmed(); lac > wlac {
			t.Fatalf("reader LAC %d above the writer's %d", lac, wlac)
		}
		entries, err := r.Read(ctx, next, lac)
		if err != nil {
			t.Fatal(err)
		}
		checkEntries(t, entries, next, lac)
		next = lac + 1
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if next != n {
		t.Fatalf("reader saw %d entries, the writer wrote %d", next, n)
	}
	for _, b := range c.Bookies.Addrs() {
		if c.Bookies.Fenced(b, w.ID()) {
			t.Fatalf("the reader fenced bookie %s", b)
		}
	}
}
