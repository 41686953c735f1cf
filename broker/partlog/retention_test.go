package partlog_test

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"
	"time"

	"github.com/strata-log/strata/broker/partlog"
	"github.com/strata-log/strata/broker/partlog/retention"
	"github.com/strata-log/strata/broker/partlog/tierpass"
	"github.com/strata-log/strata/internal/testwait"
	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/tiering/objstore/memstore"
)

// TestEnforceRetention: size then time retention remove closed segments
// from the front in one CAS, move the log start, delete the ledgers and
// their indexes, never the open segment; fetches below the start are out
// of range, at the start they read; a new owner sees the same log.
func TestEnforceRetention(t *testing.T) {
	f := partlog.NewFixture(t)
	cfg := f.Config(1)
	cfg.SegmentAge = time.Minute
	l := f.Open(cfg)
	for range 6 {
		partlog.AppendN(t, l, 3) // 9 records a segment
		partlog.RollByAge(t, f, l)
	}
	partlog.AppendN(t, l, 1) // the open segment holds 3 records
	before := l.Describe().Segments
	if len(before) != 7 {
		t.Fatalf("%d segments, want 6 closed and the open one", len(before))
	}
	closedBytes := before[0].Bytes

	// Size: keep at least 3 closed segments' bytes.
	l.SetPolicy(partlog.Policy{Delete: true, RetentionMs: -1, RetentionBytes: 3 * closedBytes, MaxTimestampAheadMs: -1})
	cut, err := retention.Enforce(partlog.Ctx(t), l)
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
	stored, _, err := partlog.ReadPartitionLog(partlog.Ctx(t), f.Store, "orders", 3)
	if err != nil || stored.LogStartOffset != start || stored.Segments[0].LedgerId != before[3].LedgerId {
		t.Fatalf("stored log: start %d, first ledger %d, %v", stored.GetLogStartOffset(), stored.GetSegments()[0].GetLedgerId(), err)
	}
	for _, s := range before[:3] {
		if _, _, err := f.Cluster.Env().Meta.Get(partlog.Ctx(t), s.LedgerId); !errors.Is(err, ledger.ErrNoSuchLedger) {
			t.Errorf("ledger %d of a deleted segment: %v", s.LedgerId, err)
		}
		if _, err := partlog.ReadIndex(partlog.Ctx(t), f.Store, s.LedgerId); !errors.Is(err, partlog.ErrNotFound) {
			t.Errorf("index of deleted ledger %d: %v", s.LedgerId, err)
		}
	}
	var oor *partlog.OutOfRangeError
	if _, err := l.Fetch(partlog.Ctx(t), start-1, 1000, 0); !errors.As(err, &oor) || oor.Start != start {
		t.Fatalf("fetch below the log start: %v", err)
	}
	if recs := partlog.FetchAll(t, l, start); len(recs) == 0 || recs[0].Offset != start {
		t.Fatalf("fetch from the log start: %d records", len(recs))
	}
	if off, _, err := l.ListOffset(partlog.Ctx(t), -2); err != nil || off != start {
		t.Fatalf("earliest = %d, %v; want %d", off, err, start)
	}

	// Time: every record is far older than an hour (appendN stamps them
	// near 1970); all closed segments go, the open one stays.
	l.SetPolicy(partlog.Policy{Delete: true, RetentionMs: time.Hour.Milliseconds(), RetentionBytes: -1, MaxTimestampAheadMs: -1})
	if cut, err = retention.Enforce(partlog.Ctx(t), l); err != nil || cut.Pieces != 3 || cut.Reason != "time" {
		t.Fatalf("cut %+v, %v; want the 3 remaining closed segments by time", cut, err)
	}
	open := before[6]
	if got := l.LogStartOffset(); got != open.FirstOffset {
		t.Fatalf("log start %d, want the open segment's first offset %d", got, open.FirstOffset)
	}
	if recs := partlog.FetchAll(t, l, open.FirstOffset); len(recs) != 3 {
		t.Fatalf("the open segment holds %d records, want 3", len(recs))
	}
	if cut, err = retention.Enforce(partlog.Ctx(t), l); err != nil || cut.Pieces != 0 {
		t.Fatalf("again: cut %+v, %v; want nothing", cut, err)
	}

	// A new owner sees the same start and reads the same records.
	if err := l.Close(partlog.Ctx(t)); err != nil {
		t.Fatal(err)
	}
	l2 := f.Open(f.Config(2))
	if got := l2.LogStartOffset(); got != open.FirstOffset {
		t.Fatalf("new owner's log start %d, want %d", got, open.FirstOffset)
	}
	if recs := partlog.FetchAll(t, l2, open.FirstOffset); len(recs) != 3 {
		t.Fatalf("new owner reads %d records, want 3", len(recs))
	}
}

// TestRetentionRoundOnAnIdleLog: the owner's round (RetentionRound) cuts
// an idle partition's closed segments while the log has no goroutine of
// its own (run ended with the roll), and a round on a closed log does
// nothing.
func TestRetentionRoundOnAnIdleLog(t *testing.T) {
	f := partlog.NewFixture(t)
	cfg := f.Config(1)
	cfg.SegmentAge = time.Minute
	cfg.Policy = partlog.Policy{Delete: true, RetentionMs: time.Hour.Milliseconds(), RetentionBytes: -1, MaxTimestampAheadMs: -1}
	l := f.Open(cfg)
	partlog.AppendN(t, l, 2)
	partlog.RollByAge(t, f, l)
	testwait.Until(t, partlog.WaitTimeout, "run to end once no segment is open", func() bool { return !l.IsRunning() })
	f.Clock.Advance(2 * time.Hour)
	retention.Round(l)
	if got := l.LogStartOffset(); got != 6 {
		t.Fatalf("log start %d after the round, want 6", got)
	}
	if l.LastRetention().IsZero() {
		t.Fatal("LastRetention not set")
	}
	if err := l.Close(partlog.Ctx(t)); err != nil {
		t.Fatal(err)
	}
	last := l.LastRetention()
	f.Clock.Advance(time.Hour)
	retention.Round(l)
	if l.LastRetention() != last {
		t.Fatal("a round ran on a closed log")
	}
}

func TestAppendRefusesFarFutureTimestamps(t *testing.T) {
	f := partlog.NewFixture(t)
	cfg := f.Config(1)
	cfg.Policy = partlog.Policy{RetentionMs: -1, RetentionBytes: -1, MaxTimestampAheadMs: 1000}
	l := f.Open(cfg)
	now := f.Clock.Now().UnixMilli()
	if _, err := l.Append(partlog.Ctx(t), partlog.Batch(t, now+2000, "ahead"), partlog.AcksQuorum); !errors.Is(err, partlog.ErrInvalidTimestamp) {
		t.Fatalf("a record 2 s ahead with a 1 s bound: %v", err)
	}
	partlog.MustAppend(t, l, partlog.Batch(t, now+500, "close enough"), partlog.AcksQuorum)
	l.SetPolicy(partlog.KeepEverything)
	partlog.MustAppend(t, l, partlog.Batch(t, now+time.Hour.Milliseconds()*24*365, "no bound"), partlog.AcksQuorum)
	if hw := l.HighWatermark(); hw != 2 {
		t.Fatalf("high watermark %d, want 2 (the refused batch took no offset)", hw)
	}
}

// message.timestamp.after.max.ms holds for a batch with the LogAppendTime
// attribute too: no broker stamps its time into it, so its MaxTimestamp
// is the producer's, and a far-future one pinned time retention of
// everything after it.
func TestLogAppendTimeBatchCannotForgeRetention(t *testing.T) {
	f := partlog.NewFixture(t)
	cfg := f.Config(1)
	cfg.SegmentAge = time.Minute
	cfg.Policy = partlog.Policy{Delete: true, RetentionMs: 60_000, RetentionBytes: -1, MaxTimestampAheadMs: 1000, LocalRetentionMs: -1}
	l := f.Open(cfg)
	far := f.Clock.Now().UnixMilli() + 100*365*24*3600*1000
	for _, logAppendTime := range []bool{false, true} {
		b := partlog.Batch(t, far, "forged")
		if logAppendTime {
			b[22] |= 0x08 // attributes, low byte: timestamp type LogAppendTime
			binary.BigEndian.PutUint32(b[17:21], crc32.Checksum(b[21:], crc32.MakeTable(crc32.Castagnoli)))
		}
		if _, err := l.Append(partlog.Ctx(t), b, partlog.AcksQuorum); !errors.Is(err, partlog.ErrInvalidTimestamp) {
			t.Fatalf("a batch %s ahead (LogAppendTime %v): %v, want %v", time.Duration(far-f.Clock.Now().UnixMilli())*time.Millisecond, logAppendTime, err, partlog.ErrInvalidTimestamp)
		}
	}
}

// An object whose records a compaction pass all removed keeps its
// inputs' newest timestamp (in its end batch): time retention counts from
// its records' time, not from the pass, which every pass moved forward.
func TestCompactedEmptyObjectKeepsItsRecordsTime(t *testing.T) {
	f := partlog.NewFixture(t)
	store := memstore.New(memstore.Options{})
	l := tieredCompactionLog(t, f, 1, store, true)
	var m keyedModel
	m.appendKeyed(t, f, l, -1, 0, "a", "1", "b", "1")
	partlog.RollByAge(t, f, l)
	m.appendKeyed(t, f, l, -1, 0, "a", "2", "b", "2")
	partlog.RollByAge(t, f, l)
	m.appendKeyed(t, f, l, -1, 0, "c", "1")
	partlog.RollByAge(t, f, l)
	if err := tierpass.Run(partlog.Ctx(t), l, false); err != nil {
		t.Fatal(err)
	}
	f.Clock.Advance(2 * time.Hour)
	if res := compactNow(t, l, 1<<20); !res.Ran {
		t.Fatalf("no pass: %+v", res)
	}
	if head := l.Describe().Tiered[0]; head.MaxTimestampMs < 0 || head.MaxTimestampMs > f.Clock.Now().Add(-time.Hour).UnixMilli() {
		t.Fatalf("the head object after the pass: max timestamp %d, its records are 2 h old (now %d)", head.MaxTimestampMs, f.Clock.Now().UnixMilli())
	}
	pol := tieredCompactPolicy()
	pol.Delete, pol.RetentionMs = true, time.Hour.Milliseconds()
	l.SetPolicy(pol)
	cut, err := retention.Enforce(partlog.Ctx(t), l)
	if err != nil || cut.Pieces == 0 {
		t.Fatalf("retention.ms 1h over records 2h old: %+v, %v", cut, err)
	}
}

// TestDeleteBefore: Kafka's DeleteRecords moves the log start like
// retention, whatever the policy: closed segments wholly below go (ledgers
// deleted), a segment holding the new start stays, fetches below it are
// out of range; an offset below the start changes nothing, one past the
// high watermark is refused, -1 is the high watermark; a new owner sees
// the same start.
func TestDeleteBefore(t *testing.T) {
	f := partlog.NewFixture(t)
	cfg := f.Config(1)
	cfg.SegmentAge = time.Minute
	l := f.Open(cfg)
	for range 3 {
		partlog.AppendN(t, l, 3)
		partlog.RollByAge(t, f, l)
	}
	partlog.AppendN(t, l, 1)
	before := l.Describe().Segments
	// Within the second segment: the first goes, the second stays.
	target := before[1].FirstOffset + 2
	start, err := retention.DeleteBefore(partlog.Ctx(t), l, target)
	if err != nil || start != target || l.LogStartOffset() != target {
		t.Fatalf("DeleteBefore(%d) = %d, %v; log start %d", target, start, err, l.LogStartOffset())
	}
	if _, _, err := f.Cluster.Env().Meta.Get(partlog.Ctx(t), before[0].LedgerId); !errors.Is(err, ledger.ErrNoSuchLedger) {
		t.Errorf("ledger %d wholly below the new start: %v", before[0].LedgerId, err)
	}
	if got := l.Describe().Segments[0].LedgerId; got != before[1].LedgerId {
		t.Errorf("first segment is ledger %d, want %d (it holds the new start)", got, before[1].LedgerId)
	}
	var oor *partlog.OutOfRangeError
	if _, err := l.Fetch(partlog.Ctx(t), target-1, 1000, 0); !errors.As(err, &oor) {
		t.Fatalf("fetch below the new start: %v", err)
	}
	if recs := partlog.FetchAll(t, l, target); len(recs) == 0 || recs[0].Offset != target {
		t.Fatalf("fetch from the new start: %d records", len(recs))
	}
	if got, err := retention.DeleteBefore(partlog.Ctx(t), l, target-1); err != nil || got != target {
		t.Fatalf("an offset below the start: %d, %v; want %d and no change", got, err, target)
	}
	hw := l.HighWatermark()
	if _, err := retention.DeleteBefore(partlog.Ctx(t), l, hw+1); !errors.As(err, &oor) {
		t.Fatalf("past the high watermark: %v, want out of range", err)
	}
	if got, err := retention.DeleteBefore(partlog.Ctx(t), l, -1); err != nil || got != hw {
		t.Fatalf("DeleteBefore(-1) = %d, %v; want the high watermark %d", got, err, hw)
	}
	stored, _, err := partlog.ReadPartitionLog(partlog.Ctx(t), f.Store, "orders", 3)
	if err != nil || stored.LogStartOffset != hw {
		t.Fatalf("stored log start %d, %v; want %d", stored.GetLogStartOffset(), err, hw)
	}
}
