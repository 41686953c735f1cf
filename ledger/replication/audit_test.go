package replication

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/strata-log/strata/proto/ledgerpb"
)

var (
	t0    = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	grace = 30 * time.Second
)

// ldg builds 3/3/2 ledger metadata; frags alternate first entry and
// comma-separated bookies.
func ldg(id uint64, state ledgerpb.LedgerState, last int64, frags ...any) *ledgerpb.LedgerMetadata {
	md := &ledgerpb.LedgerMetadata{Id: id, EnsembleSize: 3, WriteQuorum: 3, AckQuorum: 2, State: state, LastEntryId: last}
	for i := 0; i < len(frags); i += 2 {
		md.Fragments = append(md.Fragments, &ledgerpb.Fragment{
			FirstEntryId: int64(frags[i].(int)), Bookies: strings.Split(frags[i+1].(string), ","),
		})
	}
	return md
}

const (
	closed     = ledgerpb.LedgerState_CLOSED
	open       = ledgerpb.LedgerState_OPEN
	inRecovery = ledgerpb.LedgerState_IN_RECOVERY
)

func live(addrs ...string) map[string]bool {
	m := map[string]bool{}
	for _, a := range addrs {
		m[a] = true
	}
	return m
}

// taskStrings renders tasks compactly: "L1 f0 b2" or "L1 recover f1 b2".
func taskStrings(ts []Task) []string {
	var out []string
	for _, t := range ts {
		verb := ""
		if t.Recover {
			verb = " recover"
		}
		out = append(out, fmt.Sprintf("L%d%s f%d@%d %s", t.Ledger, verb, t.Fragment, t.FirstEntry, t.Bookie))
	}
	return out
}

func TestAudit(t *testing.T) {
	everyone := live("a", "b", "c", "d", "e")
	tests := []struct {
		name    string
		ledgers []*ledgerpb.LedgerMetadata
		view    View
		tasks   []string
		missing map[string]time.Time
		under   int
		waiting int
	}{{
		name:    "all bookies live",
		ledgers: []*ledgerpb.LedgerMetadata{ldg(1, closed, 9, 0, "a,b,c"), ldg(2, open, -1, 0, "b,c,d")},
		view:    View{Live: everyone},
	}, {
		name:    "a bookie just vanished: recorded, nothing done within the grace period",
		ledgers: []*ledgerpb.LedgerMetadata{ldg(1, closed, 9, 0, "a,b,c")},
		view:    View{Live: live("a", "c", "d")},
		missing: map[string]time.Time{"b": t0},
		under:   1, waiting: 1,
	}, {
		name:    "missing one millisecond short of the grace period",
		ledgers: []*ledgerpb.LedgerMetadata{ldg(1, closed, 9, 0, "a,b,c")},
		view:    View{Live: live("a", "c", "d"), MissingSince: map[string]time.Time{"b": t0.Add(-grace + time.Millisecond)}},
		missing: map[string]time.Time{"b": t0.Add(-grace + time.Millisecond)},
		under:   1, waiting: 1,
	}, {
		name: "missing for the grace period: every fragment of closed ledgers naming it",
		ledgers: []*ledgerpb.LedgerMetadata{
			ldg(1, closed, 20, 0, "a,b,c", 10, "a,d,c", 15, "b,d,c"),
			ldg(2, closed, 3, 0, "c,d,e"),
			ldg(3, closed, 3, 0, "e,d,b"),
		},
		view:    View{Live: live("a", "c", "d", "e"), MissingSince: map[string]time.Time{"b": t0.Add(-grace)}},
		tasks:   []string{"L1 f0@0 b", "L1 f2@15 b", "L3 f0@0 b"},
		missing: map[string]time.Time{"b": t0.Add(-grace)},
		under:   2,
	}, {
		name:    "decommissioned and alive: closed ledgers at once",
		ledgers: []*ledgerpb.LedgerMetadata{ldg(1, closed, 9, 0, "a,b,c"), ldg(2, closed, 9, 0, "c,d,e")},
		view:    View{Live: everyone, Decommissioned: map[string]time.Time{"b": t0}},
		tasks:   []string{"L1 f0@0 b"},
		under:   1,
	}, {
		name:    "decommissioned: an open ledger waits for the grace period",
		ledgers: []*ledgerpb.LedgerMetadata{ldg(1, open, -1, 0, "a,b,c")},
		view:    View{Live: everyone, Decommissioned: map[string]time.Time{"b": t0.Add(-grace + time.Second)}},
		under:   1, waiting: 1,
	}, {
		name:    "decommissioned past the grace period: the open ledger is recovered",
		ledgers: []*ledgerpb.LedgerMetadata{ldg(1, open, -1, 0, "a,b,c")},
		view:    View{Live: everyone, Decommissioned: map[string]time.Time{"b": t0.Add(-grace)}},
		tasks:   []string{"L1 recover f0@0 b"},
		under:   1,
	}, {
		name:    "open ledger, bookie missing within the grace period: the writer replaces it itself",
		ledgers: []*ledgerpb.LedgerMetadata{ldg(1, open, -1, 0, "a,b,c")},
		view:    View{Live: live("a", "c", "d"), MissingSince: map[string]time.Time{"b": t0.Add(-time.Second)}},
		missing: map[string]time.Time{"b": t0.Add(-time.Second)},
		under:   1, waiting: 1,
	}, {
		// The writer replaced b in its last fragment: fragment 0 is fixed
		// and repaired in place, with no recovery (the writer accepts the
		// swap, ledger W7). An IN_RECOVERY ledger's writer is already
		// fenced: its recovery is completed.
		name: "open ledger, bookie dead past the grace period only in an earlier fragment: repaired in place",
		ledgers: []*ledgerpb.LedgerMetadata{
			ldg(1, open, -1, 0, "a,b,c", 5, "a,d,c"),
			ldg(2, inRecovery, -1, 0, "b,c,d", 7, "e,c,d"),
			ldg(3, open, -1, 0, "b,c,d", 4, "e,c,d", 9, "e,a,d"),
		},
		view:    View{Live: live("a", "c", "d", "e"), MissingSince: map[string]time.Time{"b": t0.Add(-time.Minute)}},
		tasks:   []string{"L1 f0@0 b", "L2 recover f0@0 b", "L3 f0@0 b"},
		missing: map[string]time.Time{"b": t0.Add(-time.Minute)},
		under:   3,
	}, {
		name: "open ledger, bookie dead past the grace period in its last fragment: one recovery, no repair",
		ledgers: []*ledgerpb.LedgerMetadata{
			ldg(1, open, -1, 0, "a,b,c", 5, "a,d,b"),
			ldg(2, open, -1, 0, "a,c,d", 5, "b,c,d"),
		},
		view:    View{Live: live("a", "c", "d", "e"), MissingSince: map[string]time.Time{"b": t0.Add(-grace)}},
		tasks:   []string{"L1 recover f1@5 b", "L2 recover f1@5 b"},
		missing: map[string]time.Time{"b": t0.Add(-grace)},
		under:   2,
	}, {
		name: "open ledger, bookie dead within the grace period in its last fragment, past it in an earlier one",
		ledgers: []*ledgerpb.LedgerMetadata{
			ldg(1, open, -1, 0, "a,b,c", 5, "a,d,e"),
		},
		view: View{Live: live("a", "c", "d"),
			MissingSince: map[string]time.Time{"b": t0.Add(-grace), "e": t0.Add(-time.Second)}},
		tasks:   []string{"L1 f0@0 b"},
		missing: map[string]time.Time{"b": t0.Add(-grace), "e": t0.Add(-time.Second)},
		under:   1,
	}, {
		name:    "decommissioned: an open ledger's earlier fragment at once, its last after the grace period",
		ledgers: []*ledgerpb.LedgerMetadata{ldg(1, open, -1, 0, "a,b,c", 3, "a,b,d")},
		view:    View{Live: everyone, Decommissioned: map[string]time.Time{"b": t0.Add(-time.Second)}},
		tasks:   []string{"L1 f0@0 b"},
		under:   1,
	}, {
		name: "two bad bookies in one fragment: one task each, in ensemble order",
		ledgers: []*ledgerpb.LedgerMetadata{
			ldg(1, closed, 9, 0, "a,b,c"),
		},
		view: View{Live: live("b", "d", "e"), Decommissioned: map[string]time.Time{"b": t0},
			MissingSince: map[string]time.Time{"a": t0.Add(-grace), "c": t0.Add(-grace)}},
		tasks:   []string{"L1 f0@0 a", "L1 f0@0 b", "L1 f0@0 c"},
		missing: map[string]time.Time{"a": t0.Add(-grace), "c": t0.Add(-grace)},
		under:   1,
	}, {
		name:    "records of bookies that came back or that no ledger names are dropped",
		ledgers: []*ledgerpb.LedgerMetadata{ldg(1, closed, 9, 0, "a,b,c")},
		view:    View{Live: live("a", "b", "c"), MissingSince: map[string]time.Time{"b": t0.Add(-time.Hour), "z": t0.Add(-time.Hour)}},
	}, {
		name:    "an empty closed ledger is still repaired (its metadata only)",
		ledgers: []*ledgerpb.LedgerMetadata{ldg(1, closed, -1, 0, "a,b,c")},
		view:    View{Live: everyone, Decommissioned: map[string]time.Time{"c": t0}},
		tasks:   []string{"L1 f0@0 c"},
		under:   1,
	}, {
		name:    "metadata without fragments is skipped",
		ledgers: []*ledgerpb.LedgerMetadata{{Id: 1, State: closed}},
		view:    View{Live: live()},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.view.Now, tt.view.Grace = t0, grace
			got := Audit(tt.ledgers, tt.view)
			if ts := taskStrings(got.Tasks); !slices.Equal(ts, tt.tasks) {
				t.Errorf("tasks:\n got %q\nwant %q", ts, tt.tasks)
			}
			if tt.missing == nil {
				tt.missing = map[string]time.Time{}
			}
			if !maps.EqualFunc(got.MissingSince, tt.missing, time.Time.Equal) {
				t.Errorf("missing since: got %v, want %v", got.MissingSince, tt.missing)
			}
			if got.UnderReplicated != tt.under || got.Waiting != tt.waiting {
				t.Errorf("under-replicated %d waiting %d, want %d and %d", got.UnderReplicated, got.Waiting, tt.under, tt.waiting)
			}
			for _, task := range got.Tasks {
				if task.Reason == "" {
					t.Errorf("%v: no reason", task)
				}
			}
		})
	}
}

func TestReferences(t *testing.T) {
	ledgers, fragments := References([]*ledgerpb.LedgerMetadata{
		ldg(1, closed, 20, 0, "a,b,c", 10, "a,d,c"),
		ldg(2, open, -1, 0, "b,c,d"),
	})
	wantL := map[string]int{"a": 1, "b": 2, "c": 2, "d": 2}
	wantF := map[string]int{"a": 2, "b": 2, "c": 3, "d": 2}
	if !maps.Equal(ledgers, wantL) || !maps.Equal(fragments, wantF) {
		t.Errorf("References: %v %v, want %v %v", ledgers, fragments, wantL, wantF)
	}
}

func TestWriteSet(t *testing.T) {
	ens := []string{"a", "b", "c", "d"}
	for _, tt := range []struct {
		e    int64
		qw   int
		want string
	}{{0, 3, "a,b,c"}, {1, 3, "b,c,d"}, {3, 3, "d,a,b"}, {6, 2, "c,d"}, {4, 4, "a,b,c,d"}} {
		if got := strings.Join(writeSet(ens, tt.e, tt.qw), ","); got != tt.want {
			t.Errorf("writeSet(%d, %d) = %s, want %s", tt.e, tt.qw, got, tt.want)
		}
	}
}
