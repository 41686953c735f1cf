package history

import (
	"cmp"
	"math"
	"slices"
	"sort"
	"time"
)

// Unavailability is one stretch during which a partition was being tried
// (produced to, or polled) and no try succeeded.
type Unavailability struct {
	Topic     string    `json:"topic"`
	Partition int32     `json:"partition"`
	From      time.Time `json:"from"`
	To        time.Time `json:"to"`
	Ms        int64     `json:"ms"`
	// Recovered is false when no success ended the stretch before the
	// history did; it then runs to the end of its last try.
	Recovered bool `json:"recovered"`
}

// FaultAvailability is the worst unavailability of any partition while a
// fault was in force.
type FaultAvailability struct {
	Fault
	// MaxUnavailableMs is the longest produce stretch (see Unavailability)
	// of any partition that overlaps the fault's window.
	MaxUnavailableMs int64 `json:"max_unavailable_ms"`
	// MaxReadUnavailableMs is the same for polls.
	MaxReadUnavailableMs int64 `json:"max_read_unavailable_ms"`
}

// try is one produce attempt or poll, as availability sees it.
type try struct {
	start, end int64
	ok         bool
}

// stretch is a stretch of unavailability of one partition, in nanoseconds
// from the origin.
type stretch struct {
	from, to  int64
	recovered bool
}

// unavailability returns the stretches of unavailability of one partition,
// in time order, from its tries in any order: each begins when a try starts
// with no success since it started (or at a success while others are still
// in flight) and ends at the end of the next successful try.
func unavailability(tries []try) []stretch {
	type event struct {
		at    int64
		start bool // a try starts; otherwise one ends
		ok    bool
	}
	events := make([]event, 0, 2*len(tries))
	var last int64 = math.MinInt64
	for _, t := range tries {
		events = append(events, event{at: t.start, start: true}, event{at: t.end, ok: t.ok})
		last = max(last, t.end)
	}
	// At equal times starts come first, so that a try that ends when it
	// starts is in flight when it ends. Equal events are interchangeable.
	slices.SortFunc(events, func(a, b event) int {
		if c := cmp.Compare(a.at, b.at); c != 0 {
			return c
		}
		switch {
		case a.start == b.start:
			return 0
		case a.start:
			return -1
		}
		return 1
	})
	var (
		stretches []stretch
		inFlight  int
		open      bool
		from      int64
	)
	for _, e := range events {
		if e.start {
			inFlight++
			if !open {
				open, from = true, e.at
			}
			continue
		}
		inFlight--
		if !e.ok {
			continue // failures do not end a stretch
		}
		if e.at > from {
			stretches = append(stretches, stretch{from: from, to: e.at, recovered: true})
		}
		open, from = inFlight > 0, e.at
	}
	if open && last > from {
		stretches = append(stretches, stretch{from: from, to: last})
	}
	return stretches
}

// worstOverlapping returns the longest stretch that overlaps [from, to], or
// false if none does. stretches are in time order and do not overlap.
func worstOverlapping(stretches []stretch, from, to int64) (stretch, bool) {
	var worst stretch
	found := false
	i := sort.Search(len(stretches), func(i int) bool { return stretches[i].to >= from })
	for ; i < len(stretches) && stretches[i].from <= to; i++ {
		if s := stretches[i]; !found || s.to-s.from > worst.to-worst.from {
			worst, found = s, true
		}
	}
	return worst, found
}

// availability is the unavailability found in a history.
type availability struct {
	worstProduce, worstRead *Unavailability
	faults                  []FaultAvailability
}

// measureAvailability computes produce and read unavailability per
// partition, the worst of each, and the worst during each fault.
func measureAvailability(h *history) availability {
	produceTries := byPartition(h.attempts, len(h.parts), func(a *attempt) (uint32, try) {
		return a.part, try{a.start, a.end, a.outcome == OK}
	})
	readTries := byPartition(h.polls, len(h.parts), func(p *poll) (uint32, try) {
		return p.part, try{p.start, p.end, p.ok}
	})
	var end int64 // the end of the history: the last time recorded
	for _, a := range h.attempts {
		end = max(end, a.end)
	}
	for _, p := range h.polls {
		end = max(end, p.end)
	}
	produce := make([][]stretch, len(h.parts))
	reads := make([][]stretch, len(h.parts))
	var av availability
	for part := range h.parts {
		produce[part] = unavailability(produceTries[part])
		reads[part] = unavailability(readTries[part])
		av.worstProduce = h.worse(av.worstProduce, uint32(part), produce[part], math.MinInt64, math.MaxInt64)
		av.worstRead = h.worse(av.worstRead, uint32(part), reads[part], math.MinInt64, math.MaxInt64)
	}

	for _, f := range h.faults {
		from, to := int64(f.Start.Sub(h.origin)), end
		if !f.End.IsZero() {
			to = int64(f.End.Sub(h.origin))
		}
		var worstProduce, worstRead *Unavailability
		for part := range h.parts {
			worstProduce = h.worse(worstProduce, uint32(part), produce[part], from, to)
			worstRead = h.worse(worstRead, uint32(part), reads[part], from, to)
		}
		fa := FaultAvailability{Fault: f}
		if worstProduce != nil {
			fa.MaxUnavailableMs = worstProduce.Ms
		}
		if worstRead != nil {
			fa.MaxReadUnavailableMs = worstRead.Ms
		}
		av.faults = append(av.faults, fa)
	}
	return av
}

// byPartition returns the tries of entries grouped by partition id.
func byPartition[T any](entries []T, partitions int, tryOf func(*T) (uint32, try)) [][]try {
	counts := make([]int, partitions)
	for i := range entries {
		part, _ := tryOf(&entries[i])
		counts[part]++
	}
	all := make([]try, len(entries))
	groups := make([][]try, partitions)
	n := 0
	for part, count := range counts {
		groups[part] = all[n : n : n+count]
		n += count
	}
	for i := range entries {
		part, t := tryOf(&entries[i])
		groups[part] = append(groups[part], t)
	}
	return groups
}

// worse returns the worse of worst and the worst stretch of part that
// overlaps [from, to].
func (h *history) worse(worst *Unavailability, part uint32, stretches []stretch, from, to int64) *Unavailability {
	s, ok := worstOverlapping(stretches, from, to)
	if !ok {
		return worst
	}
	ms := time.Duration(s.to - s.from).Milliseconds()
	if worst != nil && worst.Ms >= ms {
		return worst
	}
	p := h.parts[part]
	return &Unavailability{
		Topic:     h.strs[p.topic],
		Partition: p.partition,
		From:      h.origin.Add(time.Duration(s.from)),
		To:        h.origin.Add(time.Duration(s.to)),
		Ms:        ms,
		Recovered: s.recovered,
	}
}
