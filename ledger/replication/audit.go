package replication

import (
	"fmt"
	"slices"
	"time"

	"github.com/strata-log/strata/proto/ledgerpb"
)

// View is what the auditor knows of the bookies at one instant. Bookies are
// named by address, as ledger fragments name them.
type View struct {
	Now time.Time
	// Grace is how long a bookie may be missing before its copies are
	// re-replicated, and how long an open ledger may keep a missing or
	// decommissioned bookie in its last fragment before it is recovered
	// (fenced and closed).
	Grace time.Duration
	// Live holds the addresses with a live registration, in any state
	// (a read-only bookie still serves its copies).
	Live map[string]bool
	// Decommissioned maps the addresses an operator decommissioned to when
	// the decommission was requested.
	Decommissioned map[string]time.Time
	// MissingSince maps addresses known to be missing (no live
	// registration) to when they were first seen missing.
	MissingSince map[string]time.Time
}

// Task is one repair the auditor asks for.
type Task struct {
	Ledger uint64
	// Recover: the ledger is IN_RECOVERY, or OPEN with an overdue bookie
	// in its last fragment. It is recovered first (fenced and closed: its
	// writer, if alive, stops and its owner rolls to a new ledger), then
	// audited again. Fragment and Bookie name the bad bookie that
	// triggered it. Without Recover the fragment is repaired in place: a
	// fragment of a CLOSED ledger, or one before the last of an OPEN one.
	Recover bool
	// Fragment is the index of the fragment, FirstEntry its first entry
	// (a check that the fragment is still the one audited).
	Fragment   int
	FirstEntry int64
	// Bookie is the address to replace in the fragment.
	Bookie string
	// Reason says why, for logs and people.
	Reason string
}

func (t Task) String() string {
	verb := "replace"
	if t.Recover {
		verb = "recover, then replace"
	}
	return fmt.Sprintf("ledger %d fragment %d (from entry %d): %s %s (%s)",
		t.Ledger, t.Fragment, t.FirstEntry, verb, t.Bookie, t.Reason)
}

// AuditResult is the auditor's verdict over every ledger.
type AuditResult struct {
	// Tasks, in ledger id order, then fragment order, then ensemble order.
	Tasks []Task
	// MissingSince is the new set of missing-bookie records: every address
	// that some ledger references and that has no live registration, with
	// when it was first seen missing (kept from View.MissingSince, else
	// View.Now). Addresses that came back, or that no ledger references
	// any more, are left out.
	MissingSince map[string]time.Time
	// UnderReplicated counts ledgers with a fragment on a bookie that is
	// missing (however briefly) or decommissioned: they have fewer than
	// Qw reachable copies of some entries, or soon will.
	UnderReplicated int
	// Waiting counts the under-replicated ledgers the auditor leaves alone
	// for now: a missing bookie still within the grace period, or an open
	// ledger with a decommissioned bookie that is within it.
	Waiting int
}

// bookieVerdict is the auditor's judgement of one address.
type bookieVerdict struct {
	// bad: the fragment must be re-replicated (in place if it is fixed:
	// its ledger is closed, or it is not an open ledger's last fragment).
	bad bool
	// overdue: bad for at least the grace period: an open ledger holding
	// it in its last fragment is recovered.
	overdue bool
	// under: counts towards UnderReplicated.
	under  bool
	reason string
}

// judge decides about one address. A decommissioned bookie is bad at once
// (it is alive: copying from it loses nothing) and overdue after the grace
// period. A missing bookie is bad, and overdue, once it has been missing
// for the grace period: a restart or a network blip must not trigger a
// copy of every ledger it holds.
func (v View) judge(addr string, missing map[string]time.Time) bookieVerdict {
	var out bookieVerdict
	since := time.Time{}
	if at, ok := v.Decommissioned[addr]; ok {
		out.bad, out.under, since = true, true, at
		out.reason = "decommissioned at " + at.UTC().Format(time.RFC3339)
	}
	if !v.Live[addr] {
		gone := missing[addr]
		out.under = true
		if v.Now.Sub(gone) >= v.Grace {
			out.bad = true
			if since.IsZero() || gone.Before(since) {
				since = gone
			}
			out.reason = "missing since " + gone.UTC().Format(time.RFC3339)
		} else if out.reason == "" {
			out.reason = "missing since " + gone.UTC().Format(time.RFC3339) + " (within the grace period)"
		}
	}
	out.overdue = out.bad && v.Now.Sub(since) >= v.Grace
	return out
}

// Audit decides which ledgers need repair. It is a pure function of its
// inputs (no I/O, no clock): the replicator feeds it what it read from
// metad, and tests feed it tables.
//
// Rules, for every fragment of every ledger and every bookie in it (see
// judge for "bad" and "overdue"):
//
//   - CLOSED ledger, bad bookie: a Task to copy the fragment's entries that
//     the bookie held to a replacement and swap it into the fragment.
//   - OPEN ledger, bad bookie in a fragment before the last: the same Task.
//     That fragment's entries are fixed (the writer only appends to its
//     last fragment, and every entry below it is acknowledged, ledger W4),
//     and the writer accepts a swap there (ledger W7), so it keeps
//     writing. This is what BookKeeper does for an open ledger's earlier
//     fragments.
//   - OPEN ledger, overdue bookie in the last fragment: its writer did not
//     replace it (it is dead, or found no spare), and entries are still
//     being added there: one Recover task for the ledger, instead of any
//     repair (BookKeeper's openLedgerRereplicationGracePeriod); the
//     recovered ledger is then repaired whole.
//   - IN_RECOVERY ledger, overdue bookie in any fragment: one Recover task.
//     Its writer is already fenced (a recovery began and did not finish),
//     so completing the recovery disturbs no one, and repairing fragments
//     of a ledger whose metadata a recovery is about to close would only
//     race it.
//
// Malformed metadata (no fragments) is skipped.
func Audit(ledgers []*ledgerpb.LedgerMetadata, v View) AuditResult {
	res := AuditResult{MissingSince: map[string]time.Time{}}
	verdict := v.verdicts(res.MissingSince)
	for _, md := range ledgers {
		tasks, under, waiting := auditLedger(md, verdict)
		res.Tasks = append(res.Tasks, tasks...)
		if under {
			res.UnderReplicated++
		}
		if waiting {
			res.Waiting++
		}
	}
	return res
}

// verdicts returns a memoizing judge of addresses. It adds every address
// without a live registration to missing, with its time from
// v.MissingSince, else v.Now.
func (v View) verdicts(missing map[string]time.Time) func(string) bookieVerdict {
	memo := map[string]bookieVerdict{}
	return func(addr string) bookieVerdict {
		if vd, ok := memo[addr]; ok {
			return vd
		}
		if !v.Live[addr] {
			if _, ok := missing[addr]; !ok {
				since, ok := v.MissingSince[addr]
				if !ok {
					since = v.Now
				}
				missing[addr] = since
			}
		}
		vd := v.judge(addr, missing)
		memo[addr] = vd
		return vd
	}
}

// auditLedger applies Audit's rules to one ledger.
func auditLedger(md *ledgerpb.LedgerMetadata, verdict func(string) bookieVerdict) (tasks []Task, under, waiting bool) {
	if len(md.GetFragments()) == 0 {
		return nil, false, false
	}
	var trigger *Task
	for i, f := range md.GetFragments() {
		fixed := fragmentFixed(md, i)
		for _, b := range f.GetBookies() {
			vd := verdict(b)
			under = under || vd.under
			if !vd.bad {
				continue
			}
			t := Task{Ledger: md.GetId(), Fragment: i, FirstEntry: f.GetFirstEntryId(), Bookie: b, Reason: vd.reason}
			switch {
			case fixed:
				tasks = append(tasks, t)
			case vd.overdue && trigger == nil:
				t.Recover = true
				t.Reason += "; the ledger is " + md.GetState().String()
				trigger = &t
			}
		}
	}
	if trigger != nil {
		tasks = []Task{*trigger}
	}
	waiting = under && len(tasks) == 0
	return tasks, under, waiting
}

// fragmentFixed reports whether fragment fi of md can be repaired in place:
// its entries no longer change. Every fragment of a CLOSED ledger; the
// fragments before the last of an OPEN one (ledger W4, W7). Not those of
// an IN_RECOVERY ledger: a recovery owns its metadata until it closes it.
func fragmentFixed(md *ledgerpb.LedgerMetadata, fi int) bool {
	switch md.GetState() {
	case ledgerpb.LedgerState_CLOSED:
		return true
	case ledgerpb.LedgerState_OPEN:
		return fi < len(md.GetFragments())-1
	}
	return false
}

// References counts, per address, the ledgers and the fragments that name
// it: a decommissioned bookie is drained when it has none.
func References(ledgers []*ledgerpb.LedgerMetadata) (ledgerCount, fragmentCount map[string]int) {
	ledgerCount, fragmentCount = map[string]int{}, map[string]int{}
	for _, md := range ledgers {
		var seen []string
		for _, f := range md.GetFragments() {
			for _, b := range f.GetBookies() {
				fragmentCount[b]++
				if !slices.Contains(seen, b) {
					seen = append(seen, b)
					ledgerCount[b]++
				}
			}
		}
	}
	return ledgerCount, fragmentCount
}
