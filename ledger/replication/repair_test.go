package replication

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/proto/bookiepb"
	"github.com/strata-log/strata/proto/ledgerpb"
)

func runOnce(t *testing.T, g *rig) Round {
	t.Helper()
	round, err := g.r.RunOnce(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	return round
}

// A closed ledger with a decommissioned bookie gets every entry that
// bookie held copied to a replacement, then the metadata names the
// replacement; with striping only the entries whose write set held the
// bookie are copied.
func TestRepairDecommissionedBookie(t *testing.T) {
	for _, q := range [][3]int{{3, 3, 2}, {4, 3, 2}, {5, 2, 2}} {
		t.Run(fmt.Sprint(q), func(t *testing.T) {
			g := newRig(t, 6)
			w := g.write(ledger.CreateOptions{EnsembleSize: q[0], WriteQuorum: q[1], AckQuorum: q[2]}, 20, true)
			before := g.metadata(w.ID())
			bad := before.Fragments[0].Bookies[1]
			held := 0
			for e := range int64(20) {
				if slices.Contains(writeSet(before.Fragments[0].Bookies, e, q[1]), bad) {
					held++
				}
			}
			g.decommission(bad)

			round := runOnce(t, g)
			if round.Repaired != 1 || round.Failed != 0 || round.EntriesCopied != int64(held) {
				t.Fatalf("round %+v, want 1 repaired, %d entries copied", round, held)
			}
			after := g.metadata(w.ID())
			replacement := after.Fragments[0].Bookies[1]
			if replacement == bad || slices.Contains(before.Fragments[0].Bookies, replacement) {
				t.Fatalf("replacement %s for %s in %v", replacement, bad, before.Fragments[0].Bookies)
			}
			g.checkFullyReplicated(w.ID(), bad)
			if n := len(g.c.Bookies.StoredEntries(replacement, w.ID())); n != held {
				t.Errorf("replacement holds %d entries, want %d", n, held)
			}
			if got := metricValue(t, g.r.metrics.entriesCopied); got != float64(held) {
				t.Errorf("entries copied metric %v, want %d", got, held)
			}
			// The next audit finds nothing to do.
			if round := runOnce(t, g); len(round.Audit.Tasks) != 0 || round.Audit.UnderReplicated != 0 {
				t.Errorf("second round: %+v", round)
			}
		})
	}
}

// Several fragments, a bookie in more than one, a ledger with no entries.
func TestRepairEveryFragment(t *testing.T) {
	g := newRig(t, 6)
	// Three fragments written by hand: 0..9 on 0,1,2; 10..14 on 0,3,2;
	// 15..19 on 1,3,4 (the writer would make them by ensemble changes).
	w := g.write(ledger.CreateOptions{}, 20, true)
	md := g.metadata(w.ID())
	md.Fragments = []*ledgerpb.Fragment{
		{FirstEntryId: 0, Bookies: []string{addr(0), addr(1), addr(2)}},
		{FirstEntryId: 10, Bookies: []string{addr(0), addr(3), addr(2)}},
		{FirstEntryId: 15, Bookies: []string{addr(1), addr(3), addr(4)}},
	}
	g.c.Meta.Set(md)
	for e := int64(10); e < 20; e++ {
		req := &ledgerAdd{id: w.ID(), e: e}
		for _, b := range writeSet(md.Fragments[fragmentOf(md, e)].Bookies, e, 3) {
			req.to(t, g, b)
		}
	}
	empty := g.write(ledger.CreateOptions{}, 0, true)
	g.decommission(addr(1))
	round := runOnce(t, g)
	if round.Repaired != 3 || round.Failed != 0 || round.EntriesCopied != 15 {
		t.Fatalf("round %+v, want 3 repaired (2 fragments and the empty ledger), 15 entries", round)
	}
	g.checkFullyReplicated(w.ID(), addr(1))
	g.checkFullyReplicated(empty.ID(), addr(1))
}

type ledgerAdd struct {
	id uint64
	e  int64
}

// to stores the entry on bookie b directly (as a writer would have).
func (a *ledgerAdd) to(t *testing.T, g *rig, b string) {
	w := &worker{env: g.c.Env(), requestTimeout: testTimeout}
	stored, err := ledger.SealEntry(g.metadata(a.id), a.e, payload(a.id, a.e))
	if err != nil {
		t.Fatal(err)
	}
	req := addRequest(a.id, a.e, stored)
	if err := w.add(testCtx(t), b, req); err != nil {
		t.Fatal(err)
	}
}

func fragmentOf(md *ledgerpb.LedgerMetadata, e int64) int {
	fi := 0
	for i, f := range md.Fragments {
		if f.FirstEntryId <= e {
			fi = i
		}
	}
	return fi
}

// A bookie missing for the grace period is replaced; before that, only
// recorded.
func TestRepairDeadBookieAfterGrace(t *testing.T) {
	g := newRig(t, 4)
	w := g.write(ledger.CreateOptions{}, 10, true)
	dead := g.metadata(w.ID()).Fragments[0].Bookies[0]
	g.kill(dead)

	round := runOnce(t, g)
	if len(round.Audit.Tasks) != 0 || round.Audit.Waiting != 1 || round.Audit.UnderReplicated != 1 {
		t.Fatalf("within the grace period: %+v", round)
	}
	if keys := g.kv.keys(MissingPrefix); !slices.Equal(keys, []string{missingKey(dead)}) {
		t.Fatalf("missing records %v", keys)
	}
	// A new leader (a new Replicator) keeps counting from the record.
	g.useEnv(g.c.Env())
	g.c.Scheduler.Advance(grace - time.Second)
	if round := runOnce(t, g); len(round.Audit.Tasks) != 0 {
		t.Fatalf("1s short of the grace period: %+v", round)
	}
	g.c.Scheduler.Advance(time.Second)
	round = runOnce(t, g)
	if round.Repaired != 1 || round.EntriesCopied != 10 {
		t.Fatalf("after the grace period: %+v", round)
	}
	g.checkFullyReplicated(w.ID(), dead)
	// No ledger names it any more: the record goes.
	runOnce(t, g)
	if keys := g.kv.keys(MissingPrefix); len(keys) != 0 {
		t.Fatalf("missing records %v after the repair", keys)
	}
}

// The compare-and-set conflicts with an unrelated change: re-read, apply
// on top. Its answer is lost: re-read, find it applied.
func TestRepairMetadataConflict(t *testing.T) {
	g := newRig(t, 4)
	w := g.write(ledger.CreateOptions{}, 5, true)
	bad := g.metadata(w.ID()).Fragments[0].Bookies[2]
	g.decommission(bad)
	meta := &hookMeta{MetadataStore: g.c.Meta}
	meta.beforeUpdate = func(n int) {
		switch n {
		case 1: // a concurrent, unrelated change
			md := g.metadata(w.ID())
			md.Properties = map[string]string{"touched": "yes"}
			g.c.Meta.Set(md)
		case 2:
			g.c.Meta.LoseAnswers(1)
		}
	}
	env := g.c.Env()
	env.Meta = meta
	g.useEnv(env)
	round := runOnce(t, g)
	if round.Repaired != 1 || round.Failed != 0 || meta.updates != 2 {
		t.Fatalf("round %+v, %d updates", round, meta.updates)
	}
	g.checkFullyReplicated(w.ID(), bad)
	if md := g.metadata(w.ID()); md.Properties["touched"] != "yes" {
		t.Errorf("the concurrent change was lost: %v", md)
	}
}

// Another replicator replaced the bookie while this one copied: nothing
// to write.
func TestRepairAlreadyDoneConcurrently(t *testing.T) {
	g := newRig(t, 5)
	w := g.write(ledger.CreateOptions{}, 5, true)
	bad := g.metadata(w.ID()).Fragments[0].Bookies[0]
	g.decommission(bad)
	meta := &hookMeta{MetadataStore: g.c.Meta}
	meta.beforeUpdate = func(n int) {
		if n == 1 {
			md := g.metadata(w.ID())
			md.Fragments[0].Bookies[0] = addr(4)
			g.c.Meta.Set(md)
		}
	}
	env := g.c.Env()
	env.Meta = meta
	g.useEnv(env)
	round := runOnce(t, g)
	if round.AlreadyRepaired != 1 || round.Repaired != 0 || round.Failed != 0 {
		t.Fatalf("round %+v", round)
	}
	if got := g.metadata(w.ID()).Fragments[0].Bookies[0]; got != addr(4) {
		t.Errorf("the other replicator's choice was overwritten: %s", got)
	}
}

// A ledger deleted while its entries are being copied is skipped, not
// failed: whether the copy then fails (its reads find nothing) or the
// compare-and-set finds no ledger.
func TestRepairLedgerDeletedMidway(t *testing.T) {
	for _, withData := range []bool{false, true} {
		t.Run(fmt.Sprintf("bookie data deleted too: %v", withData), func(t *testing.T) {
			g := newRig(t, 4)
			w := g.write(ledger.CreateOptions{}, 50, true)
			g.decommission(g.metadata(w.ID()).Fragments[0].Bookies[1])
			hb := &hookBookies{BookieClient: g.c.Bookies}
			env := g.c.Env()
			env.Bookies = hb
			hb.onAdd = func(n int, _ string, _ *bookiepb.AddRequest) {
				if n != 1 {
					return
				}
				if withData {
					if err := ledger.Delete(context.Background(), g.c.Env(), w.ID()); err != nil {
						t.Error(err)
					}
				} else if err := g.c.Meta.Delete(context.Background(), w.ID()); err != nil {
					t.Error(err)
				}
			}
			g.useEnv(env)
			round := runOnce(t, g)
			if round.LedgersGone != 1 || round.Failed != 0 || round.Repaired != 0 {
				t.Fatalf("round %+v", round)
			}
		})
	}
}

// An open ledger whose bookie is dead past the grace period is recovered
// (its writer fenced), then repaired.
func TestRepairOpenLedgerRecoveredAfterGrace(t *testing.T) {
	g := newRig(t, 4)
	w := g.write(ledger.CreateOptions{ExplicitLACInterval: -1}, 10, false)
	dead := g.metadata(w.ID()).Fragments[0].Bookies[1]
	g.kill(dead)
	if round := runOnce(t, g); len(round.Audit.Tasks) != 0 || round.Audit.Waiting != 1 {
		t.Fatalf("within the grace period: %+v", round)
	}
	if md := g.metadata(w.ID()); md.State != ledgerpb.LedgerState_OPEN {
		t.Fatalf("ledger touched within the grace period: %v", md)
	}
	g.c.Scheduler.Advance(grace)
	round := runOnce(t, g)
	if round.Recovered != 1 || round.Repaired != 1 || round.Failed != 0 {
		t.Fatalf("round %+v (%v)", round, round.Errors)
	}
	md := g.metadata(w.ID())
	if md.LastEntryId != 9 {
		t.Fatalf("recovered to %d, want 9", md.LastEntryId)
	}
	g.checkFullyReplicated(w.ID(), dead)
	if _, err := w.AppendSync(testCtx(t), []byte("late")); !errors.Is(err, ledger.ErrFenced) {
		t.Errorf("the old writer's append: %v, want ErrFenced", err)
	}
	if err := w.Close(testCtx(t)); !errors.Is(err, ledger.ErrFenced) {
		t.Errorf("the old writer's Close: %v", err)
	}
	if got := metricValue(t, g.r.metrics.recovered); got != 1 {
		t.Errorf("recovered metric %v", got)
	}
}

// A live writer's ledger with a decommissioned bookie is left alone until
// the grace period has passed.
func TestRepairOpenLedgerDecommissionedWaits(t *testing.T) {
	g := newRig(t, 4)
	w := g.write(ledger.CreateOptions{ExplicitLACInterval: -1}, 3, false)
	g.decommission(g.metadata(w.ID()).Fragments[0].Bookies[0])
	for range 2 {
		if round := runOnce(t, g); len(round.Audit.Tasks) != 0 {
			t.Fatalf("round %+v", round)
		}
		g.c.Scheduler.Advance(grace / 2)
	}
	if _, err := w.AppendSync(testCtx(t), []byte("still writing")); err != nil {
		t.Fatalf("the writer was disturbed: %v", err)
	}
	if round := runOnce(t, g); round.Recovered != 1 || round.Repaired != 1 {
		t.Fatalf("after the grace period: %+v", round)
	}
	if md := g.metadata(w.ID()); md.LastEntryId != 3 {
		t.Fatalf("recovered to %d, want 3", md.LastEntryId)
	}
	w.Close(testCtx(t))
}

// A surviving member found lacking an entry it should hold (it was read
// first and said "no such entry") gets a copy too.
func TestRepairFillsGapsOnSurvivors(t *testing.T) {
	g := newRig(t, 4)
	w := g.write(ledger.CreateOptions{}, 8, true)
	ens := g.metadata(w.ID()).Fragments[0].Bookies
	g.c.Bookies.Wipe(ens[0])
	g.decommission(ens[1])
	var seen []uint64 // entries whose first source is the wiped bookie
	for e := range int64(8) {
		if ws := writeSet(ens, e, 3); slices.DeleteFunc(ws, func(b string) bool { return b == ens[1] })[0] == ens[0] {
			seen = append(seen, uint64(e))
		}
	}
	round := runOnce(t, g)
	if round.Repaired != 1 || round.EntriesCopied != int64(8+len(seen)) {
		t.Fatalf("round %+v, want %d copies (8 to the replacement, %v to %s)", round, 8+len(seen), seen, ens[0])
	}
	if got := g.c.Bookies.StoredEntries(ens[0], w.ID()); !slices.Equal(got, seen) || len(seen) == 0 {
		t.Errorf("%s holds %v again, want %v", ens[0], got, seen)
	}
}

// Failures leave the metadata alone and are retried by the next round.
func TestRepairFailures(t *testing.T) {
	t.Run("no spare bookie", func(t *testing.T) {
		g := newRig(t, 3)
		w := g.write(ledger.CreateOptions{}, 3, true)
		g.decommission(addr(0))
		round := runOnce(t, g)
		if round.Failed != 1 || !errors.Is(round.Errors[0], ErrNoReplacement) || !errors.Is(round.Errors[0], ledger.ErrNotEnoughBookies) {
			t.Fatalf("round %+v", round)
		}
		if !slices.Contains(g.metadata(w.ID()).Fragments[0].Bookies, addr(0)) {
			t.Fatal("metadata changed")
		}
		g.c.Bookies.AddBookie(addr(3))
		g.c.Registry.Register(infoOf(addr(3)))
		g.register(addr(3))
		if round := runOnce(t, g); round.Repaired != 1 {
			t.Fatalf("with a spare: %+v", round)
		}
		g.checkFullyReplicated(w.ID(), addr(0))
	})
	t.Run("no readable copy", func(t *testing.T) {
		g := newRig(t, 5)
		w := g.write(ledger.CreateOptions{}, 3, true)
		ens := g.metadata(w.ID()).Fragments[0].Bookies
		g.decommission(ens[0])
		for _, b := range ens {
			g.c.Bookies.Crash(b)
		}
		round := runOnce(t, g)
		if round.Failed != 1 || !errors.Is(round.Errors[0], ErrCopyFailed) || !errors.Is(round.Errors[0], ledger.ErrEntryUnreadable) {
			t.Fatalf("round %+v", round)
		}
		if !slices.Contains(g.metadata(w.ID()).Fragments[0].Bookies, ens[0]) {
			t.Fatal("metadata changed")
		}
		if got := metricValue(t, g.r.metrics.repairs.WithLabelValues(resultFailed)); got != 1 {
			t.Errorf("failed repairs metric %v", got)
		}
	})
	t.Run("replacement refuses", func(t *testing.T) {
		g := newRig(t, 4)
		w := g.write(ledger.CreateOptions{}, 3, true)
		bad := g.metadata(w.ID()).Fragments[0].Bookies[0]
		spare := addr(3)
		g.decommission(bad)
		g.c.Bookies.Crash(spare) // still registered: the add fails
		round := runOnce(t, g)
		if round.Failed != 1 || !errors.Is(round.Errors[0], ErrCopyFailed) {
			t.Fatalf("round %+v", round)
		}
		if slices.Contains(g.metadata(w.ID()).Fragments[0].Bookies, spare) {
			t.Fatal("metadata names a replacement that does not hold the entries")
		}
	})
}

// A repair keeps one copy per rack: the replacement comes from the bad
// bookie's rack, the one the fragment's other members are not in, although
// another bookie sorts first (ledger.Placement.ChooseReplacement).
func TestRepairKeepsRacks(t *testing.T) {
	g := newRig(t, 6)
	for i := range 6 {
		g.c.Registry.Register(&bookiepb.BookieInfo{Id: addr(i), Address: addr(i),
			State: bookiepb.BookieState_WRITABLE, Rack: fmt.Sprintf("r%d", i%3)})
	}
	w := g.write(ledger.CreateOptions{}, 20, true)
	if got := g.metadata(w.ID()).Fragments[0].Bookies; !slices.Equal(got, []string{addr(0), addr(1), addr(2)}) {
		t.Fatalf("ensemble %v, want bookies 0, 1, 2 (racks r0, r1, r2)", got)
	}
	g.decommission(addr(1))
	if round := runOnce(t, g); round.Repaired != 1 || round.Failed != 0 {
		t.Fatalf("round %+v, want 1 repaired", round)
	}
	if got := g.metadata(w.ID()).Fragments[0].Bookies; !slices.Equal(got, []string{addr(0), addr(4), addr(2)}) {
		t.Fatalf("ensemble after the repair %v, want bookie-1 replaced by bookie-4 (its rack, r1)", got)
	}
	g.checkFullyReplicated(w.ID(), addr(1))
}
