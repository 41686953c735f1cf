package partlog

import (
	"testing"

	"github.com/strata-log/strata/proto/brokerpb"
)

func epochs(pairs ...int64) []*brokerpb.LeaderEpoch {
	var out []*brokerpb.LeaderEpoch
	for i := 0; i < len(pairs); i += 2 {
		out = append(out, &brokerpb.LeaderEpoch{Epoch: pairs[i], StartOffset: pairs[i+1]})
	}
	return out
}

func flat(h []*brokerpb.LeaderEpoch) []int64 {
	var out []int64
	for _, e := range h {
		out = append(out, e.Epoch, e.StartOffset)
	}
	return out
}

// P10: the history a takeover writes.
func TestWithLeaderEpoch(t *testing.T) {
	for _, tc := range []struct {
		name                   string
		history                []*brokerpb.LeaderEpoch
		epoch, start, logStart int64
		want                   []int64
	}{
		{"first takeover", nil, 1, 0, 0, []int64{1, 0}},
		{"appends", epochs(1, 0), 2, 10, 0, []int64{1, 0, 2, 10}},
		{"an epoch that wrote nothing is replaced", epochs(1, 0, 2, 10), 3, 10, 0, []int64{1, 0, 3, 10}},
		{"below the log start dropped, one kept", epochs(1, 0, 2, 10, 3, 20), 4, 30, 25, []int64{3, 20, 4, 30}},
		{"the entry holding the log start stays", epochs(1, 0, 2, 10, 3, 20), 4, 30, 15, []int64{2, 10, 3, 20, 4, 30}},
		{"an upgraded log starts its history", nil, 7, 500, 100, []int64{7, 500}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := flat(tc.history)
			got := flat(withLeaderEpoch(tc.history, tc.epoch, tc.start, tc.logStart))
			if !equalInts(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			if !equalInts(flat(tc.history), before) {
				t.Fatalf("history modified")
			}
		})
	}
	var h []*brokerpb.LeaderEpoch
	for e := int64(1); e <= maxLeaderEpochs+10; e++ {
		h = withLeaderEpoch(h, e, e*10, 0)
	}
	if len(h) != maxLeaderEpochs || h[len(h)-1].Epoch != maxLeaderEpochs+10 {
		t.Fatalf("bounded history: %d entries, last %v", len(h), h[len(h)-1])
	}
}

// P10: OffsetForLeaderEpoch's answers never pass what the epoch wrote.
func TestEpochEnd(t *testing.T) {
	h := epochs(3, 100, 5, 200, 8, 350)
	for _, tc := range []struct {
		requested, wantEpoch, wantEnd int64
	}{
		{8, 8, 400},   // current: the high watermark
		{9, 8, 400},   // above: current and hw, never -1
		{5, 5, 350},   // ends where 8 starts
		{6, 5, 350},   // never owned: the largest below
		{3, 3, 200},   // first
		{1, 1, 100},   // older than the history: its data lies below the first start
		{-1, -1, 100}, // unknown epoch in a batch header
	} {
		e, end := epochEnd(h, tc.requested, 400)
		if e != tc.wantEpoch || end != tc.wantEnd {
			t.Errorf("epochEnd(%d) = %d, %d; want %d, %d", tc.requested, e, end, tc.wantEpoch, tc.wantEnd)
		}
	}
	if e, end := epochEnd(nil, 4, 9); e != 4 || end != 9 {
		t.Errorf("empty history: %d %d", e, end)
	}
}

func equalInts(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
