package retention

import (
	"testing"

	"github.com/strata-log/strata/broker/partlog"
	"github.com/strata-log/strata/proto/brokerpb"
)

func TestCut(t *testing.T) {
	const now = 1_000_000
	seg := func(first, last, bytes, maxTs int64, closed bool) *brokerpb.LedgerSegment {
		return &brokerpb.LedgerSegment{FirstOffset: first, LastOffset: last, Bytes: bytes, MaxTimestampMs: maxTs,
			CreatedAtMs: 10, Closed: closed}
	}
	// Four closed segments of 100 bytes with newest records at 100, 200,
	// 300, 400 ms, then the open one with openBytes.
	segs := []*brokerpb.LedgerSegment{
		seg(0, 9, 100, now-400, true), seg(10, 19, 100, now-300, true),
		seg(20, 29, 100, now-200, true), seg(30, 39, 100, now-100, true),
		seg(40, 39, 0, -1, false),
	}
	for _, tc := range []struct {
		name      string
		segs      []*brokerpb.LedgerSegment
		tiered    []*brokerpb.TieredSegment
		openBytes int64
		policy    partlog.Policy
		want      Cut
	}{
		{"no delete policy", segs, nil, 0, partlog.Policy{RetentionMs: 0, RetentionBytes: 0}, Cut{}},
		{"keep everything", segs, nil, 0, partlog.KeepEverything, Cut{}},
		{"older than 250ms", segs, nil, 0, partlog.Policy{Delete: true, RetentionMs: 250, RetentionBytes: -1}, Cut{2, 200, 20, "time"}},
		{"exactly at the horizon stays", segs, nil, 0, partlog.Policy{Delete: true, RetentionMs: 300, RetentionBytes: -1}, Cut{1, 100, 10, "time"}},
		{"time never takes the open segment", segs, nil, 0, partlog.Policy{Delete: true, RetentionMs: 0, RetentionBytes: -1}, Cut{4, 400, 40, "time"}},
		{"size keeps at least retention.bytes", segs, nil, 50, partlog.Policy{Delete: true, RetentionMs: -1, RetentionBytes: 250}, Cut{2, 200, 20, "size"}},
		{"size stops before going under", segs, nil, 50, partlog.Policy{Delete: true, RetentionMs: -1, RetentionBytes: 260}, Cut{1, 100, 10, "size"}},
		{"size counts the open segment", segs, nil, 300, partlog.Policy{Delete: true, RetentionMs: -1, RetentionBytes: 300}, Cut{4, 400, 40, "size"}},
		{"size 0 takes every closed one", segs, nil, 0, partlog.Policy{Delete: true, RetentionMs: -1, RetentionBytes: 0}, Cut{4, 400, 40, "size"}},
		{"both", segs, nil, 0, partlog.Policy{Delete: true, RetentionMs: 350, RetentionBytes: 150}, Cut{2, 200, 20, "time+size"}},
		{"prefix only: a young segment stops time retention", []*brokerpb.LedgerSegment{
			seg(0, 9, 100, now, true), seg(10, 19, 100, now-1000, true), seg(20, 19, 0, -1, false),
		}, nil, 0, partlog.Policy{Delete: true, RetentionMs: 10, RetentionBytes: -1}, Cut{}},
		{"an empty closed segment ages from its creation", []*brokerpb.LedgerSegment{
			seg(0, -1, 0, -1, true), seg(0, 9, 100, now, true), seg(10, 9, 0, -1, false),
		}, nil, 0, partlog.Policy{Delete: true, RetentionMs: 1000, RetentionBytes: -1}, Cut{1, 0, 0, "time"}},
		// Two objects cover offsets 0-19; the ledgers of 0-19 are local
		// copies (not counted twice), 20-39 are only on the bookies.
		{"tiered objects first, local copies not counted", segs, []*brokerpb.TieredSegment{
			{BaseOffset: 0, LastOffset: 9, SizeBytes: 100, DataBytes: 100, MaxTimestampMs: now - 400},
			{BaseOffset: 10, LastOffset: 19, SizeBytes: 100, DataBytes: 100, MaxTimestampMs: now - 300},
		}, 0, partlog.Policy{Delete: true, RetentionMs: -1, RetentionBytes: 250}, Cut{1, 100, 10, "size"}},
		// An object's size includes its index and footer: retention.bytes
		// counts the batches, as a ledger's bytes do (Kafka counts the
		// log, not its indexes). 400 bytes of batches, 320 kept: nothing
		// goes (by object size, 500 - 150 >= 320 took one, leaving 300).
		{"size counts objects' data, not their index", segs, []*brokerpb.TieredSegment{
			{BaseOffset: 0, LastOffset: 9, SizeBytes: 150, DataBytes: 100, MaxTimestampMs: now - 400},
			{BaseOffset: 10, LastOffset: 19, SizeBytes: 150, DataBytes: 100, MaxTimestampMs: now - 300},
		}, 0, partlog.Policy{Delete: true, RetentionMs: -1, RetentionBytes: 320}, Cut{}},
		{"time across both tiers", segs, []*brokerpb.TieredSegment{
			{BaseOffset: 0, LastOffset: 9, SizeBytes: 100, DataBytes: 100, MaxTimestampMs: now - 400},
			{BaseOffset: 10, LastOffset: 19, SizeBytes: 100, DataBytes: 100, MaxTimestampMs: now - 300},
		}, 0, partlog.Policy{Delete: true, RetentionMs: 150, RetentionBytes: -1}, Cut{3, 300, 30, "time"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pl := &brokerpb.PartitionLog{Segments: tc.segs, Tiered: tc.tiered}
			if got := cut(logPieces(pl, tc.openBytes), now, tc.policy); got != tc.want {
				t.Fatalf("retentionCut = %+v, want %+v", got, tc.want)
			}
		})
	}
}
