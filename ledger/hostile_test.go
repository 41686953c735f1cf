package ledger_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/strata-log/strata/internal/testwait"
	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/ledger/ledgertest"
	"github.com/strata-log/strata/proto/bookiepb"
	"github.com/strata-log/strata/proto/ledgerpb"
)

// Recovery against buggy or hostile bookie requests (H1, H2 in
// ledger/storage/doc.go, R10): an inflated or forged LAC does not make a
// ledger unrecoverable, and when acknowledged data is lost, recovery says
// so instead of retrying in silence.

// hostileLedger writes n entries to a new 3/3/2 ledger and leaves it open.
func hostileLedger(t *testing.T, c *ledgertest.Cluster, n int) *ledger.Writer {
	t.Helper()
	return hostileLedgerWith(t, c, n, ledgerpb.DigestType_DIGEST_AES_GMAC)
}

// digestTypes are the digests the forgery tests run with.
var digestTypes = []ledgerpb.DigestType{ledgerpb.DigestType_DIGEST_HMAC_SHA256, ledgerpb.DigestType_DIGEST_AES_GMAC}

func hostileLedgerWith(t *testing.T, c *ledgertest.Cluster, n int, digest ledgerpb.DigestType) *ledger.Writer {
	t.Helper()
	w := wtCreate(t, c, ledger.CreateOptions{EnsembleSize: 3, WriteQuorum: 3, AckQuorum: 2, Digest: digest})
	for i := range n {
		if _, err := w.AppendSync(wtCtx(t), []byte(fmt.Sprint("entry-", i))); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

// TestRecoverAfterInflatedLAC: a WriteLAC far past the last entry, sent to
// one bookie of an open ledger, is lowered by the bookie (H1); a LAC
// stored inflated anyway (a bookie from before that rule) counts only up
// to the entries that bookie holds (R4). Either way recovery closes the
// ledger at its real last entry.
func TestRecoverAfterInflatedLAC(t *testing.T) {
	for _, tc := range []struct {
		name    string
		inflate func(c *ledgertest.Cluster, id uint64) error
	}{
		{"WriteLAC", func(c *ledgertest.Cluster, id uint64) error {
			return c.Bookies.WriteLAC(context.Background(), wtAddr(0), id, 1_000_000_000)
		}},
		{"piggybacked on a re-add", func(c *ledgertest.Cluster, id uint64) error {
			stored, _ := c.Bookies.Stored(wtAddr(0), id, 9)
			var resp *bookiepb.AddResponse
			c.Bookies.Add(wtAddr(0), &bookiepb.AddRequest{LedgerId: id, EntryId: 9, Lac: 1_000_000_000, Payload: stored},
				func(r *bookiepb.AddResponse, err error) { resp = r })
			if resp.GetStatus() != bookiepb.AddStatus_ADD_OK {
				return fmt.Errorf("re-add: %v", resp)
			}
			return nil
		}},
		{"stored before the rule", func(c *ledgertest.Cluster, id uint64) error {
			c.Bookies.ForceLAC(wtAddr(0), id, 1_000_000_000)
			return nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ledgertest.NewCluster(3)
			w := hostileLedger(t, c, 10)
			if err := tc.inflate(c, w.ID()); err != nil {
				t.Fatal(err)
			}
			if tc.name != "stored before the rule" {
				if lac := c.Bookies.LAC(wtAddr(0), w.ID()); lac > 9 {
					t.Fatalf("the bookie kept LAC %d above its last entry 9", lac)
				}
			}
			md, err := ledger.Recover(wtCtx(t), c.Env(), w.ID())
			if err != nil {
				t.Fatal(err)
			}
			if md.State != ledgerpb.LedgerState_CLOSED || md.LastEntryId != 9 {
				t.Fatalf("recovered %v, want CLOSED at entry 9", md)
			}
		})
	}
}

// syncBuffer is a log sink safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// observedEnv is c's Env with its log written to the returned buffer and
// its metrics registered on the returned registry.
func observedEnv(t *testing.T, c *ledgertest.Cluster) (ledger.Env, *syncBuffer, *prometheus.Registry) {
	t.Helper()
	logs := &syncBuffer{}
	reg := prometheus.NewRegistry()
	metrics := ledger.NewMetrics()
	if err := metrics.Register(reg); err != nil {
		t.Fatal(err)
	}
	env := c.Env()
	env.Logger = slog.New(slog.NewTextHandler(logs, nil))
	env.Metrics = metrics
	return env, logs, reg
}

func gaugeOrCounter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// TestRecoverAfterForgedLACAdd: adds sent to one bookie of an open
// ledger to make its LAC name entries nobody has (before, one add of
// entry N carrying LAC N left recovery waiting for entries 10..N
// forever). Without the ledger's digest key the bookie keeps no LAC on
// their account (H2 in ledger/storage/doc.go); with it (whoever can read
// the key can forge entries, V2 in doc.go), or with a LAC stored before
// the rules, recovery finds entry 10 absent, drops the LAC (R10), reports
// it, and closes the ledger at the writer's last entry with every entry
// the writer acknowledged.
func TestRecoverAfterForgedLACAdd(t *testing.T) {
	forgedAdds := func(sealed bool, entries ...int64) func(t *testing.T, c *ledgertest.Cluster, md *ledgerpb.LedgerMetadata) {
		return func(t *testing.T, c *ledgertest.Cluster, md *ledgerpb.LedgerMetadata) {
			for _, e := range entries {
				payload := []byte(fmt.Sprint("forged-", e))
				if sealed {
					var err error
					if payload, err = ledger.SealEntry(md, e, payload); err != nil {
						t.Fatal(err)
					}
				}
				var resp *bookiepb.AddResponse
				c.Bookies.Add(wtAddr(0), &bookiepb.AddRequest{LedgerId: md.Id, EntryId: uint64(e), Lac: e, Payload: payload},
					func(r *bookiepb.AddResponse, err error) { resp = r })
				if resp.GetStatus() != bookiepb.AddStatus_ADD_OK {
					t.Fatalf("forged add of entry %d: %v", e, resp)
				}
			}
		}
	}
	for _, tc := range []struct {
		name   string
		forge  func(t *testing.T, c *ledgertest.Cluster, md *ledgerpb.LedgerMetadata)
		keyLAC bool // the bookie keeps the forged LAC, and recovery drops it
	}{
		{"one add of entry N with LAC N", forgedAdds(false, 1000), false},
		{"two adds N, N+1 with LACs N-1, N", forgedAdds(false, 999, 1000), false},
		{"two adds sealed with the ledger's key", forgedAdds(true, 999, 1000), true},
		{"a LAC stored before the rules", func(t *testing.T, c *ledgertest.Cluster, md *ledgerpb.LedgerMetadata) {
			c.Bookies.ForceStored(wtAddr(0), md.Id, 1000, []byte("far"))
			c.Bookies.ForceLAC(wtAddr(0), md.Id, 1000)
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ledgertest.NewCluster(3)
			w := hostileLedger(t, c, 10)
			tc.forge(t, c, wtMetadata(t, c, w.ID()))
			// Without the key a forged add raises the LAC at most to the
			// writer's last entry on that bookie (V2 in doc.go).
			if lac := c.Bookies.LAC(wtAddr(0), w.ID()); (lac > 9) != tc.keyLAC {
				t.Fatalf("the bookie kept LAC %d", lac)
			}
			// Fencing completes with any 2 of the 3 bookies; the forged
			// one must be among them for its LAC to count, so the third
			// never answers a fence (its fencing reads still fence it).
			c.Bookies.Blackhole(wtAddr(2), ledgertest.RPCFence)
			env, logs, reg := observedEnv(t, c)
			var visited []string
			md, err := ledger.RecoverVisit(wtCtx(t), env, w.ID(), func(e ledger.Entry) error {
				if e.ID != int64(len(visited)) {
					return fmt.Errorf("visited entry %d after %d entries", e.ID, len(visited))
				}
				visited = append(visited, string(e.Payload))
				return nil
			})
			if err != nil {
				t.Fatalf("recovery: %v; log:\n%s", err, logs.String())
			}
			if md.State != ledgerpb.LedgerState_CLOSED || md.LastEntryId != 9 {
				t.Fatalf("recovered %v, want CLOSED at entry 9", md)
			}
			if want := wantEntries(md); fmt.Sprint(visited) != fmt.Sprint(want) {
				t.Fatalf("visited %v, want %v", visited, want)
			}
			for e := range int64(10) {
				if n := wtCopies(c, md, e); n < 2 {
					t.Fatalf("entry %d has %d copies after recovery, want >= Qa", e, n)
				}
			}
			distrusted := gaugeOrCounter(t, reg, "strata_ledger_recovery_lacs_distrusted_total")
			report := fmt.Sprintf("ledger=%d entry=10", w.ID())
			if tc.keyLAC != (distrusted == 1) || tc.keyLAC != strings.Contains(logs.String(), report) {
				t.Fatalf("distrusted %v LACs, want %v; log:\n%s", distrusted, tc.keyLAC, logs.String())
			}
			if tc.keyLAC && !strings.Contains(logs.String(), "level=WARN") {
				t.Fatalf("the report is not a warning:\n%s", logs.String())
			}
			if got := gaugeOrCounter(t, reg, "strata_ledger_recoveries_stuck_total"); got != 0 {
				t.Fatalf("counted %v stuck recoveries", got)
			}
		})
	}
}

// TestRecoverLostAcknowledgedEntryIsReported: an entry below the ledger's
// last fragment, which the writer acknowledged before it started that
// fragment, absent from every bookie (lost data: bookies forgot it
// without noticing). Recovery cannot close the ledger without truncating
// it, so it keeps trying, but it logs a warning naming the ledger and the
// entry and counts the stuck recovery once; cancelling it leaves the
// ledger IN_RECOVERY (never a truncation).
func TestRecoverLostAcknowledgedEntryIsReported(t *testing.T) {
	c := ledgertest.NewCluster(3)
	w := hostileLedger(t, c, 10)
	md, _, ok := c.Meta.Ledger(w.ID())
	if !ok {
		t.Fatal("no metadata")
	}
	md.Fragments = append(md.Fragments, &ledgerpb.Fragment{FirstEntryId: 5, Bookies: md.Fragments[0].Bookies})
	c.Meta.Set(md) // as after an ensemble change that kept the same bookies
	for i := range 3 {
		c.Bookies.Forget(wtAddr(i), w.ID(), 2)
	}

	env, logs, reg := observedEnv(t, c)
	ctx, cancel := context.WithCancel(wtCtx(t))
	defer cancel()
	result := make(chan error, 1)
	go func() {
		_, err := ledger.Recover(ctx, env, w.ID())
		result <- err
	}()
	want := fmt.Sprintf("ledger=%d entry=2", w.ID())
	if err := testwait.Poll(wtTimeout, "a stuck recovery reported", func() error {
		if gaugeOrCounter(t, reg, "strata_ledger_recoveries_stuck_total") != 1 || !strings.Contains(logs.String(), want) {
			return errors.New("not yet")
		}
		return nil
	}); err != nil {
		t.Fatalf("%v; log:\n%s", err, logs.String())
	}
	if !strings.Contains(logs.String(), "level=WARN") {
		t.Fatalf("the report is not a warning:\n%s", logs.String())
	}
	cancel()
	if err := <-result; !errors.Is(err, context.Canceled) {
		t.Fatalf("Recover after cancel: %v, want context.Canceled", err)
	}
	if got := gaugeOrCounter(t, reg, "strata_ledger_recoveries_stuck_total"); got != 1 {
		t.Fatalf("counted %v stuck recoveries, want 1", got)
	}
	if got := gaugeOrCounter(t, reg, "strata_ledger_recovery_lacs_distrusted_total"); got != 0 {
		t.Fatalf("distrusted %v LACs over lost data", got)
	}
	md, _, err := c.Meta.Get(context.Background(), w.ID())
	if err != nil || md.State != ledgerpb.LedgerState_IN_RECOVERY {
		t.Fatalf("after a cancelled recovery: %v, %v; want IN_RECOVERY", md, err)
	}
}

// TestWriterSurvivesAForeignEntry: an entry of the writer's own open
// ledger already stored on one bookie with other bytes (someone wrote into
// the ledger) is refused there with ADD_ENTRY_CONFLICT; the writer treats
// that bookie as failed: the entry is acknowledged by the two others and
// the bookie is replaced for later entries.
func TestWriterSurvivesAForeignEntry(t *testing.T) {
	c := ledgertest.NewCluster(4)
	w := wtCreate(t, c, ledger.CreateOptions{EnsembleSize: 3, WriteQuorum: 3, AckQuorum: 2})
	poisoned := wtMetadata(t, c, w.ID()).Fragments[0].Bookies[0]
	var resp *bookiepb.AddResponse
	c.Bookies.Add(poisoned, &bookiepb.AddRequest{LedgerId: w.ID(), EntryId: 0, Lac: -1, Payload: []byte("EVIL")},
		func(r *bookiepb.AddResponse, err error) { resp = r })
	if resp.GetStatus() != bookiepb.AddStatus_ADD_OK {
		t.Fatalf("foreign add: %v", resp)
	}
	r := newWTRecorder(t, c, w)
	wtAppend(t, w, r, "mine")
	testwait.Until(t, wtTimeout, "the append acknowledged", func() bool {
		c.Scheduler.RunDue()
		return len(r.ackedIDs()) == 1
	})
	testwait.Until(t, wtTimeout, "the poisoned bookie out of the ensemble", func() bool {
		c.Scheduler.RunDue()
		md := wtMetadata(t, c, w.ID())
		return !slices.Contains(md.Fragments[len(md.Fragments)-1].Bookies, poisoned)
	})
	if got, _ := c.Bookies.Stored(poisoned, w.ID(), 0); string(got) != "EVIL" {
		t.Fatalf("the bookie replaced its stored entry: %q", got)
	}
	wtClose(t, c, w)
}

// TestForgedCopiesAreNeverServed: every entry's copy on the first bookie
// of its write set is replaced with other bytes (a damaged disk, or a copy
// someone else wrote first, with or without a tag of its own). Single
// reads and streamed reads return the writer's payloads from the other
// copies and count the mismatches (D1).
func TestForgedCopiesAreNeverServed(t *testing.T) {
	for _, digest := range digestTypes {
		t.Run(digest.String(), func(t *testing.T) { testForgedCopiesAreNeverServed(t, digest) })
	}
}

func testForgedCopiesAreNeverServed(t *testing.T, digest ledgerpb.DigestType) {
	c := ledgertest.NewCluster(3)
	w := hostileLedgerWith(t, c, 6, digest)
	wtClose(t, c, w)
	md := wtMetadata(t, c, w.ID())
	if md.GetDigestType() != digest {
		t.Fatalf("ledger created with digest %v, want %v", md.GetDigestType(), digest)
	}
	other := wtMetadata(t, c, hostileLedgerWith(t, c, 1, digest).ID()) // a real tag, of another ledger
	for e := range int64(6) {
		forged := []byte(fmt.Sprint("forged-", e))
		if e%2 == 1 {
			var err error
			if forged, err = ledger.SealEntry(other, e, forged); err != nil {
				t.Fatal(err)
			}
		}
		c.Bookies.ForceStored(ledger.EntryWriteSet(md, e)[0], w.ID(), uint64(e), forged)
	}
	reg := prometheus.NewRegistry()
	metrics := ledger.NewMetrics()
	if err := metrics.Register(reg); err != nil {
		t.Fatal(err)
	}
	env := c.Env()
	env.Metrics = metrics
	r, err := ledger.OpenReader(wtCtx(t), env, w.ID())
	if err != nil {
		t.Fatal(err)
	}
	entries, err := r.Read(wtCtx(t), 0, 5)
	if err != nil {
		t.Fatal(err)
	}
	var streamed []ledger.Entry
	if err := r.ReadRange(wtCtx(t), 0, 5, func(e ledger.Entry) error {
		streamed = append(streamed, e)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		want := fmt.Sprint("entry-", i)
		if string(entries[i].Payload) != want || string(streamed[i].Payload) != want {
			t.Fatalf("entry %d: read %q, streamed %q, want %q", i, entries[i].Payload, streamed[i].Payload, want)
		}
	}
	if got := gaugeOrCounter(t, reg, "strata_ledger_digest_mismatches_total"); got < 6 {
		t.Fatalf("counted %v digest mismatches, want at least 6", got)
	}
}

// TestRecoveryIgnoresForgedEntryBeyondTheEnd: a copy of an entry past
// the writer's last one, placed on one bookie of an open ledger (before
// digests, recovery took it for the writer's, rewrote it to the others and
// closed the ledger with it), is not an answer: the other bookies decide
// the entry is absent and recovery closes the ledger at the writer's last
// entry (D1).
func TestRecoveryIgnoresForgedEntryBeyondTheEnd(t *testing.T) {
	for _, digest := range digestTypes {
		t.Run(digest.String(), func(t *testing.T) { testRecoveryIgnoresForgedEntryBeyondTheEnd(t, digest) })
	}
}

func testRecoveryIgnoresForgedEntryBeyondTheEnd(t *testing.T, digest ledgerpb.DigestType) {
	c := ledgertest.NewCluster(3)
	w := hostileLedgerWith(t, c, 4, digest)
	c.Bookies.ForceStored(wtAddr(0), w.ID(), 4, []byte("forged entry 4"))
	md, err := ledger.Recover(wtCtx(t), c.Env(), w.ID())
	if err != nil {
		t.Fatal(err)
	}
	if md.LastEntryId != 3 {
		t.Fatalf("recovered up to entry %d, want 3 (the forged entry 4 was taken)", md.LastEntryId)
	}
	for _, b := range []string{wtAddr(1), wtAddr(2)} {
		if got, ok := c.Bookies.Stored(b, w.ID(), 4); ok {
			t.Fatalf("recovery copied the forged entry to %s: %q", b, got)
		}
	}
}

// TestRecoverForgedLACsRandom: R10 against random histories. A writer
// acknowledges some entries, sends a few more to random members of their
// write sets and dies; forged entries sealed with the ledger's key raise
// random bookies' LACs far past its end, and one random bookie never
// answers a fence. Recovery always finishes, keeps every acknowledged
// entry and nothing forged, visits exactly the entries it closed the
// ledger with, and leaves each of them with Qa copies in its write set.
func TestRecoverForgedLACsRandom(t *testing.T) {
	reg := prometheus.NewRegistry()
	metrics := ledger.NewMetrics()
	if err := metrics.Register(reg); err != nil {
		t.Fatal(err)
	}
	const seeds = 300
	for seed := range uint64(seeds) {
		q := [][3]int{{3, 3, 2}, {4, 3, 2}, {5, 3, 2}, {5, 2, 2}}[seed%4]
		t.Run(fmt.Sprint(seed), func(t *testing.T) { testRecoverForgedLACsRandom(t, seed, q, metrics) })
	}
	// Not every history has a forged LAC among the fenced bookies' (or
	// one that names an entry below a genuine LAC); most do.
	n := gaugeOrCounter(t, reg, "strata_ledger_recovery_lacs_distrusted_total")
	if n < seeds/4 {
		t.Fatalf("%v of %d recoveries dropped a forged LAC: the histories do not exercise R10", n, seeds)
	}
	t.Logf("%v of %d recoveries dropped a forged LAC", n, seeds)
}

func testRecoverForgedLACsRandom(t *testing.T, seed uint64, q [3]int, metrics *ledger.Metrics) {
	rng := rand.New(rand.NewPCG(seed, 46))
	c := ledgertest.NewCluster(5)
	c.Bookies.SetManual(true)
	w := wtCreate(t, c, ledger.CreateOptions{EnsembleSize: q[0], WriteQuorum: q[1], AckQuorum: q[2]})
	r := newWTRecorder(t, c, w)
	acked, tail := 1+rng.IntN(12), rng.IntN(4)
	for i := range acked + tail {
		wtAppend(t, w, r, fmt.Sprint("entry-", i))
		if i < acked {
			c.Bookies.DeliverAll()
			continue
		}
		for _, b := range ledger.EntryWriteSet(wtMetadata(t, c, w.ID()), int64(i)) {
			if rng.IntN(2) == 0 {
				c.Bookies.Deliver(ledgertest.ToEntry(b, uint64(i)))
			}
		}
	}
	c.Bookies.SetManual(false) // the writer's undelivered adds stay in flight: it died
	md := wtMetadata(t, c, w.ID())
	ensemble := md.Fragments[len(md.Fragments)-1].Bookies
	for _, b := range ensemble {
		if rng.IntN(2) == 0 {
			continue
		}
		far := int64(acked+tail) + 1 + rng.Int64N(1000)
		for _, e := range []int64{far, far + 1} {
			sealed, err := ledger.SealEntry(md, e, []byte("forged"))
			if err != nil {
				t.Fatal(err)
			}
			c.Bookies.Add(b, &bookiepb.AddRequest{LedgerId: md.Id, EntryId: uint64(e), Lac: e - 1, Payload: sealed},
				func(*bookiepb.AddResponse, error) {})
		}
	}
	c.Bookies.Blackhole(ensemble[rng.IntN(len(ensemble))], ledgertest.RPCFence)
	env := c.Env()
	env.Metrics = metrics
	var visited []string
	closed, err := ledger.RecoverVisit(wtCtx(t), env, w.ID(), func(e ledger.Entry) error {
		visited = append(visited, string(e.Payload))
		return nil
	})
	if err != nil {
		t.Fatalf("seed %d: %v", seed, err)
	}
	if got := r.maxAcked(); closed.LastEntryId < got || closed.LastEntryId >= int64(acked+tail) {
		t.Fatalf("seed %d: closed at entry %d; acknowledged up to %d, written up to %d",
			seed, closed.LastEntryId, got, acked+tail-1)
	}
	if want := wantEntries(closed); fmt.Sprint(visited) != fmt.Sprint(want) {
		t.Fatalf("seed %d: visited %v, want %v", seed, visited, want)
	}
	var length int64
	for e := range closed.LastEntryId + 1 {
		length += int64(len(fmt.Sprint("entry-", e)))
		if n := wtCopies(c, closed, e); n < q[2] {
			t.Fatalf("seed %d (%v): entry %d has %d copies after recovery, want >= Qa", seed, q, e, n)
		}
	}
	if closed.Length != length {
		t.Fatalf("seed %d: length %d, want %d", seed, closed.Length, length)
	}
}
