package history

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// groupOverlaps is C8: a partition delivered to two or more members of one
// group within one generation; counted per group, generation and
// partition.
func groupOverlaps(h *history) finding {
	var f finding
	ds := slices.Clone(h.deliveries)
	slices.SortFunc(ds, func(a, b groupDelivery) int {
		return cmp.Or(cmp.Compare(a.group, b.group), cmp.Compare(a.generation, b.generation),
			cmp.Compare(a.part, b.part), strings.Compare(h.strs[a.member], h.strs[b.member]))
	})
	for start := 0; start < len(ds); {
		end := start + 1
		for end < len(ds) && ds[end].deliveryKey == ds[start].deliveryKey {
			end++
		}
		if end-start > 1 {
			members := make([]string, 0, end-start)
			for _, d := range ds[start:end] {
				members = append(members, fmt.Sprintf("%s (%d records, offsets %d..%d)",
					h.strs[d.member], d.count, d.first, d.last))
			}
			d := ds[start]
			f.add("group %s generation %d: %s delivered to %s",
				h.quote(d.group), d.generation, h.partitionString(d.part), strings.Join(members, ", "))
		}
		start = end
	}
	return f
}

// commitRegressions is C9: a committed offset of a group's partition lower
// than one made or seen entirely before it (that call ended before this one
// started); counted per later commit. Calls that overlap are not ordered:
// either may have taken effect first.
func commitRegressions(h *history) finding {
	var f finding
	byStart := make([]int32, len(h.commits))
	for i := range byStart {
		byStart[i] = int32(i)
	}
	byEnd := slices.Clone(byStart)
	series := func(a, b *commit) int {
		if a.group != b.group {
			return cmp.Compare(a.group, b.group)
		}
		return cmp.Compare(a.part, b.part)
	}
	slices.SortFunc(byStart, func(i, j int32) int {
		a, b := &h.commits[i], &h.commits[j]
		if c := series(a, b); c != 0 {
			return c
		}
		return cmp.Or(cmp.Compare(a.start, b.start), cmp.Compare(i, j))
	})
	slices.SortFunc(byEnd, func(i, j int32) int {
		a, b := &h.commits[i], &h.commits[j]
		if c := series(a, b); c != 0 {
			return c
		}
		return cmp.Or(cmp.Compare(a.end, b.end), cmp.Compare(i, j))
	})

	// Walk each series by start; e walks it by end, so that highest is the
	// highest offset among commits that ended before the current one
	// started.
	e := 0
	var highest *commit
	for n, ci := range byStart {
		c := &h.commits[ci]
		if n == 0 || series(c, &h.commits[byStart[n-1]]) != 0 {
			highest = nil
			for e < len(byEnd) && series(&h.commits[byEnd[e]], c) < 0 {
				e++
			}
		}
		for ; e < len(byEnd); e++ {
			prev := &h.commits[byEnd[e]]
			if series(prev, c) != 0 || prev.end >= c.start {
				break
			}
			if highest == nil || prev.offset > highest.offset {
				highest = prev
			}
		}
		if highest != nil && c.offset < highest.offset {
			f.add("group %s %s: committed offset %d %s after %d %s",
				h.quote(c.group), h.partitionString(c.part),
				c.offset, h.describeCommit(c), highest.offset, h.describeCommit(highest))
		}
	}
	return f
}

// describeCommit says who made or saw a commit, and when.
func (h *history) describeCommit(c *commit) string {
	who := "observed"
	if m := h.strs[c.member]; m != "" {
		who = "by " + m
	}
	return fmt.Sprintf("(%s %s..%s)", who, elapsed(c.start), elapsed(c.end))
}
