package replication

import (
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/proto/ledgerpb"
)

// openWithEnsembleChange writes 11 entries to a new ledger of g, the last
// after killing a bookie of its first fragment, and lets the writer replace
// it: the ledger is OPEN with fragment 0 (entries 0..10, naming the dead
// bookie) and fragment 1 (from entry 11, without it). It returns the open
// writer and the dead bookie.
func openWithEnsembleChange(t *testing.T, g *rig) (*ledger.Writer, string) {
	t.Helper()
	w := g.write(ledger.CreateOptions{ExplicitLACInterval: -1}, 10, false)
	dead := g.metadata(w.ID()).Fragments[0].Bookies[1]
	g.kill(dead)
	if _, err := w.AppendSync(testCtx(t), payload(w.ID(), 10)); err != nil {
		t.Fatal(err)
	}
	g.c.Scheduler.RunDue() // the writer replaces the dead bookie
	md := g.metadata(w.ID())
	if md.State != ledgerpb.LedgerState_OPEN || len(md.Fragments) != 2 || md.Fragments[1].FirstEntryId != 11 ||
		slices.Contains(md.Fragments[1].Bookies, dead) {
		t.Fatalf("after the writer's ensemble change: %v", md)
	}
	return w, dead
}

// A bookie dead past the grace period only in an earlier fragment of an
// open ledger (its writer already replaced it in the last one): that
// fragment's entries, a fixed range although the ledger is open, are
// copied to a replacement and the bookie swapped in place. No recovery:
// the ledger stays OPEN, the later fragment is unchanged, and the writer
// goes on writing and closes the ledger (ledger W7).
func TestRepairOpenLedgerEarlierFragmentInPlace(t *testing.T) {
	g := newRig(t, 5)
	w, dead := openWithEnsembleChange(t, g)
	for e := int64(11); e < 15; e++ {
		if _, err := w.AppendSync(testCtx(t), payload(w.ID(), e)); err != nil {
			t.Fatal(err)
		}
	}
	if round := runOnce(t, g); len(round.Audit.Tasks) != 0 || round.Audit.Waiting != 1 {
		t.Fatalf("within the grace period: %+v", round)
	}
	g.c.Scheduler.Advance(grace)
	before := g.metadata(w.ID())
	round := runOnce(t, g)
	if round.Recovered != 0 || round.Repaired != 1 || round.Failed != 0 || round.EntriesCopied != 11 {
		t.Fatalf("round %+v (%v), want fragment 0 repaired in place: 11 entries, no recovery", round, round.Errors)
	}
	after := g.metadata(w.ID())
	pos := slices.Index(before.Fragments[0].Bookies, dead)
	replacement := after.Fragments[0].Bookies[pos]
	want := proto.Clone(before).(*ledgerpb.LedgerMetadata)
	want.Fragments[0].Bookies[pos] = replacement
	if replacement == dead || !proto.Equal(after, want) {
		t.Fatalf("metadata after the repair:\n got %v\nwant %v (only the swap)", after, want)
	}
	for e := range uint64(11) {
		if _, ok := g.c.Bookies.Stored(replacement, w.ID(), e); !ok {
			t.Errorf("replacement %s lacks entry %d", replacement, e)
		}
	}
	// The writer was not disturbed.
	for e := int64(15); e < 20; e++ {
		if _, err := w.AppendSync(testCtx(t), payload(w.ID(), e)); err != nil {
			t.Fatalf("append after the repair: %v", err)
		}
	}
	if err := w.Close(testCtx(t)); err != nil {
		t.Fatalf("Close after the repair: %v", err)
	}
	if md := g.metadata(w.ID()); md.LastEntryId != 19 || md.Fragments[0].Bookies[pos] != replacement {
		t.Fatalf("closed metadata %v", md)
	}
	g.checkFullyReplicated(w.ID(), dead)
	if round := runOnce(t, g); len(round.Audit.Tasks) != 0 || round.Audit.UnderReplicated != 0 {
		t.Errorf("next round: %+v", round)
	}
}

// The swap of an open ledger's earlier fragment conflicts with its writer:
// once with an ensemble change (a new last fragment), once with its close.
// Each time the repair re-reads, finds the fragment still fixed, and swaps
// on top, keeping the writer's change.
func TestRepairOpenLedgerSwapConflictsWithWriter(t *testing.T) {
	for _, concurrent := range []string{"ensemble change", "close"} {
		t.Run(concurrent, func(t *testing.T) {
			g := newRig(t, 6)
			w, dead := openWithEnsembleChange(t, g)
			defer w.Close(testCtx(t))
			for e := int64(11); e < 13; e++ {
				if _, err := w.AppendSync(testCtx(t), payload(w.ID(), e)); err != nil {
					t.Fatal(err)
				}
			}
			var writers *ledgerpb.LedgerMetadata
			meta := &hookMeta{MetadataStore: g.c.Meta}
			meta.beforeUpdate = func(n int) {
				if n != 1 {
					return
				}
				md := g.metadata(w.ID())
				if concurrent == "close" {
					md.State, md.LastEntryId = ledgerpb.LedgerState_CLOSED, 12
				} else {
					// A new last fragment from entry 13, one bookie replaced.
					ens := slices.Clone(md.Fragments[1].Bookies)
					for i := range 6 {
						if a := addr(i); a != dead && !slices.Contains(ens, a) {
							ens[0] = a
							break
						}
					}
					md.Fragments = append(md.Fragments, &ledgerpb.Fragment{FirstEntryId: 13, Bookies: ens})
				}
				g.c.Meta.Set(md)
				writers = md
			}
			env := g.c.Env()
			env.Meta = meta
			g.useEnv(env)
			runOnce(t, g)
			g.c.Scheduler.Advance(grace)
			round := runOnce(t, g)
			if round.Repaired != 1 || round.Recovered != 0 || round.Failed != 0 || meta.updates != 2 {
				t.Fatalf("round %+v (%v), %d updates", round, round.Errors, meta.updates)
			}
			after := g.metadata(w.ID())
			pos := slices.Index(writers.Fragments[0].Bookies, dead)
			want := proto.Clone(writers).(*ledgerpb.LedgerMetadata)
			want.Fragments[0].Bookies[pos] = after.Fragments[0].Bookies[pos]
			if after.Fragments[0].Bookies[pos] == dead || !proto.Equal(after, want) {
				t.Fatalf("metadata:\n got %v\nwant %v", after, want)
			}
		})
	}
}
