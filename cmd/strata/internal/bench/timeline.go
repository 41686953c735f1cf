package bench

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"time"
)

// A run's timeline (Run.EnableTimeline) counts its publish->ack latencies
// by the timelineStep in which they were observed: how many, the largest,
// and how many took timelineSlow or more. Next to the nodes' flight
// traces of the same seconds it shows which moments made a window's p99.
const (
	timelineStep = 10 * time.Millisecond
	timelineSlow = 20 * time.Millisecond
)

type timelineBin struct {
	acks, slow int64
	max        time.Duration
}

// EnableTimeline makes the run keep a timeline from now on.
func (r *Run) EnableTimeline() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.timeline == nil {
		r.timeline = map[int64]*timelineBin{}
	}
}

// addTimelineLocked counts a publish->ack latency d observed at at.
// REQUIRES: r.mu held, r.timeline not nil.
func (r *Run) addTimelineLocked(at time.Time, d time.Duration) {
	k := at.UnixNano() / int64(timelineStep)
	b := r.timeline[k]
	if b == nil {
		b = &timelineBin{}
		r.timeline[k] = b
	}
	b.acks++
	b.max = max(b.max, d)
	if d >= timelineSlow {
		b.slow++
	}
}

// WriteTimeline writes the timeline as tab-separated lines, one per step
// with acknowledgements: its start (UTC, to the millisecond), how many,
// the largest in ms and how many took timelineSlow or more.
func (r *Run) WriteTimeline(w io.Writer) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	keys := make([]int64, 0, len(r.timeline))
	for k := range r.timeline {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "# publish->ack by %v of acknowledgement: start\tacks\tmax_ms\tacks_%s_or_more\n", timelineStep, timelineSlow)
	for _, k := range keys {
		b := r.timeline[k]
		fmt.Fprintf(bw, "%s\t%d\t%.2f\t%d\n", time.Unix(0, k*int64(timelineStep)).UTC().Format("15:04:05.000"),
			b.acks, float64(b.max)/1e6, b.slow)
	}
	return bw.Flush()
}
