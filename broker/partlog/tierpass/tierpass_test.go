package tierpass

import (
	"fmt"
	"testing"
	"time"

	"github.com/strata-log/strata/proto/brokerpb"
)

func TestUploadRun(t *testing.T) {
	const now = 10_000_000
	seg := func(first, last, bytes int64, closed bool) *brokerpb.LedgerSegment {
		return &brokerpb.LedgerSegment{FirstOffset: first, LastOffset: last, Bytes: bytes, Closed: closed, CreatedAtMs: now - 1000}
	}
	segs := []*brokerpb.LedgerSegment{seg(0, 9, 100, true), seg(10, 19, 100, true), seg(20, 29, 100, true), seg(30, 29, 0, false)}
	ids := func(run []*brokerpb.LedgerSegment) []int64 {
		var out []int64
		for _, s := range run {
			out = append(out, s.FirstOffset)
		}
		return out
	}
	for _, tc := range []struct {
		name     string
		tiered   []*brokerpb.TieredSegment
		size     int64
		maxDelay time.Duration
		want     []int64
	}{
		{"cut at the target size", nil, 150, time.Hour, []int64{0, 10}},
		{"not enough and not old enough", nil, 1000, time.Hour, nil},
		{"not enough but old enough: all closed", nil, 1000, time.Second, []int64{0, 10, 20}},
		{"starts where the objects end", []*brokerpb.TieredSegment{{BaseOffset: 0, LastOffset: 9}}, 150, time.Hour, []int64{10, 20}},
		{"never the open ledger", []*brokerpb.TieredSegment{{BaseOffset: 0, LastOffset: 29}}, 1, time.Second, nil},
		{"a hole is never tiered", []*brokerpb.TieredSegment{{BaseOffset: 0, LastOffset: 4}}, 1, time.Second, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pl := &brokerpb.PartitionLog{Segments: segs, Tiered: tc.tiered}
			if got := ids(uploadRun(pl, now, tc.size, tc.maxDelay)); fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("uploadRun = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestLocalDeletable(t *testing.T) {
	segs := []*brokerpb.LedgerSegment{
		{FirstOffset: 0, LastOffset: 9, MaxTimestampMs: 100, Closed: true},
		{FirstOffset: 10, LastOffset: 19, MaxTimestampMs: 200, Closed: true},
		{FirstOffset: 20, LastOffset: 29, MaxTimestampMs: 300, Closed: true},
		{FirstOffset: 30, LastOffset: 29, Closed: false},
	}
	tiered := []*brokerpb.TieredSegment{{BaseOffset: 0, LastOffset: 19}}
	for _, tc := range []struct {
		name    string
		tiered  []*brokerpb.TieredSegment
		now     int64
		localMs int64
		want    int
	}{
		{"nothing tiered", nil, 10_000, 0, 0},
		{"covered and old", tiered, 10_000, 0, 2},
		{"kept until retention", tiered, 10_000, -1, 0},
		{"covered but young", tiered, 250, 100, 1},
		{"only what an object covers", []*brokerpb.TieredSegment{{BaseOffset: 0, LastOffset: 29}}, 10_000, 0, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pl := &brokerpb.PartitionLog{Segments: segs, Tiered: tc.tiered}
			if got := localDeletable(pl, tc.now, tc.localMs); got != tc.want {
				t.Fatalf("localDeletable = %d, want %d", got, tc.want)
			}
		})
	}
}
