package partlog

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"
	"time"

	"github.com/strata-log/strata/internal/testwait"
	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/tiering/objstore/memstore"
)

func TestRetentionCut(t *testing.T) {
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
		policy    Policy
		want      RetentionCut
	}{
		{"no delete policy", segs, nil, 0, Policy{RetentionMs: 0, RetentionBytes: 0}, RetentionCut{}},
		{"keep everything", segs, nil, 0, KeepEverything, RetentionCut{}},
		{"older than 250ms", segs, nil, 0, Policy{Delete: true, RetentionMs: 250, RetentionBytes: -1}, RetentionCut{2, 200, 20, "time"}},
		{"exactly at the horizon stays", segs, nil, 0, Policy{Delete: true, RetentionMs: 300, RetentionBytes: -1}, RetentionCut{1, 100, 10, "time"}},
		{"time never takes the open segment", segs, nil, 0, Policy{Delete: true, RetentionMs: 0, RetentionBytes: -1}, RetentionCut{4, 400, 40, "time"}},
		{"size keeps at least retention.bytes", segs, nil, 50, Policy{Delete: true, RetentionMs: -1, RetentionBytes: 250}, RetentionCut{2, 200, 20, "size"}},
		{"size stops before going under", segs, nil, 50, Policy{Delete: true, RetentionMs: -1, RetentionBytes: 260}, RetentionCut{1, 100, 10, "size"}},
		{"size counts the open segment", segs, nil, 300, Policy{Delete: true, RetentionMs: -1, RetentionBytes: 300}, RetentionCut{4, 400, 40, "size"}},
		{"size 0 takes every closed one", segs, nil, 0, Policy{Delete: true, RetentionMs: -1, RetentionBytes: 0}, RetentionCut{4, 400, 40, "size"}},
		{"both", segs, nil, 0, Policy{Delete: true, RetentionMs: 350, RetentionBytes: 150}, RetentionCut{2, 200, 20, "time+size"}},
		{"prefix only: a young segment stops time retention", []*brokerpb.LedgerSegment{
			seg(0, 9, 100, now, true), seg(10, 19, 100, now-1000, true), seg(20, 19, 0, -1, false),
		}, nil, 0, Policy{Delete: true, RetentionMs: 10, RetentionBytes: -1}, RetentionCut{}},
		{"an empty closed segment ages from its creation", []*brokerpb.LedgerSegment{
			seg(0, -1, 0, -1, true), seg(0, 9, 100, now, true), seg(10, 9, 0, -1, false),
		}, nil, 0, Policy{Delete: true, RetentionMs: 1000, RetentionBytes: -1}, RetentionCut{1, 0, 0, "time"}},
		// Two objects cover offsets 0-19; the ledgers of 0-19 are local
		// copies (not counted twice), 20-39 are only on the bookies.
		{"tiered objects first, local copies not counted", segs, []*brokerpb.TieredSegment{
			{BaseOffset: 0, LastOffset: 9, SizeBytes: 100, DataBytes: 100, MaxTimestampMs: now - 400},
			{BaseOffset: 10, LastOffset: 19, SizeBytes: 100, DataBytes: 100, MaxTimestampMs: now - 300},
		}, 0, Policy{Delete: true, RetentionMs: -1, RetentionBytes: 250}, RetentionCut{1, 100, 10, "size"}},
		// An object's size includes its index and footer: retention.bytes
		// counts the batches, as a ledger's bytes do (Kafka counts the
		// log, not its indexes). 400 bytes of batches, 320 kept: nothing
		// goes (by object size, 500 - 150 >= 320 took one, leaving 300).
		{"size counts objects' data, not their index", segs, []*brokerpb.TieredSegment{
			{BaseOffset: 0, LastOffset: 9, SizeBytes: 150, DataBytes: 100, MaxTimestampMs: now - 400},
			{BaseOffset: 10, LastOffset: 19, SizeBytes: 150, DataBytes: 100, MaxTimestampMs: now - 300},
		}, 0, Policy{Delete: true, RetentionMs: -1, RetentionBytes: 320}, RetentionCut{}},
		{"time across both tiers", segs, []*brokerpb.TieredSegment{
			{BaseOffset: 0, LastOffset: 9, SizeBytes: 100, DataBytes: 100, MaxTimestampMs: now - 400},
			{BaseOffset: 10, LastOffset: 19, SizeBytes: 100, DataBytes: 100, MaxTimestampMs: now - 300},
		}, 0, Policy{Delete: true, RetentionMs: 150, RetentionBytes: -1}, RetentionCut{3, 300, 30, "time"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pl := &brokerpb.PartitionLog{Segments: tc.segs, Tiered: tc.tiered}
			if got := retentionCut(logPieces(pl, tc.openBytes), now, tc.policy); got != tc.want {
				t.Fatalf("retentionCut = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestEnforceRetention: size then time retention remove closed segments
// from the front in one CAS, move the log start, delete the ledgers and
// their indexes, never the open segment; fetches below the start are out
// of range, at the start they read; a new owner sees the same log.
func TestEnforceRetention(t *testing.T) {
	f := newFixture(t)
	cfg := f.config(1)
	cfg.SegmentAge = time.Minute
	l := f.open(cfg)
	for range 6 {
		appendN(t, l, 3) // 9 records a segment
		rollByAge(t, f, l)
	}
	appendN(t, l, 1) // the open segment holds 3 records
	before := l.Describe().Segments
	if len(before) != 7 {
		t.Fatalf("%d segments, want 6 closed and the open one", len(before))
	}
	closedBytes := before[0].Bytes

	// Size: keep at least 3 closed segments' bytes.
	l.SetPolicy(Policy{Delete: true, RetentionMs: -1, RetentionBytes: 3 * closedBytes, MaxTimestampAheadMs: -1})
	cut, err := l.EnforceRetention(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if cut.Pieces != 3 || cut.Reason != "size" {
		t.Fatalf("cut %+v, want 3 segments by size", cut)
	}
	start := before[3].FirstOffset
	if got := l.LogStartOffset(); got != start {
		t.Fatalf("log start %d, want %d", got, start)
	}
	stored, _, err := ReadPartitionLog(testCtx(t), f.store, "orders", 3)
	if err != nil || stored.LogStartOffset != start || stored.Segments[0].LedgerId != before[3].LedgerId {
		t.Fatalf("stored log: start %d, first ledger %d, %v", stored.GetLogStartOffset(), stored.GetSegments()[0].GetLedgerId(), err)
	}
	for _, s := range before[:3] {
		if _, _, err := f.cluster.Env().Meta.Get(testCtx(t), s.LedgerId); !errors.Is(err, ledger.ErrNoSuchLedger) {
			t.Errorf("ledger %d of a deleted segment: %v", s.LedgerId, err)
		}
		if _, err := readIndex(testCtx(t), f.store, s.LedgerId); !errors.Is(err, ErrNotFound) {
			t.Errorf("index of deleted ledger %d: %v", s.LedgerId, err)
		}
	}
	var oor *OutOfRangeError
	if _, err := l.Fetch(testCtx(t), start-1, 1000, 0); !errors.As(err, &oor) || oor.Start != start {
		t.Fatalf("fetch below the log start: %v", err)
	}
	if recs := fetchAll(t, l, start); len(recs) == 0 || recs[0].Offset != start {
		t.Fatalf("fetch from the log start: %d records", len(recs))
	}
	if off, _, err := l.ListOffset(testCtx(t), -2); err != nil || off != start {
		t.Fatalf("earliest = %d, %v; want %d", off, err, start)
	}

	// Time: every record is far older than an hour (appendN stamps them
	// near 1970); all closed segments go, the open one stays.
	l.SetPolicy(Policy{Delete: true, RetentionMs: time.Hour.Milliseconds(), RetentionBytes: -1, MaxTimestampAheadMs: -1})
	if cut, err = l.EnforceRetention(testCtx(t)); err != nil || cut.Pieces != 3 || cut.Reason != "time" {
		t.Fatalf("cut %+v, %v; want the 3 remaining closed segments by time", cut, err)
	}
	open := before[6]
	if got := l.LogStartOffset(); got != open.FirstOffset {
		t.Fatalf("log start %d, want the open segment's first offset %d", got, open.FirstOffset)
	}
	if recs := fetchAll(t, l, open.FirstOffset); len(recs) != 3 {
		t.Fatalf("the open segment holds %d records, want 3", len(recs))
	}
	if cut, err = l.EnforceRetention(testCtx(t)); err != nil || cut.Pieces != 0 {
		t.Fatalf("again: cut %+v, %v; want nothing", cut, err)
	}

	// A new owner sees the same start and reads the same records.
	if err := l.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	l2 := f.open(f.config(2))
	if got := l2.LogStartOffset(); got != open.FirstOffset {
		t.Fatalf("new owner's log start %d, want %d", got, open.FirstOffset)
	}
	if recs := fetchAll(t, l2, open.FirstOffset); len(recs) != 3 {
		t.Fatalf("new owner reads %d records, want 3", len(recs))
	}
}

// TestRetentionRoundOnAnIdleLog: the owner's round (RetentionRound) cuts
// an idle partition's closed segments while the log has no goroutine of
// its own (run ended with the roll), and a round on a closed log does
// nothing.
func TestRetentionRoundOnAnIdleLog(t *testing.T) {
	f := newFixture(t)
	cfg := f.config(1)
	cfg.SegmentAge = time.Minute
	cfg.Policy = Policy{Delete: true, RetentionMs: time.Hour.Milliseconds(), RetentionBytes: -1, MaxTimestampAheadMs: -1}
	l := f.open(cfg)
	appendN(t, l, 2)
	rollByAge(t, f, l)
	testwait.Until(t, testTimeout, "run to end once no segment is open", func() bool { return !l.isRunning() })
	f.clock.Advance(2 * time.Hour)
	l.RetentionRound()
	if got := l.LogStartOffset(); got != 6 {
		t.Fatalf("log start %d after the round, want 6", got)
	}
	if l.LastRetention().IsZero() {
		t.Fatal("LastRetention not set")
	}
	if err := l.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	last := l.LastRetention()
	f.clock.Advance(time.Hour)
	l.RetentionRound()
	if l.LastRetention() != last {
		t.Fatal("a round ran on a closed log")
	}
}

func TestAppendRefusesFarFutureTimestamps(t *testing.T) {
	f := newFixture(t)
	cfg := f.config(1)
	cfg.Policy = Policy{RetentionMs: -1, RetentionBytes: -1, MaxTimestampAheadMs: 1000}
	l := f.open(cfg)
	now := f.clock.Now().UnixMilli()
	if _, err := l.Append(testCtx(t), batch(t, now+2000, "ahead"), AcksQuorum); !errors.Is(err, ErrInvalidTimestamp) {
		t.Fatalf("a record 2 s ahead with a 1 s bound: %v", err)
	}
	mustAppend(t, l, batch(t, now+500, "close enough"), AcksQuorum)
	l.SetPolicy(KeepEverything)
	mustAppend(t, l, batch(t, now+time.Hour.Milliseconds()*24*365, "no bound"), AcksQuorum)
	if hw := l.HighWatermark(); hw != 2 {
		t.Fatalf("high watermark %d, want 2 (the refused batch took no offset)", hw)
	}
}

// rollByAge makes the open segment older than its SegmentAge and rolls
// it: it is sealed, and no segment is open until the next append (P8).
func rollByAge(t *testing.T, f *fixture, l *Log) {
	t.Helper()
	f.clock.Advance(l.Limits().SegmentAge + time.Second)
	before := len(l.Describe().Segments)
	rollNow(t, l)
	segs := l.Describe().Segments
	if got := len(segs); got != before || got == 0 || !segs[got-1].Closed {
		t.Fatalf("segments after a roll: %v, want the %d there were with the last sealed", segs, before)
	}
}

// message.timestamp.after.max.ms holds for a batch with the LogAppendTime
// attribute too: no broker stamps its time into it, so its MaxTimestamp
// is the producer's, and a far-future one pinned time retention of
// everything after it.
func TestLogAppendTimeBatchCannotForgeRetention(t *testing.T) {
	f := newFixture(t)
	cfg := f.config(1)
	cfg.SegmentAge = time.Minute
	cfg.Policy = Policy{Delete: true, RetentionMs: 60_000, RetentionBytes: -1, MaxTimestampAheadMs: 1000, LocalRetentionMs: -1}
	l := f.open(cfg)
	far := f.clock.Now().UnixMilli() + 100*365*24*3600*1000
	for _, logAppendTime := range []bool{false, true} {
		b := batch(t, far, "forged")
		if logAppendTime {
			b[22] |= 0x08 // attributes, low byte: timestamp type LogAppendTime
			binary.BigEndian.PutUint32(b[17:21], crc32.Checksum(b[21:], crc32.MakeTable(crc32.Castagnoli)))
		}
		if _, err := l.Append(testCtx(t), b, AcksQuorum); !errors.Is(err, ErrInvalidTimestamp) {
			t.Fatalf("a batch %s ahead (LogAppendTime %v): %v, want %v", time.Duration(far-f.clock.Now().UnixMilli())*time.Millisecond, logAppendTime, err, ErrInvalidTimestamp)
		}
	}
}

// An object whose records a compaction pass all removed keeps its
// inputs' newest timestamp (in its end batch): time retention counts from
// its records' time, not from the pass, which every pass moved forward.
func TestCompactedEmptyObjectKeepsItsRecordsTime(t *testing.T) {
	f := newFixture(t)
	store := memstore.New(memstore.Options{})
	l := tieredCompactionLog(t, f, 1, store, true)
	var m keyedModel
	m.appendKeyed(t, f, l, -1, 0, "a", "1", "b", "1")
	rollByAge(t, f, l)
	m.appendKeyed(t, f, l, -1, 0, "a", "2", "b", "2")
	rollByAge(t, f, l)
	m.appendKeyed(t, f, l, -1, 0, "c", "1")
	rollByAge(t, f, l)
	if err := l.TierOnce(testCtx(t), false); err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(2 * time.Hour)
	if res := compactNow(t, l, 1<<20); !res.Ran {
		t.Fatalf("no pass: %+v", res)
	}
	if head := l.Describe().Tiered[0]; head.MaxTimestampMs < 0 || head.MaxTimestampMs > f.clock.Now().Add(-time.Hour).UnixMilli() {
		t.Fatalf("the head object after the pass: max timestamp %d, its records are 2 h old (now %d)", head.MaxTimestampMs, f.clock.Now().UnixMilli())
	}
	pol := tieredCompactPolicy()
	pol.Delete, pol.RetentionMs = true, time.Hour.Milliseconds()
	l.SetPolicy(pol)
	cut, err := l.EnforceRetention(testCtx(t))
	if err != nil || cut.Pieces == 0 {
		t.Fatalf("retention.ms 1h over records 2h old: %+v, %v", cut, err)
	}
}
