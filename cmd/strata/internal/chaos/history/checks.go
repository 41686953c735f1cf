package history

import (
	"cmp"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// partitionKey names a key within a partition (ids of the tables).
type partitionKey struct{ part, key uint32 }

// lost is C1: acknowledged records absent from the final read; in a
// compacted topic, keys whose latest acknowledged value is absent and not
// replaced by a later Unknown-outcome value.
func lost(h *history) finding {
	var f finding
	inFinal := make([]bool, len(h.attempts))
	// newestFinal is, per key of a compacted topic, the final read's record
	// of the key with the highest seq that may have been stored.
	newestFinal := make(map[partitionKey]int32)
	for i := range h.reads {
		rd := &h.reads[i]
		if !rd.final {
			continue
		}
		ai := h.attemptFor(rd)
		if ai < 0 {
			continue
		}
		inFinal[ai] = true
		a := &h.attempts[ai]
		if !h.compacted[a.part] || a.outcome == Failed {
			continue
		}
		k := partitionKey{a.part, a.key}
		if prev, ok := newestFinal[k]; !ok || h.attempts[prev].seq < a.seq {
			newestFinal[k] = ai
		}
	}

	// latest is, per key of a compacted topic, its latest acknowledged attempt.
	latest := make(map[partitionKey]int32)
	for i := range h.attempts {
		a := &h.attempts[i]
		if a.outcome != OK {
			continue
		}
		if h.compacted[a.part] {
			k := partitionKey{a.part, a.key}
			if prev, ok := latest[k]; !ok || later(&h.attempts[prev], a) {
				latest[k] = int32(i)
			}
			continue
		}
		if !inFinal[i] {
			f.add("%s: %s is absent from the final read", h.partitionString(a.part), h.describeAttempt(int32(i)))
		}
	}

	for _, ai := range slices.Sorted(maps.Values(latest)) {
		a := &h.attempts[ai]
		newest, ok := newestFinal[partitionKey{a.part, a.key}]
		switch {
		case !ok:
			f.add("%s (compacted): %s, the latest acknowledged of its key, is absent from the final read, which has no record of the key",
				h.partitionString(a.part), h.describeAttempt(ai))
		case h.attempts[newest].seq < a.seq:
			f.add("%s (compacted): %s, the latest acknowledged of its key, is absent from the final read, whose newest record of the key is %s",
				h.partitionString(a.part), h.describeAttempt(ai), h.describeAttempt(newest))
		}
	}
	return f
}

// later reports whether b is a later attempt of its key than a.
func later(a, b *attempt) bool {
	return b.seq > a.seq || (b.seq == a.seq && b.end > a.end)
}

// wrongOffsets is C2: acknowledged records read in their place at an
// offset other than the acknowledged one; counted per record.
func wrongOffsets(h *history) finding {
	var f finding
	reported := make([]bool, len(h.attempts))
	for i := range h.reads {
		rd := &h.reads[i]
		ai := h.attemptFor(rd)
		if ai < 0 || reported[ai] {
			continue
		}
		if a := &h.attempts[ai]; a.outcome == OK && rd.offset != a.offset {
			reported[ai] = true
			f.add("%s: %s read by %s at offset %d (%s)",
				h.partitionString(rd.part), h.describeAttempt(ai), h.strs[rd.reader], rd.offset, elapsed(rd.at))
		}
	}
	return f
}

// duplicates is C3: records read in their place at two or more offsets;
// counted per record.
func duplicates(h *history) finding {
	var f finding
	// first is the first read of each attempt's record, or -1.
	first := make([]int32, len(h.attempts))
	for i := range first {
		first[i] = -1
	}
	reported := make([]bool, len(h.attempts))
	for i := range h.reads {
		rd := &h.reads[i]
		ai := h.attemptFor(rd)
		if ai < 0 || reported[ai] {
			continue
		}
		if first[ai] < 0 {
			first[ai] = int32(i)
			continue
		}
		if prev := &h.reads[first[ai]]; prev.offset != rd.offset {
			reported[ai] = true
			f.add("%s: %s read at offset %d by %s and at offset %d by %s",
				h.partitionString(rd.part), h.describeAttempt(ai),
				prev.offset, h.strs[prev.reader], rd.offset, h.strs[rd.reader])
		}
	}
	return f
}

// conflicts is C4: offsets of a partition at which readers saw different
// values; counted per offset.
func conflicts(h *history) finding {
	var f finding
	order := make([]int32, len(h.reads))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortFunc(order, func(i, j int32) int {
		a, b := &h.reads[i], &h.reads[j]
		switch {
		case a.part != b.part:
			return cmp.Compare(a.part, b.part)
		case a.offset != b.offset:
			return cmp.Compare(a.offset, b.offset)
		case a.value != b.value:
			return cmp.Compare(a.value, b.value)
		}
		return cmp.Compare(i, j)
	})
	for start := 0; start < len(order); {
		rd := &h.reads[order[start]]
		end, values := start+1, 1
		for ; end < len(order); end++ {
			next := &h.reads[order[end]]
			if next.part != rd.part || next.offset != rd.offset {
				break
			}
			if next.value != h.reads[order[end-1]].value {
				values++
			}
		}
		if values > 1 {
			// Sorted by value within the offset: name each value once.
			seen := make([]string, 0, values)
			for k := start; k < end; k++ {
				if other := &h.reads[order[k]]; k == start || other.value != h.reads[order[k-1]].value {
					seen = append(seen, h.quote(other.value)+" by "+h.strs[other.reader])
				}
			}
			f.add("%s offset %d: %d different values read: %s",
				h.partitionString(rd.part), rd.offset, values, strings.Join(seen, ", "))
		}
		start = end
	}
	return f
}

// corrupt is C5: records read that no attempt made in their place; counted
// per partition, offset and value.
func corrupt(h *history) finding {
	var f finding
	type record struct {
		part   uint32
		value  uint32
		offset int64
	}
	reported := make(map[record]bool)
	for i := range h.reads {
		rd := &h.reads[i]
		if h.attemptFor(rd) >= 0 {
			continue
		}
		r := record{rd.part, rd.value, rd.offset}
		if reported[r] {
			continue
		}
		reported[r] = true
		what := "no attempt made it"
		if ai := h.attemptOf[rd.value]; ai >= 0 {
			what = "it is " + h.describeAttempt(ai)
		}
		f.add("%s offset %d: %s key %s read by %s (%s), but %s",
			h.partitionString(rd.part), rd.offset, h.quote(rd.value), h.quote(rd.key),
			h.strs[rd.reader], elapsed(rd.at), what)
	}
	return f
}

// phantoms is C6: Failed attempts whose value was read anywhere; counted
// per attempt.
func phantoms(h *history) finding {
	var f finding
	reported := make([]bool, len(h.attempts))
	for i := range h.reads {
		rd := &h.reads[i]
		ai := h.attemptOf[rd.value]
		if ai < 0 || reported[ai] || h.attempts[ai].outcome != Failed {
			continue
		}
		reported[ai] = true
		f.add("%s offset %d: %s read by %s (%s), but its producer was told it failed",
			h.partitionString(rd.part), rd.offset, h.describeAttempt(ai), h.strs[rd.reader], elapsed(rd.at))
	}
	return f
}

// reorders is C7: in the final read, records of a key at an offset after a
// record of the same key with a higher seq; counted per record, first
// occurrence of each record only.
func reorders(h *history) finding {
	var f finding
	var order []int32 // final reads of records in their place
	for i := range h.reads {
		if rd := &h.reads[i]; rd.final && h.attemptFor(rd) >= 0 {
			order = append(order, int32(i))
		}
	}
	slices.SortFunc(order, func(i, j int32) int {
		a, b := &h.reads[i], &h.reads[j]
		switch {
		case a.part != b.part:
			return cmp.Compare(a.part, b.part)
		case a.key != b.key:
			return cmp.Compare(a.key, b.key)
		case a.offset != b.offset:
			return cmp.Compare(a.offset, b.offset)
		}
		return cmp.Compare(i, j)
	})
	seen := make([]bool, len(h.attempts))
	// top is the read of the current key whose record has the highest seq
	// so far, or nil at the start of each key.
	var top *read
	for _, ri := range order {
		rd := &h.reads[ri]
		if top != nil && (rd.part != top.part || rd.key != top.key) {
			top = nil
		}
		ai := h.attemptOf[rd.value]
		if seen[ai] {
			continue
		}
		seen[ai] = true
		if top == nil || h.attempts[ai].seq >= h.attempts[h.attemptOf[top.value]].seq {
			top = rd
			continue
		}
		f.add("%s key %s: seq %d at offset %d after seq %d at offset %d",
			h.partitionString(rd.part), h.quote(rd.key),
			h.attempts[ai].seq, rd.offset, h.attempts[h.attemptOf[top.value]].seq, top.offset)
	}
	return f
}

// vanished is C10: in a topic that is not compacted, offsets at which a
// reader saw a record that the final read of the partition does not hold
// although it reads past them (the log lost records it had served);
// counted per partition and offset. A partition with no final read is
// C1's.
func vanished(h *history) finding {
	var f finding
	finals := make(map[uint32][]int64) // per partition, its final read's offsets, sorted
	for i := range h.reads {
		if rd := &h.reads[i]; rd.final && !h.compacted[rd.part] {
			finals[rd.part] = append(finals[rd.part], rd.offset)
		}
	}
	for _, offsets := range finals {
		slices.Sort(offsets)
	}
	type place struct {
		part   uint32
		offset int64
	}
	reported := make(map[place]bool)
	for i := range h.reads {
		rd := &h.reads[i]
		offsets := finals[rd.part]
		if rd.final || len(offsets) == 0 || rd.offset > offsets[len(offsets)-1] {
			continue
		}
		at, held := slices.BinarySearch(offsets, rd.offset)
		if held || reported[place{rd.part, rd.offset}] {
			continue
		}
		reported[place{rd.part, rd.offset}] = true
		before := "nothing"
		if at > 0 {
			before = "offset " + strconv.FormatInt(offsets[at-1], 10)
		}
		f.add("%s offset %d: %s key %s read by %s (%s), but the final read has no record there (before it %s, after it offset %d)",
			h.partitionString(rd.part), rd.offset, h.quote(rd.value), h.quote(rd.key), h.strs[rd.reader],
			elapsed(rd.at), before, offsets[at])
	}
	return f
}
