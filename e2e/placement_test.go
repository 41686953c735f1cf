package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/strata-log/strata/internal/proctest"
	"github.com/strata-log/strata/internal/testwait"
	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/ledger/ledgermetad"
	"github.com/strata-log/strata/proto/ledgerpb"
)

// Rack-aware placement across real processes: 3 racks with 6 bookies.
// Writers in the test process create, fill and close 3/3/2 ledgers one
// after another, with the production placement (weighted random), while
// bookies are killed, added and decommissioned.

const (
	rackLoadWriters = 3
	rackLoadEntries = 60
	rackLoadSize    = 512
)

// rackLoad is the write load: rackLoadWriters goroutines, each creating a
// ledger, appending rackLoadEntries entries one at a time (AppendSync) and
// closing it, again and again, until stop.
type rackLoad struct {
	env    ledger.Env
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu    sync.Mutex
	acked map[uint64]int64 // ledger -> highest acknowledged entry (-1: none)
	errs  []string         // writer errors (a fenced writer, a failed create), for the log
}

func startRackLoad(t *testing.T, env ledger.Env) *rackLoad {
	ctx, cancel := context.WithCancel(context.Background())
	l := &rackLoad{env: env, cancel: cancel, acked: map[uint64]int64{}}
	for range rackLoadWriters {
		l.wg.Go(func() { l.write(ctx) })
	}
	t.Cleanup(l.stop)
	return l
}

// stop ends the load and waits for the writers; safe to call twice.
func (l *rackLoad) stop() {
	l.cancel()
	l.wg.Wait()
}

func (l *rackLoad) note(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.errs) < 50 {
		l.errs = append(l.errs, err.Error())
	}
}

func (l *rackLoad) write(ctx context.Context) {
	for ctx.Err() == nil {
		w, err := ledger.Create(ctx, l.env, ledger.CreateOptions{})
		if err != nil {
			if ctx.Err() == nil {
				l.note(fmt.Errorf("create: %w", err))
				// A create fails fast (no bookie answered yet): not a
				// condition to wait for, a retry pace.
				select {
				case <-ctx.Done():
				case <-time.After(100 * time.Millisecond):
				}
			}
			continue
		}
		id := w.ID()
		l.mu.Lock()
		l.acked[id] = -1
		l.mu.Unlock()
		for e := range int64(rackLoadEntries) {
			got, err := w.AppendSync(ctx, payloadFor(entryKey{id, uint64(e)}, rackLoadSize))
			if err != nil {
				if ctx.Err() == nil {
					l.note(fmt.Errorf("ledger %d entry %d: %w", id, e, err))
				}
				break
			}
			l.mu.Lock()
			l.acked[id] = got
			l.mu.Unlock()
		}
		// Close even when ctx ended: a ledger left open would be
		// recovered by no one (no replicator fences a writer it has
		// nothing against).
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := w.Close(cctx); err != nil && !errors.Is(err, ledger.ErrFenced) {
			l.note(fmt.Errorf("ledger %d close: %w", id, err))
		}
		cancel()
	}
}

func (l *rackLoad) snapshot() map[uint64]int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[uint64]int64, len(l.acked))
	for id, e := range l.acked {
		out[id] = e
	}
	return out
}

// rackCluster is one metad and bookies b1..b6 in racks r1, r1, r2, r2, r3,
// r3, auditing every second with a 3s grace period.
type rackCluster struct {
	meta    *proctest.MetadCluster
	bookies []*proctest.BookieNode
	racks   map[string]string // address -> rack
	env     []string
	store   ledger.MetadataStore
}

func (c *rackCluster) start(t *testing.T, id, rack string) *proctest.BookieNode {
	t.Helper()
	b := proctest.StartBookie(t, bins["bookie"], c.meta, id, "--rack", rack,
		"--autorecovery-interval", "1s", "--autorecovery-grace", "3s")
	c.bookies = append(c.bookies, b)
	c.racks[b.Listen] = rack
	return b
}

func (c *rackCluster) ledgers(t *testing.T) []*ledgerpb.LedgerMetadata {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	mds, err := ledger.ListAll(ctx, c.store)
	if err != nil {
		t.Fatal(err)
	}
	return mds
}

// badFragments lists every fragment that has two members in one rack.
func (c *rackCluster) badFragments(mds []*ledgerpb.LedgerMetadata) []string {
	var bad []string
	for _, md := range mds {
		for i, f := range md.GetFragments() {
			racks := map[string]bool{}
			for _, b := range f.GetBookies() {
				racks[c.racks[b]] = true
			}
			if len(racks) != len(f.GetBookies()) {
				bad = append(bad, fmt.Sprintf("ledger %d fragment %d %v", md.GetId(), i, f.GetBookies()))
			}
		}
	}
	return bad
}

// naming lists the ledgers with a fragment that names addr.
func naming(mds []*ledgerpb.LedgerMetadata, addr string) []uint64 {
	var out []uint64
	for _, md := range mds {
		for _, f := range md.GetFragments() {
			if slices.Contains(f.GetBookies(), addr) {
				out = append(out, md.GetId())
				break
			}
		}
	}
	return out
}

// TestRackAwarePlacement: 6 bookies in 3 racks under a steady write load.
// Every ensemble has one bookie per rack and every bookie takes ledgers;
// after a kill -9 the replacements (the writers' ensemble changes and
// re-replication of closed ledgers) keep one copy per rack; a 7th bookie
// appears in new ensembles at once, but not in all of them; a decommission
// under load moves every copy off, again one per rack; and every
// acknowledged entry reads back.
func TestRackAwarePlacement(t *testing.T) {
	skipShort(t)
	started := time.Now()
	c := &rackCluster{meta: proctest.StartMetad(t, bins["metad"], 1), racks: map[string]string{}}
	for i, rack := range []string{"r1", "r1", "r2", "r2", "r3", "r3"} {
		c.start(t, fmt.Sprintf("b%d", i+1), rack)
	}
	c.env = []string{"STRATA_METAD=" + strings.Join(c.meta.Endpoints(), ",")}
	c.store = ledgermetad.NewStore(newMetaClient(t, c.meta))
	env, _ := realLedgerEnv(t, c.meta)
	load := startRackLoad(t, env)
	defer load.stop()

	// 1. Steady state: one bookie per rack, and the load spread.
	testwait.UntilNil(t, 60*time.Second, "24 ledgers written", func() error {
		if n := len(load.snapshot()); n < 24 {
			return fmt.Errorf("%d ledgers", n)
		}
		return nil
	})
	mds := c.ledgers(t)
	if bad := c.badFragments(mds); len(bad) > 0 {
		t.Fatalf("ensembles with two copies in one rack: %v", bad)
	}
	perBookie := map[string]int{} // id -> ensembles
	for _, md := range mds {
		for _, addr := range md.GetFragments()[0].GetBookies() {
			perBookie[bookieAt(t, c.bookies, addr).ID]++
		}
	}
	t.Logf("%d ledgers; ensembles per bookie: %v", len(mds), perBookie)
	for _, b := range c.bookies {
		if perBookie[b.ID] == 0 {
			t.Errorf("bookie %s is in no ensemble of %d (a hot spot elsewhere): %v", b.ID, len(mds), perBookie)
		}
	}

	// 2. kill -9 of b3 (r2) under load: b4 is the only other bookie in r2,
	// so every replacement for b3 must be b4.
	victim := c.bookies[2]
	killed := time.Now()
	victim.Kill()
	onVictim := naming(c.ledgers(t), victim.Listen)
	if len(onVictim) == 0 {
		t.Fatalf("no ledger names %s", victim.Listen)
	}
	testwait.UntilNil(t, 90*time.Second, "every ledger off the killed bookie", func() error {
		if on := naming(c.ledgers(t), victim.Listen); len(on) > 0 {
			return fmt.Errorf("%d ledgers still name %s, e.g. %d", len(on), victim.Listen, on[0])
		}
		return nil
	})
	mds = c.ledgers(t)
	changed := 0
	for _, md := range mds {
		if len(md.GetFragments()) > 1 {
			changed++
		}
	}
	t.Logf("%d ledgers named %s at the kill; none does %v after it (%d ledgers, %d with an ensemble change)",
		len(onVictim), victim.ID, time.Since(killed).Round(100*time.Millisecond), len(mds), changed)
	if bad := c.badFragments(mds); len(bad) > 0 {
		t.Fatalf("after the kill, fragments with two copies in one rack: %v", bad)
	}

	// 3. A 7th bookie (r1) takes new ledgers at once, but not all of r1's.
	var before uint64
	for _, md := range c.ledgers(t) {
		before = max(before, md.GetId())
	}
	added := c.start(t, "b7", "r1")
	addedAt := time.Now()
	var newer []*ledgerpb.LedgerMetadata
	testwait.UntilNil(t, 60*time.Second, "15 ledgers after the 7th bookie joined", func() error {
		newer = slices.DeleteFunc(c.ledgers(t), func(md *ledgerpb.LedgerMetadata) bool { return md.GetId() <= before })
		if len(newer) < 15 {
			return fmt.Errorf("%d new ledgers", len(newer))
		}
		return nil
	})
	first, with := -1, 0
	for i, md := range newer {
		if slices.Contains(md.GetFragments()[0].GetBookies(), added.Listen) {
			with++
			if first < 0 {
				first = i
			}
		}
	}
	t.Logf("bookie b7 is in %d of the %d ledgers created in the %v after it joined; the first is new ledger #%d",
		with, len(newer), time.Since(addedAt).Round(100*time.Millisecond), first+1)
	if with == 0 || with == len(newer) {
		t.Fatalf("b7 is in %d of %d new ledgers; want some, not all", with, len(newer))
	}

	// 4. Decommission b1 (r1) under load: everything moves off it, to
	// b2 or b7 (r1).
	drained := c.bookies[0]
	decommissioned := time.Now()
	out, errOut, code := strata(t, c.env, "bookie", "decommission", drained.ID, "--wait", "--interval", "500ms", "--timeout", "90s")
	if code != 0 || !strings.Contains(out, "OK bookie "+drained.ID+" drained") {
		t.Fatalf("decommission --wait under load: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	mds = c.ledgers(t)
	t.Logf("decommission of %s under load drained in %v; %d ledgers", drained.ID,
		time.Since(decommissioned).Round(100*time.Millisecond), len(mds))
	if on := naming(mds, drained.Listen); len(on) > 0 {
		t.Fatalf("ledgers %v still name %s after the drain", on, drained.Listen)
	}
	if bad := c.badFragments(mds); len(bad) > 0 {
		t.Fatalf("after the decommission, fragments with two copies in one rack: %v", bad)
	}

	// 5. No loss: once the writers stop, every acknowledged entry reads
	// back. A ledger whose writer failed without closing it is recovered
	// first, as a broker taking its partition over would.
	load.stop()
	acked := load.snapshot()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	recovered := 0
	for _, md := range c.ledgers(t) {
		if md.GetState() != ledgerpb.LedgerState_CLOSED {
			if _, err := ledger.Recover(ctx, env, md.GetId()); err != nil {
				t.Fatalf("recovering ledger %d (%s): %v", md.GetId(), md.GetState(), err)
			}
			recovered++
		}
	}
	entries := 0
	for id, last := range acked {
		if last < 0 {
			continue
		}
		r, err := ledger.OpenReader(ctx, env, id)
		if err != nil {
			t.Fatalf("ledger %d: %v", id, err)
		}
		got, err := r.Read(ctx, 0, last)
		if err != nil {
			t.Fatalf("ledger %d entries 0..%d (acknowledged): %v", id, last, err)
		}
		for _, e := range got {
			if !bytes.Equal(e.Payload, payloadFor(entryKey{id, uint64(e.ID)}, rackLoadSize)) {
				t.Fatalf("ledger %d entry %d differs from what was written", id, e.ID)
			}
		}
		entries += len(got)
	}
	if bad := c.badFragments(c.ledgers(t)); len(bad) > 0 {
		t.Fatalf("at the end, fragments with two copies in one rack: %v", bad)
	}
	load.mu.Lock()
	t.Logf("%d ledgers (%d left open, recovered), %d acknowledged entries read back; writer errors (%d): %v", len(acked), recovered, entries, len(load.errs), load.errs)
	load.mu.Unlock()
	t.Logf("took %v", time.Since(started).Round(100*time.Millisecond))
}
