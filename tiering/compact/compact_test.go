package compact

import (
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/strata-log/strata/recordbatch"
)

func TestOffsetMapFillsAtLoadLimit(t *testing.T) {
	m := NewOffsetMap(100 * slotBytes)
	if m.Capacity() != 80 {
		t.Fatalf("capacity %d, want 80", m.Capacity())
	}
	for i := range 80 {
		if !m.Put(fmt.Appendf(nil, "k%d", i), int64(i)) {
			t.Fatalf("Put %d: full at %d keys", i, m.Len())
		}
	}
	if m.Put([]byte("new"), 1000) {
		t.Fatal("Put of a new key past the load limit succeeded")
	}
	if !m.Put([]byte("k3"), 500) { // an existing key still updates
		t.Fatal("Put of an existing key refused when full")
	}
	if off, ok := m.Get([]byte("k3")); !ok || off != 500 {
		t.Fatalf("Get k3 = %d %v", off, ok)
	}
	m.Put([]byte("k3"), 7) // an older offset never wins
	for i := range 80 {
		want := int64(i)
		if i == 3 {
			want = 500
		}
		if off, ok := m.Get(fmt.Appendf(nil, "k%d", i)); !ok || off != want {
			t.Fatalf("Get k%d = %d %v, want %d", i, off, ok, want)
		}
	}
	if _, ok := m.Get([]byte("new")); ok {
		t.Fatal("refused key is present")
	}
	m.Reset()
	if _, ok := m.Get([]byte("k0")); ok || m.Len() != 0 || m.Room() != 80 {
		t.Fatal("Reset left keys")
	}
	if !m.Put([]byte("zero"), 0) { // offset 0 is storable
		t.Fatal("Put offset 0")
	}
	if off, ok := m.Get([]byte("zero")); !ok || off != 0 {
		t.Fatalf("Get zero = %d %v", off, ok)
	}
	if KeysPerMiB != 34952 {
		t.Fatalf("KeysPerMiB = %d; doc.go quotes 34,952", KeysPerMiB)
	}
}

func TestPlanMapTooSmall(t *testing.T) {
	b, err := recordbatch.Encode(&recordbatch.Batch{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1, Records: []recordbatch.Record{
		{Key: []byte("a")}, {Key: []byte("b")}, {Key: []byte("c")}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Plan(NewOffsetMap(0), [][]byte{b}, 10, Options{}); !errors.Is(err, ErrMapTooSmall) {
		t.Fatalf("Plan = %v, want ErrMapTooSmall", err)
	}
	b2 := append([]byte(nil), b...)
	recordbatch.SetBaseOffset(b2, 1) // overlaps b
	if _, err := Plan(NewOffsetMap(1<<10), [][]byte{b, b2}, 10, Options{}); !errors.Is(err, ErrOrder) {
		t.Fatalf("Plan = %v, want ErrOrder", err)
	}
	// A batch straddling endOffset is not indexed.
	res, err := Plan(NewOffsetMap(1<<10), [][]byte{b}, 2, Options{})
	if err != nil || res.IndexedEnd != 0 || res.Batches != 0 {
		t.Fatalf("Plan = %+v, %v", res, err)
	}
}

// TestDeleteHorizonEncoding pins the KIP-534 layout (C3): bit 6 set,
// baseTimestamp = now + delete.retention.ms, record timestamps still
// decode to their original values through negative deltas.
func TestDeleteHorizonEncoding(t *testing.T) {
	b, err := recordbatch.Encode(&recordbatch.Batch{ProducerID: 9, ProducerEpoch: 1, BaseSequence: 40,
		Compression: recordbatch.CompressionLZ4, Records: []recordbatch.Record{
			{Key: []byte("a"), Value: []byte("old"), TimestampMs: 100},
			{Key: []byte("a"), TimestampMs: 150}, // tombstone, latest
			{Key: []byte("b"), Value: []byte("v"), TimestampMs: 120},
		}})
	if err != nil {
		t.Fatal(err)
	}
	recordbatch.SetBaseOffset(b, 1000)
	m := NewOffsetMap(1 << 10)
	if _, err := Plan(m, [][]byte{b}, 1003, Options{}); err != nil {
		t.Fatal(err)
	}
	out, st, err := Rewrite(b, m, Options{NowMs: 5000, DeleteRetentionMs: 86_400_000})
	if err != nil {
		t.Fatal(err)
	}
	h, recs, err := recordbatch.Decode(out)
	if err != nil {
		t.Fatal(err)
	}
	if h.Attributes&0x40 == 0 || h.BaseTimestamp != 5000+86_400_000 || h.MaxTimestamp != 150 ||
		h.BaseOffset != 1000 || h.LastOffsetDelta != 2 || h.Compression() != recordbatch.CompressionLZ4 || h.RecordCount != 2 {
		t.Fatalf("header %+v", h)
	}
	if len(recs) != 2 || recs[0].Offset != 1001 || recs[0].TimestampMs != 150 || recs[1].Offset != 1002 || recs[1].TimestampMs != 120 {
		t.Fatalf("records %+v", recs)
	}
	if st.HorizonsStamped != 1 || st.RecordsRemoved != 1 || st.RecordsKept != 2 || st.TombstoneHorizonMs != 5000+86_400_000 {
		t.Fatalf("stats %+v", st)
	}
	// Unchanged before the horizon: the same bytes come back, and the
	// stats still name the horizon the kept tombstone carries.
	again, st, err := Rewrite(out, m, Options{NowMs: 5000 + 86_400_000 - 1, DeleteRetentionMs: 86_400_000})
	if err != nil || &again[0] != &out[0] || st.TombstoneHorizonMs != 5000+86_400_000 {
		t.Fatalf("second rewrite changed an unchanged batch (%v) or lost its horizon (%+v)", err, st)
	}
	// On the horizon the tombstone goes and so does the horizon bit.
	last, st, err := Rewrite(out, m, Options{NowMs: 5000 + 86_400_000, DeleteRetentionMs: 86_400_000})
	if err != nil {
		t.Fatal(err)
	}
	h, recs, err = recordbatch.Decode(last)
	if err != nil || h.Attributes&0x40 != 0 || h.BaseTimestamp != 120 || len(recs) != 1 || recs[0].Offset != 1002 || st.TombstonesDropped != 1 ||
		st.TombstoneHorizonMs != 0 {
		t.Fatalf("after horizon: %+v %+v %v %+v", h, recs, err, st)
	}
}

// seg is a closed segment's summary for the Decide tables; open marks it
// open.
func seg(first, last, bytes, maxTs int64) SegmentSummary {
	return SegmentSummary{FirstOffset: first, LastOffset: last, Bytes: bytes, MaxTimestampMs: maxTs}
}

func open(s SegmentSummary) SegmentSummary { s.Open = true; return s }

func TestDecide(t *testing.T) {
	def := DefaultPolicy()
	lag := Policy{MinCompactionLagMs: 100, MaxCompactionLagMs: math.MaxInt64, MinCleanableDirtyRatio: 0.5}
	maxLag := Policy{MinCompactionLagMs: 0, MaxCompactionLagMs: 500, MinCleanableDirtyRatio: 0.9}
	tests := []struct {
		name    string
		segs    []SegmentSummary
		cleaned int64
		now     int64
		p       Policy
		want    Decision
	}{
		{"empty log", nil, 0, 1000, def, Decision{Reason: ReasonNothingCleanable}},
		{"only the open segment", []SegmentSummary{open(seg(0, 9, 100, 0))}, 0, 1000, def,
			Decision{Reason: ReasonNothingCleanable, CleanableEnd: 0}},
		{"all dirty, open excluded", []SegmentSummary{seg(0, 9, 100, 10), seg(10, 19, 100, 20), open(seg(20, 29, 100, 30))}, 0, 1000, def,
			Decision{Compact: true, Reason: ReasonDirtyRatio, Cleanable: 2, CleanableEnd: 20, DirtyBytes: 200, DirtyRatio: 1}},
		{"ratio exactly at the threshold", []SegmentSummary{seg(0, 9, 100, 10), seg(10, 19, 100, 20), open(seg(20, 29, 5, 30))}, 10, 1000, def,
			Decision{Compact: true, Reason: ReasonDirtyRatio, Cleanable: 2, CleanableEnd: 20, CleanBytes: 100, DirtyBytes: 100, DirtyRatio: 0.5}},
		{"below ratio", []SegmentSummary{seg(0, 9, 300, 10), seg(10, 19, 100, 20), open(seg(20, 29, 5, 30))}, 10, 1000, def,
			Decision{Reason: ReasonBelowRatio, Cleanable: 2, CleanableEnd: 20, CleanBytes: 300, DirtyBytes: 100, DirtyRatio: 0.25}},
		{"all clean", []SegmentSummary{seg(0, 9, 300, 10), open(seg(10, 19, 5, 30))}, 10, 1000, def,
			Decision{Reason: ReasonNothingCleanable, Cleanable: 1, CleanableEnd: 10, CleanBytes: 300}},
		{"segment cut by cleaned offset counts dirty", []SegmentSummary{seg(0, 9, 100, 10), open(seg(10, 19, 5, 30))}, 5, 1000, def,
			Decision{Compact: true, Reason: ReasonDirtyRatio, Cleanable: 1, CleanableEnd: 10, DirtyBytes: 100, DirtyRatio: 1}},
		{"min lag holds back young segments and everything after", []SegmentSummary{seg(0, 9, 100, 850), seg(10, 19, 100, 950), seg(20, 29, 100, 800), open(seg(30, 39, 5, 999))}, 0, 1000, lag,
			Decision{Compact: true, Reason: ReasonDirtyRatio, Cleanable: 1, CleanableEnd: 10, DirtyBytes: 100, DirtyRatio: 1}},
		{"min lag boundary: exactly old enough", []SegmentSummary{seg(0, 9, 100, 900), open(seg(10, 19, 5, 999))}, 0, 1000, lag,
			Decision{Compact: true, Reason: ReasonDirtyRatio, Cleanable: 1, CleanableEnd: 10, DirtyBytes: 100, DirtyRatio: 1}},
		{"min lag: nothing old enough", []SegmentSummary{seg(0, 9, 100, 901), open(seg(10, 19, 5, 999))}, 0, 1000, lag,
			Decision{Reason: ReasonNothingCleanable, CleanableEnd: 0}},
		{"max lag forces below ratio", []SegmentSummary{seg(0, 9, 900, 10), seg(10, 19, 100, 400), open(seg(20, 29, 5, 999))}, 10, 1000, maxLag,
			Decision{Compact: true, Reason: ReasonMaxLag, Cleanable: 2, CleanableEnd: 20, CleanBytes: 900, DirtyBytes: 100, DirtyRatio: 0.1}},
		{"max lag not yet", []SegmentSummary{seg(0, 9, 900, 10), seg(10, 19, 100, 500), open(seg(20, 29, 5, 999))}, 10, 1000, maxLag,
			Decision{Reason: ReasonBelowRatio, Cleanable: 2, CleanableEnd: 20, CleanBytes: 900, DirtyBytes: 100, DirtyRatio: 0.1}},
		{"max lag ignores the open segment", []SegmentSummary{seg(0, 9, 900, 10), open(seg(10, 19, 100, 0))}, 10, 1000, maxLag,
			Decision{Reason: ReasonNothingCleanable, Cleanable: 1, CleanableEnd: 10, CleanBytes: 900}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.p.Validate(); err != nil {
				t.Fatal(err)
			}
			if got := Decide(tc.segs, tc.cleaned, 0, tc.now, tc.p); got != tc.want {
				t.Fatalf("Decide:\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// TestDecideTombstonesExpired: a partition with nothing dirty is still
// compacted once a tombstone the last pass kept reaches its delete
// horizon (Kafka's cleaner does the same); before it, or with no horizon
// stored, it is not. Without this a compacted partition that gets no new
// writes keeps its tombstones forever.
func TestDecideTombstonesExpired(t *testing.T) {
	def := DefaultPolicy()
	lag := Policy{MinCompactionLagMs: 100, MaxCompactionLagMs: math.MaxInt64, MinCleanableDirtyRatio: 0.5}
	clean := []SegmentSummary{seg(0, 9, 300, 10), seg(10, 19, 100, 20), open(seg(20, 29, 5, 30))}
	cleanAll := Decision{Compact: true, Reason: ReasonTombstonesExpired, Cleanable: 2, CleanableEnd: 20, CleanBytes: 400}
	tests := []struct {
		name    string
		segs    []SegmentSummary
		cleaned int64
		horizon int64
		now     int64
		p       Policy
		want    Decision
	}{
		{"nothing dirty, horizon passed", clean, 20, 900, 1000, def, cleanAll},
		{"nothing dirty, horizon exactly now", clean, 20, 1000, 1000, def, cleanAll},
		{"nothing dirty, horizon ahead", clean, 20, 1001, 1000, def,
			Decision{Reason: ReasonNothingCleanable, Cleanable: 2, CleanableEnd: 20, CleanBytes: 400}},
		{"nothing dirty, no horizon", clean, 20, 0, 1000, def,
			Decision{Reason: ReasonNothingCleanable, Cleanable: 2, CleanableEnd: 20, CleanBytes: 400}},
		{"below ratio, horizon passed: the pass also cleans the dirty part",
			[]SegmentSummary{seg(0, 9, 300, 10), seg(10, 19, 100, 20), open(seg(20, 29, 5, 30))}, 10, 900, 1000, def,
			Decision{Compact: true, Reason: ReasonTombstonesExpired, Cleanable: 2, CleanableEnd: 20, CleanBytes: 300, DirtyBytes: 100, DirtyRatio: 0.25}},
		{"dirty ratio reached comes first",
			[]SegmentSummary{seg(0, 9, 100, 10), seg(10, 19, 100, 20), open(seg(20, 29, 5, 30))}, 10, 900, 1000, def,
			Decision{Compact: true, Reason: ReasonDirtyRatio, Cleanable: 2, CleanableEnd: 20, CleanBytes: 100, DirtyBytes: 100, DirtyRatio: 0.5}},
		{"min lag holds back part of the clean section: wait",
			[]SegmentSummary{seg(0, 9, 300, 10), seg(10, 19, 100, 950), open(seg(20, 29, 5, 999))}, 20, 900, 1000, lag,
			Decision{Reason: ReasonNothingCleanable, Cleanable: 1, CleanableEnd: 10, CleanBytes: 300}},
		{"only the open segment", []SegmentSummary{open(seg(0, 9, 100, 0))}, 0, 900, 1000, def,
			Decision{Reason: ReasonNothingCleanable}},
		{"empty log", nil, 0, 900, 1000, def, Decision{Reason: ReasonNothingCleanable}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.p.Validate(); err != nil {
				t.Fatal(err)
			}
			if got := Decide(tc.segs, tc.cleaned, tc.horizon, tc.now, tc.p); got != tc.want {
				t.Fatalf("Decide:\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
	if s := ReasonTombstonesExpired.String(); s != "tombstones-expired" {
		t.Fatalf("ReasonTombstonesExpired.String() = %q", s)
	}
}

func TestPolicyValidate(t *testing.T) {
	for _, p := range []Policy{
		{MinCompactionLagMs: -1, MinCleanableDirtyRatio: 0.5},
		{MinCleanableDirtyRatio: 1.5},
		{MinCleanableDirtyRatio: math.NaN()},
		{MinCompactionLagMs: 100, MaxCompactionLagMs: 50, MinCleanableDirtyRatio: 0.5},
	} {
		if p.Validate() == nil {
			t.Errorf("Validate(%v) = nil", p)
		}
	}
	if DirtyRatio(1, 0) != 0 || DirtyRatio(1, 4) != 0.25 {
		t.Fatal("DirtyRatio")
	}
}

// TestEndBatch: the end batch of a compacted object is a valid batch at
// exactly that offset, with no record and no producer.
func TestEndBatch(t *testing.T) {
	b := EndBatch(41, 1234)
	h, err := recordbatch.Verify(b)
	if err != nil {
		t.Fatal(err)
	}
	if h.BaseOffset != 41 || h.LastOffset() != 41 || h.RecordCount != 0 || h.ProducerID != -1 || h.MaxTimestamp != 1234 || h.Magic != 2 {
		t.Fatalf("end batch header %+v", h)
	}
}

// Reset empties the map whether few keys were stored (cleared slot by
// slot) or many (cleared whole), round after round.
func TestOffsetMapResetClearsWhatWasUsed(t *testing.T) {
	m := NewOffsetMap(1 << 20) // 43,690 slots; 682 listed before clearing all
	for round, keys := range []int{10, 5000, 600, 700, 0, 30000, 1} {
		for i := range keys {
			if !m.Put(fmt.Appendf(nil, "r%d-k%d", round, i), int64(i)) {
				t.Fatalf("round %d: Put %d refused", round, i)
			}
		}
		if m.Len() != keys {
			t.Fatalf("round %d: %d keys, want %d", round, m.Len(), keys)
		}
		m.Reset()
		for i, s := range m.slots {
			if s != (slot{}) {
				t.Fatalf("round %d (%d keys): slot %d still holds %+v after Reset", round, keys, i, s)
			}
		}
		if m.Len() != 0 || m.Room() != m.Capacity() {
			t.Fatalf("round %d: Len %d, Room %d after Reset", round, m.Len(), m.Room())
		}
	}
}

// TestStatsEarliestHorizon: adding stats keeps the earliest kept
// tombstone horizon, 0 meaning none on either side.
func TestStatsEarliestHorizon(t *testing.T) {
	for _, tc := range []struct{ a, b, want int64 }{{0, 0, 0}, {0, 7, 7}, {7, 0, 7}, {9, 7, 7}, {7, 9, 7}} {
		s := Stats{TombstoneHorizonMs: tc.a}
		s.Add(Stats{TombstoneHorizonMs: tc.b})
		if s.TombstoneHorizonMs != tc.want {
			t.Errorf("%d + %d = %d, want %d", tc.a, tc.b, s.TombstoneHorizonMs, tc.want)
		}
	}
}
