package history

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"
)

// history is a consistent view of a Recorder's entries, with the indexes
// every check uses. Recording may go on while it is checked: it shares the
// recorder's slices, whose existing elements are never written again.
type history struct {
	origin     time.Time
	strs       []string
	parts      []partitionName
	attempts   []attempt
	reads      []read
	polls      []poll
	deliveries []groupDelivery
	commits    []commit
	faults     []Fault
	// compacted is indexed by partition id.
	compacted []bool
	// attemptOf maps a string id to the attempt whose value it is, or -1.
	attemptOf []int32
	// invalid lists what breaks the rules the runner must follow (H1).
	invalid finding
}

// groupDelivery is what one member was delivered of one partition in one
// generation of one group.
type groupDelivery struct {
	deliveryKey
	memberDeliveries
}

// snapshot returns the history recorded so far.
func (r *Recorder) snapshot() *history {
	r.mu.Lock()
	h := &history{
		origin:   r.origin,
		strs:     r.mu.strs.names,
		parts:    r.mu.parts.parts,
		attempts: r.mu.attempts,
		reads:    r.mu.reads,
		polls:    r.mu.polls,
		commits:  r.mu.commits,
		faults:   slices.Clone(r.mu.faults),
	}
	for k, members := range r.mu.deliveries {
		for _, m := range members {
			h.deliveries = append(h.deliveries, groupDelivery{k, m})
		}
	}
	compacted := maps.Clone(r.mu.compacted)
	r.mu.Unlock()

	h.compacted = make([]bool, len(h.parts))
	for i, p := range h.parts {
		h.compacted[i] = compacted[h.strs[p.topic]]
	}
	h.indexValues()
	return h
}

// indexValues fills attemptOf, and reports attempts that share a value.
func (h *history) indexValues() {
	h.attemptOf = make([]int32, len(h.strs))
	for i := range h.attemptOf {
		h.attemptOf[i] = -1
	}
	for i, a := range h.attempts {
		if prev := h.attemptOf[a.value]; prev >= 0 {
			h.invalid.add("value %s made by two attempts: %s and %s; values must be unique",
				h.quote(a.value), h.describeAttempt(prev), h.describeAttempt(int32(i)))
			continue
		}
		h.attemptOf[a.value] = int32(i)
	}
}

// attemptFor returns the attempt whose record rd is, read in its place (its
// partition, its key), or -1.
func (h *history) attemptFor(rd *read) int32 {
	ai := h.attemptOf[rd.value]
	if ai < 0 {
		return -1
	}
	if a := &h.attempts[ai]; a.part != rd.part || a.key != rd.key {
		return -1
	}
	return ai
}

// partitionString returns "topic/partition".
func (h *history) partitionString(part uint32) string {
	p := h.parts[part]
	return h.strs[p.topic] + "/" + strconv.Itoa(int(p.partition))
}

// quote returns a string of the table quoted, cut to a readable length.
func (h *history) quote(id uint32) string {
	const maxLen = 64
	s := h.strs[id]
	if len(s) > maxLen {
		return strconv.Quote(s[:maxLen]) + "..."
	}
	return strconv.Quote(s)
}

// describeAttempt returns an attempt as examples show it:
// `"k/4" (key "k" seq 4, ok at offset 17, +1.250s)`.
func (h *history) describeAttempt(ai int32) string {
	a := &h.attempts[ai]
	outcome := a.outcome.String()
	if a.outcome == OK {
		outcome += " at offset " + strconv.FormatInt(a.offset, 10)
	}
	return fmt.Sprintf("%s (key %s seq %d to %s, %s, %s)", h.quote(a.value), h.quote(a.key),
		a.seq, h.partitionString(a.part), outcome, elapsed(a.end))
}

// elapsed formats nanoseconds from the origin as "+1.250s".
func elapsed(ns int64) string {
	return fmt.Sprintf("%+.3fs", time.Duration(ns).Seconds())
}

// maxExamples is how many examples of each kind of violation are kept.
const maxExamples = 10

// finding is the result of one check: how many violations, and the first
// few as readable examples.
type finding struct {
	count    int
	examples []string
}

func (f *finding) add(format string, args ...any) {
	f.count++
	if len(f.examples) < maxExamples {
		f.examples = append(f.examples, fmt.Sprintf(format, args...))
	}
}
