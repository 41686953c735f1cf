package history

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is the verdict on a history. Seed and DurationSeconds are the
// runner's to set; Check leaves them zero.
type Report struct {
	Seed            int64   `json:"seed"`
	DurationSeconds float64 `json:"duration_s"`
	// Faults counts the faults injected by kind.
	Faults map[string]int `json:"faults"`
	// Acknowledged counts the attempts whose outcome was OK.
	Acknowledged     int   `json:"acknowledged"`
	Lost             int   `json:"lost"`
	Duplicated       int   `json:"duplicated"`
	Reordered        int   `json:"reordered"`
	MaxUnavailableMs int64 `json:"max_unavailable_ms"`

	// Start is when the history began (the Recorder was made).
	Start time.Time `json:"start"`
	// Attempts counts every produce attempt; Failed and UnknownOutcome
	// those with that outcome.
	Attempts       int `json:"attempts"`
	Failed         int `json:"failed"`
	UnknownOutcome int `json:"unknown_outcome"`
	// RecordsRead counts every record read by any reader, FinalRecords those
	// of the final read.
	RecordsRead  int `json:"records_read"`
	FinalRecords int `json:"final_records"`

	// The other correctness checks (see the package documentation).
	WrongOffset       int `json:"wrong_offset"`
	Conflicts         int `json:"conflicts"`
	Vanished          int `json:"vanished"`
	Corrupt           int `json:"corrupt"`
	Phantom           int `json:"phantom"`
	GroupOverlaps     int `json:"group_overlaps"`
	CommitRegressions int `json:"commit_regressions"`
	// InvalidHistory counts breaches of what the runner must provide (two
	// attempts with one value); the other counts cannot be trusted then.
	InvalidHistory int `json:"invalid_history"`

	MaxReadUnavailableMs int64 `json:"max_read_unavailable_ms"`
	// WorstUnavailable and WorstReadUnavailable are the longest stretches
	// behind MaxUnavailableMs and MaxReadUnavailableMs; nil if none.
	WorstUnavailable     *Unavailability `json:"worst_unavailable,omitempty"`
	WorstReadUnavailable *Unavailability `json:"worst_read_unavailable,omitempty"`
	// FaultAvailability has one entry per fault, in the order recorded.
	FaultAvailability []FaultAvailability `json:"fault_availability"`

	// Violations holds up to ten examples per kind of violation, keyed by
	// the name of its count in JSON ("lost", "wrong_offset"...).
	Violations map[string][]string `json:"violations,omitempty"`
}

// OK reports whether the history shows no violation of any kind.
// Availability does not count.
func (r *Report) OK() bool {
	for _, c := range r.violationCounts() {
		if c.count != 0 {
			return false
		}
	}
	return true
}

// kindCount is the count of one kind of violation, named as in JSON.
type kindCount struct {
	kind  string
	count int
}

// violationCounts returns every correctness count, in the order WriteTable
// prints their examples.
func (r *Report) violationCounts() []kindCount {
	return []kindCount{
		{"invalid_history", r.InvalidHistory}, {"lost", r.Lost}, {"wrong_offset", r.WrongOffset},
		{"duplicated", r.Duplicated}, {"conflicts", r.Conflicts}, {"vanished", r.Vanished}, {"corrupt", r.Corrupt},
		{"phantom", r.Phantom}, {"reordered", r.Reordered}, {"group_overlaps", r.GroupOverlaps},
		{"commit_regressions", r.CommitRegressions},
	}
}

// Check checks the history recorded so far. It is meant for the end of a
// run: recording may go on meanwhile, and what is recorded after Check
// begins is not seen, but a history checked mid-run lacks the final read
// (acknowledged records count as lost) and may hold records read before
// their attempts were recorded (they count as corrupt).
func (r *Recorder) Check() Report {
	h := r.snapshot()
	rep := Report{
		Start:          h.origin,
		Faults:         make(map[string]int),
		Attempts:       len(h.attempts),
		RecordsRead:    len(h.reads),
		Violations:     make(map[string][]string),
		InvalidHistory: h.invalid.count,
	}
	for _, f := range h.faults {
		rep.Faults[f.Kind]++
	}
	for _, a := range h.attempts {
		switch a.outcome {
		case OK:
			rep.Acknowledged++
		case Failed:
			rep.Failed++
		default:
			rep.UnknownOutcome++
		}
	}
	for _, rd := range h.reads {
		if rd.final {
			rep.FinalRecords++
		}
	}

	if h.invalid.count > 0 {
		rep.Violations["invalid_history"] = h.invalid.examples
	}
	for _, c := range []struct {
		kind  string
		count *int
		check func(*history) finding
	}{
		{"lost", &rep.Lost, lost},
		{"wrong_offset", &rep.WrongOffset, wrongOffsets},
		{"duplicated", &rep.Duplicated, duplicates},
		{"conflicts", &rep.Conflicts, conflicts},
		{"vanished", &rep.Vanished, vanished},
		{"corrupt", &rep.Corrupt, corrupt},
		{"phantom", &rep.Phantom, phantoms},
		{"reordered", &rep.Reordered, reorders},
		{"group_overlaps", &rep.GroupOverlaps, groupOverlaps},
		{"commit_regressions", &rep.CommitRegressions, commitRegressions},
	} {
		f := c.check(h)
		*c.count = f.count
		if f.count > 0 {
			rep.Violations[c.kind] = f.examples
		}
	}

	av := measureAvailability(h)
	rep.WorstUnavailable, rep.WorstReadUnavailable = av.worstProduce, av.worstRead
	if av.worstProduce != nil {
		rep.MaxUnavailableMs = av.worstProduce.Ms
	}
	if av.worstRead != nil {
		rep.MaxReadUnavailableMs = av.worstRead.Ms
	}
	rep.FaultAvailability = av.faults
	return rep
}

// WriteTable writes the report as a compact table for people: the run,
// the faults by kind with the worst unavailability during each kind, the
// counts, the worst unavailability, the verdict, and the examples of every
// violation found.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(name, format string, args ...any) {
		fmt.Fprintf(tw, "%s\t%s\n", name, fmt.Sprintf(format, args...))
	}
	row("seed", "%d", r.Seed)
	row("duration", "%.1fs", r.DurationSeconds)
	total := 0
	for _, n := range r.Faults {
		total += n
	}
	row("faults", "%d", total)
	for _, k := range r.faultSummary() {
		row("  "+k.kind, "%d  (worst unavailable while it lasted: produce %d ms, read %d ms)", k.count, k.produce, k.read)
	}
	row("attempts", "%d (acknowledged %d, failed %d, unknown outcome %d)",
		r.Attempts, r.Acknowledged, r.Failed, r.UnknownOutcome)
	row("records read", "%d (final read %d)", r.RecordsRead, r.FinalRecords)
	row("lost", "%d", r.Lost)
	row("duplicated", "%d", r.Duplicated)
	row("reordered", "%d", r.Reordered)
	row("other violations", "wrong offset %d, conflicts %d, vanished %d, corrupt %d, phantom %d, group overlaps %d, commit regressions %d, invalid history %d",
		r.WrongOffset, r.Conflicts, r.Vanished, r.Corrupt, r.Phantom, r.GroupOverlaps, r.CommitRegressions, r.InvalidHistory)
	row("max unavailable", "produce %s; read %s",
		r.describeUnavailability(r.MaxUnavailableMs, r.WorstUnavailable),
		r.describeUnavailability(r.MaxReadUnavailableMs, r.WorstReadUnavailable))
	verdict := "OK"
	if !r.OK() {
		verdict = "VIOLATIONS"
	}
	row("verdict", "%s", verdict)
	if err := tw.Flush(); err != nil {
		return err
	}

	for _, c := range r.violationCounts() {
		examples := r.Violations[c.kind]
		if c.count == 0 && len(examples) == 0 {
			continue
		}
		if _, err := fmt.Fprintf(w, "\n%s: %d, examples:\n", c.kind, c.count); err != nil {
			return err
		}
		for _, e := range examples {
			if _, err := fmt.Fprintf(w, "  %s\n", e); err != nil {
				return err
			}
		}
	}
	return nil
}

// kindSummary is one fault kind's line of the table.
type kindSummary struct {
	kind          string
	count         int
	produce, read int64 // worst unavailability overlapping a fault of the kind
}

// faultSummary returns, per fault kind, most frequent first, the count
// and the worst produce and read unavailability during faults of that kind.
func (r *Report) faultSummary() []kindSummary {
	byKind := make(map[string]kindSummary)
	for _, f := range r.FaultAvailability {
		w := byKind[f.Kind]
		byKind[f.Kind] = kindSummary{produce: max(w.produce, f.MaxUnavailableMs), read: max(w.read, f.MaxReadUnavailableMs)}
	}
	kinds := slices.SortedFunc(maps.Keys(r.Faults), func(a, b string) int {
		return cmp.Or(-cmp.Compare(r.Faults[a], r.Faults[b]), strings.Compare(a, b))
	})
	out := make([]kindSummary, 0, len(kinds))
	for _, k := range kinds {
		w := byKind[k]
		out = append(out, kindSummary{kind: k, count: r.Faults[k], produce: w.produce, read: w.read})
	}
	return out
}

// describeUnavailability returns "5230 ms (orders/3 +12.000s..+17.230s)".
func (r *Report) describeUnavailability(ms int64, u *Unavailability) string {
	if u == nil {
		return fmt.Sprintf("%d ms", ms)
	}
	s := fmt.Sprintf("%d ms (%s/%d %s..%s", ms, u.Topic, u.Partition,
		elapsed(int64(u.From.Sub(r.Start))), elapsed(int64(u.To.Sub(r.Start))))
	if !u.Recovered {
		s += ", not recovered"
	}
	return s + ")"
}
