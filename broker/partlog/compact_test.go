package partlog_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/strata-log/strata/broker/partlog"
	"github.com/strata-log/strata/broker/partlog/compaction"
	"github.com/strata-log/strata/broker/partlog/retention"
	"github.com/strata-log/strata/broker/partlog/tierpass"
	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/recordbatch"
	"github.com/strata-log/strata/tiering/compact"
	"github.com/strata-log/strata/tiering/objstore"
	"github.com/strata-log/strata/tiering/objstore/memstore"
	"github.com/strata-log/strata/tiering/segfile"
)

// compactConfig is f.config(epoch) for a compacted topic whose segments
// roll after a minute (rollByAge).
func compactConfig(f *partlog.Fixture, epoch int64) partlog.Config {
	cfg := f.Config(epoch)
	cfg.SegmentAge = time.Minute
	cfg.Policy = compactPolicy
	return cfg
}

// compactPolicy compacts whatever is closed (dirty ratio 0, no lag) and
// keeps tombstones an hour.
var compactPolicy = partlog.Policy{RetentionMs: -1, RetentionBytes: -1, MaxTimestampAheadMs: -1, LocalRetentionMs: -1,
	Compact: true, Compaction: compact.Policy{MinCleanableDirtyRatio: 0}, DeleteRetentionMs: time.Hour.Milliseconds()}

// keyedModel is the reference: every record appended, by offset.
type keyedModel struct {
	recs []recordbatch.Record
}

// appendKeyed appends one batch of keyed records (value "" = tombstone)
// and records them in the model.
func (m *keyedModel) appendKeyed(t *testing.T, f *partlog.Fixture, l *partlog.Log, pid int64, seq int32, kv ...string) partlog.AppendResult {
	t.Helper()
	ts := f.Clock.Now().UnixMilli()
	var recs []recordbatch.Record
	for i := 0; i < len(kv); i += 2 {
		r := recordbatch.Record{TimestampMs: ts, Key: []byte(kv[i])}
		if kv[i+1] != "" {
			r.Value = []byte(kv[i+1])
		}
		recs = append(recs, r)
	}
	epoch := int16(-1)
	if pid >= 0 {
		epoch = 0
	} else {
		seq = -1
	}
	b, err := recordbatch.Encode(&recordbatch.Batch{ProducerID: pid, ProducerEpoch: epoch, BaseSequence: seq, Records: recs})
	if err != nil {
		t.Fatal(err)
	}
	res := partlog.MustAppend(t, l, b, partlog.AcksQuorum)
	for i := range recs {
		recs[i].Offset = res.BaseOffset + int64(i)
		m.recs = append(m.recs, recs[i])
	}
	return res
}

// want is what a compacted log below cleaned must hold: the latest record
// of each key (tombstones only when keepTombstones), and every record at
// or after cleaned.
func (m *keyedModel) want(cleaned int64, keepTombstones bool) []string {
	latest := map[string]int64{}
	for _, r := range m.recs {
		if r.Offset < cleaned {
			latest[string(r.Key)] = r.Offset
		}
	}
	var out []string
	for _, r := range m.recs {
		if r.Offset < cleaned && (latest[string(r.Key)] != r.Offset || (r.Value == nil && !keepTombstones)) {
			continue
		}
		out = append(out, partlog.DescribeRecord(r))
	}
	return out
}

// checkFetchEveryOffset: a fetch at any offset in [start, hw) returns a
// batch ending at or after it, whose first record at or after it is the
// first the model keeps there (P7: a fetch at a removed offset returns
// the next batch).
func checkFetchEveryOffset(t *testing.T, l *partlog.Log, want []recordbatch.Record) {
	t.Helper()
	for off := l.LogStartOffset(); off < l.HighWatermark(); off++ {
		res, err := l.Fetch(partlog.Ctx(t), off, 1, 0)
		if err != nil {
			t.Fatalf("Fetch(%d): %v", off, err)
		}
		batches, err := recordbatch.Split(res.Records())
		if err != nil || len(batches) == 0 {
			t.Fatalf("Fetch(%d): %d batches, %v", off, len(batches), err)
		}
		h, _ := recordbatch.ParseHeader(batches[0])
		if h.LastOffset() < off {
			t.Fatalf("Fetch(%d) returned a batch ending at %d", off, h.LastOffset())
		}
		var first *recordbatch.Record
		for _, r := range partlog.DecodeAll(t, res.Records()) {
			if r.Offset >= off {
				first = &r
				break
			}
		}
		var wantFirst *recordbatch.Record
		for i := range want {
			if want[i].Offset >= off {
				wantFirst = &want[i]
				break
			}
		}
		switch {
		case first != nil && (wantFirst == nil || first.Offset != wantFirst.Offset):
			t.Fatalf("Fetch(%d): first record %v, want %v", off, first, wantFirst)
		case first == nil && wantFirst != nil && wantFirst.Offset <= h.LastOffset():
			// The batch ends at or after off with no record there: the
			// client goes on after it, so nothing kept may be inside.
			t.Fatalf("Fetch(%d): batch [%d, %d] has no record at or after it, but %d is kept", off, h.BaseOffset, h.LastOffset(), wantFirst.Offset)
		}
	}
}

func compactNow(t *testing.T, l *partlog.Log, mapBytes int) compaction.Result {
	t.Helper()
	// The small buffer keeps the first piece or two of a test's log:
	// every pass rewrites some pieces from memory and reads the rest again.
	res, err := compaction.Compact(partlog.Ctx(t), l, compaction.Options{Map: compact.NewOffsetMap(mapBytes), BufferBytes: 1 << 10})
	if err != nil {
		t.Fatalf("Compact: %v", err)
	}
	return res
}

// listedIndexes checks that the store holds an index for exactly the
// closed segments the log lists (outputs of a lost pass and replaced
// inputs are gone) and that every replaced ledger is deleted.
func checkNoLeftovers(t *testing.T, f *partlog.Fixture, l *partlog.Log, replaced []*brokerpb.LedgerSegment) {
	t.Helper()
	listed, listedLedgers := map[string]bool{}, map[uint64]bool{}
	for _, s := range l.Describe().Segments {
		listedLedgers[s.LedgerId] = true
		if s.Closed {
			listed[partlog.IndexKey(s.LedgerId)] = true
		}
	}
	for _, k := range f.Store.Keys(partlog.LedgerIndexPrefix) {
		if !listed[k] {
			t.Errorf("index %s names no listed segment", k)
		}
	}
	for _, s := range replaced {
		if listedLedgers[s.LedgerId] {
			continue
		}
		if _, _, err := f.Cluster.Env().Meta.Get(partlog.Ctx(t), s.LedgerId); !errors.Is(err, ledger.ErrNoSuchLedger) {
			t.Errorf("replaced ledger %d: %v", s.LedgerId, err)
		}
	}
}

// TestCompactPass: random keys, values and tombstones over several
// ledgers and an idempotent producer; a pass keeps exactly the latest
// record per key at its offset (P7), the high watermark and log end do
// not move, a fetch at any offset returns the next kept batch, replaced
// ledgers and indexes are deleted, a second pass after delete.retention.ms
// drops the tombstones, a new owner reads the same log and still answers
// the producer's retried batch with its original offsets (P5).
func TestCompactPass(t *testing.T) {
	f := partlog.NewFixture(t)
	cfg := compactConfig(f, 1)
	cfg.SegmentBytes = 2000 // outputs: several ledgers
	l := f.Open(cfg)
	rng := rand.New(rand.NewPCG(1, 2))
	var m keyedModel
	var seq int32
	var lastIdem partlog.AppendResult
	var lastIdemBatch []byte
	for range 8 {
		for range 6 {
			var kv []string
			for range 1 + rng.IntN(4) {
				k := fmt.Sprintf("k%d", rng.IntN(12))
				v := fmt.Sprintf("v%d", rng.IntN(1000))
				if rng.IntN(6) == 0 {
					v = ""
				}
				kv = append(kv, k, v)
			}
			m.appendKeyed(t, f, l, -1, 0, kv...)
		}
		// The producer always writes the same key: only its last batch
		// survives, the others become empty or go (C5).
		lastIdem = m.appendKeyed(t, f, l, 7, seq, "idem", fmt.Sprintf("s%d", seq))
		lastIdemBatch = m.recs[len(m.recs)-1].Value
		seq++
		partlog.RollByAge(t, f, l)
	}
	m.appendKeyed(t, f, l, -1, 0, "open", "tail") // the open ledger is never compacted
	hw := l.HighWatermark()
	before := l.Describe().Segments
	res := compactNow(t, l, 1<<20)
	if !res.Ran || res.InputLedgers != 8 || res.CleanedOffset != before[7].LastOffset+1 {
		t.Fatalf("pass %+v, want 8 ledgers cleaned up to %d", res, before[7].LastOffset+1)
	}
	if l.HighWatermark() != hw {
		t.Fatalf("hw %d after compaction, want %d", l.HighWatermark(), hw)
	}
	got := partlog.DescribeAll(partlog.FetchAll(t, l, 0))
	want := m.want(res.CleanedOffset, true)
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("after compaction:\n got %v\nwant %v", got, want)
	}
	if res.Stats.RecordsRemoved == 0 || res.Stats.BytesOut >= res.Stats.BytesIn {
		t.Fatalf("stats %+v: nothing removed", res.Stats)
	}
	// The pieces the pass kept in memory had superseded batches: dropped
	// from their headers (compact.Survivors), and the log above still
	// matches the model.
	if res.Stats.BatchesDroppedUnread == 0 {
		t.Fatalf("stats %+v: no batch dropped unread", res.Stats)
	}
	checkFetchEveryOffset(t, l, partlog.FetchAll(t, l, 0))
	checkNoLeftovers(t, f, l, before[:8])
	stored, _, err := partlog.ReadPartitionLog(partlog.Ctx(t), f.Store, "orders", 3)
	if err != nil || stored.CleanedOffset != res.CleanedOffset || stored.LastCompactionMs != f.Clock.Now().UnixMilli() {
		t.Fatalf("stored cleaned offset %d, last compaction %d, %v", stored.GetCleanedOffset(), stored.GetLastCompactionMs(), err)
	}
	if again := compactNow(t, l, 1<<20); again.Ran {
		t.Fatalf("a second pass with nothing dirty ran: %+v", again)
	}

	// Past delete.retention.ms, a pass over new data drops the tombstones.
	f.Clock.Advance(2 * time.Hour)
	m.appendKeyed(t, f, l, -1, 0, "k0", "late")
	partlog.RollByAge(t, f, l)
	res = compactNow(t, l, 1<<20)
	if !res.Ran {
		t.Fatalf("second pass did not run: %+v", res)
	}
	got = partlog.DescribeAll(partlog.FetchAll(t, l, 0))
	want = m.want(res.CleanedOffset, false)
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("after the horizon:\n got %v\nwant %v", got, want)
	}

	// A new owner: same records, same ends, producer state intact.
	if err := l.Close(partlog.Ctx(t)); err != nil {
		t.Fatal(err)
	}
	cfg2 := f.Config(2)
	cfg2.Policy = compactPolicy
	l2 := f.Open(cfg2)
	if d := l2.Describe(); d.CleanedOffset != res.CleanedOffset || d.LastCompactionMs == 0 {
		t.Fatalf("new owner: cleaned offset %d, last compaction %d; want %d", d.CleanedOffset, d.LastCompactionMs, res.CleanedOffset)
	}
	if again := compactNow(t, l2, 1<<20); again.Ran {
		t.Fatalf("the new owner compacted clean ledgers again: %+v", again)
	}
	if got2 := partlog.DescribeAll(partlog.FetchAll(t, l2, 0)); strings.Join(got2, " ") != strings.Join(got, " ") {
		t.Fatalf("new owner reads\n %v\nwant %v", got2, got)
	}
	retry, err := recordbatch.Encode(&recordbatch.Batch{ProducerID: 7, ProducerEpoch: 0, BaseSequence: seq - 1,
		Records: []recordbatch.Record{{TimestampMs: 1, Key: []byte("idem"), Value: lastIdemBatch}}})
	if err != nil {
		t.Fatal(err)
	}
	r := partlog.MustAppend(t, l2, retry, partlog.AcksQuorum)
	if !r.Duplicate || r.BaseOffset != lastIdem.BaseOffset {
		t.Fatalf("retried batch after compaction and takeover: %+v, want a duplicate at %d", r, lastIdem.BaseOffset)
	}
	next, err := recordbatch.Encode(&recordbatch.Batch{ProducerID: 7, ProducerEpoch: 0, BaseSequence: seq,
		Records: []recordbatch.Record{{TimestampMs: f.Clock.Now().UnixMilli(), Key: []byte("idem"), Value: []byte("next")}}})
	if err != nil {
		t.Fatal(err)
	}
	if r := partlog.MustAppend(t, l2, next, partlog.AcksQuorum); r.Duplicate {
		t.Fatalf("the next sequence was taken for a duplicate: %+v", r)
	}
}

// TestCompactKeepsTheLastBatch: when every record of the compacted range
// is superseded by records in the open ledger, the range's last batch
// stays (empty) so that a fetch anywhere below the high watermark finds
// a batch (P7) — a consumer at a removed offset is never stuck.
func TestCompactKeepsTheLastBatch(t *testing.T) {
	f := partlog.NewFixture(t)
	cfg := compactConfig(f, 1)
	l := f.Open(cfg)
	var m keyedModel
	for range 3 {
		m.appendKeyed(t, f, l, -1, 0, "a", "1", "b", "2")
	}
	partlog.RollByAge(t, f, l)
	for range 2 {
		m.appendKeyed(t, f, l, -1, 0, "a", "3", "b", "4")
	}
	partlog.RollByAge(t, f, l)
	res := compactNow(t, l, 1<<20)
	if !res.Ran {
		t.Fatalf("no pass: %+v", res)
	}
	// Only offsets 8 and 9 hold records now; 0-7 are holes.
	recs := partlog.FetchAll(t, l, 0)
	if got := partlog.DescribeAll(recs); strings.Join(got, " ") != "8:a=3 9:b=4" {
		t.Fatalf("records %v", got)
	}
	checkFetchEveryOffset(t, l, recs)
	// Every record of the first ledger is superseded: its batches are
	// gone but the pass's last batch (in the second) is kept.
	segs := l.Describe().Segments
	if len(segs) != 1 || segs[0].FirstOffset != 0 || segs[0].LastOffset != 9 || !segs[0].Closed {
		t.Fatalf("segments %v", segs)
	}
}

// TestCompactMapTooSmallContinues: a map that holds one ledger's keys
// compacts ledger by ledger (C8 over passes), each pass aligned to a
// ledger boundary, and ends where one big pass ends.
func TestCompactMapTooSmallContinues(t *testing.T) {
	f := partlog.NewFixture(t)
	cfg := compactConfig(f, 1)
	l := f.Open(cfg)
	var m keyedModel
	for s := range 4 {
		for i := range 3 {
			m.appendKeyed(t, f, l, -1, 0, fmt.Sprintf("s%dk%d", s, i), "x", "shared", fmt.Sprint(s))
		}
		partlog.RollByAge(t, f, l)
	}
	// About 7 keys fit: one ledger (4 keys), not two (8).
	small := 9 * 24
	passes := 0
	for {
		res := compactNow(t, l, small)
		if !res.Ran {
			break
		}
		passes++
		if passes > 10 {
			t.Fatal("passes do not converge")
		}
	}
	if passes < 2 {
		t.Fatalf("%d passes with a small map, want several", passes)
	}
	got := partlog.DescribeAll(partlog.FetchAll(t, l, 0))
	want := m.want(l.Describe().CleanedOffset, true)
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("after %d passes:\n got %v\nwant %v", passes, got, want)
	}
}

// TestCompactLostRace: retention removes an input while the pass writes
// its outputs: the CAS re-validates, nothing is swapped in, the outputs
// are deleted, the log stays healthy; a lost CAS (another owner) fails the
// log (P3) and also deletes the outputs.
func TestCompactLostRace(t *testing.T) {
	f := partlog.NewFixture(t)
	cfg := compactConfig(f, 1)
	l := f.Open(cfg)
	var m keyedModel
	for range 3 {
		m.appendKeyed(t, f, l, -1, 0, "a", "1", "b", "2")
		partlog.RollByAge(t, f, l)
	}
	before := l.Describe().Segments

	// Retention runs between the outputs' index write and the CAS.
	fired := false
	f.Store.SetBeforePut(func(key string) error {
		if fired || !strings.HasPrefix(key, partlog.LedgerIndexPrefix) {
			return nil
		}
		fired = true
		p := compactPolicy
		p.Delete, p.RetentionBytes = true, 0
		l.SetPolicy(p)
		if cut, err := retention.Enforce(partlog.Ctx(t), l); err != nil || cut.Pieces == 0 {
			t.Errorf("retention: %+v, %v", cut, err)
		}
		l.SetPolicy(compactPolicy)
		return nil
	})
	if _, err := compaction.Compact(partlog.Ctx(t), l, compaction.Options{Map: compact.NewOffsetMap(1 << 20)}); !errors.Is(err, compaction.ErrStale) {
		t.Fatalf("Compact racing retention: %v, want compaction.ErrStale", err)
	}
	f.Store.SetBeforePut(nil)
	if l.Err() != nil {
		t.Fatalf("log failed: %v", l.Err())
	}
	checkNoLeftovers(t, f, l, before)

	// Another owner bumps the list while the pass runs.
	for range 2 {
		m.appendKeyed(t, f, l, -1, 0, "a", "3")
		partlog.RollByAge(t, f, l)
	}
	fired = false
	f.Store.SetBeforePut(func(key string) error {
		if fired || !strings.HasPrefix(key, partlog.LedgerIndexPrefix) {
			return nil
		}
		fired = true
		val, v, err := f.Store.Get(partlog.Ctx(t), partlog.PartitionKey("orders", 3))
		if err != nil {
			return err
		}
		_, err = f.Store.Put(partlog.Ctx(t), partlog.PartitionKey("orders", 3), val, v)
		return err
	})
	_, err := compaction.Compact(partlog.Ctx(t), l, compaction.Options{Map: compact.NewOffsetMap(1 << 20)})
	if !errors.Is(err, partlog.ErrConflict) || !errors.Is(l.Err(), partlog.ErrConflict) {
		t.Fatalf("Compact after another owner's write: %v (log: %v), want ErrConflict", err, l.Err())
	}
	f.Store.SetBeforePut(nil)
	stored, _, err := partlog.ReadPartitionLog(partlog.Ctx(t), f.Store, "orders", 3)
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, s := range stored.Segments {
		listed[partlog.IndexKey(s.LedgerId)] = true
	}
	for _, k := range f.Store.Keys(partlog.LedgerIndexPrefix) {
		if !listed[k] {
			t.Errorf("index %s of a lost pass's output was left", k)
		}
	}
}

// BenchmarkCompact: one pass over 8 closed ledgers of about 1 MiB of
// keyed records (1 KiB values, 2,000 keys, so most records are
// superseded), against the in-memory bookies; the figure is MB/s of input
// read, rewritten, written to new ledgers and swapped in.
func BenchmarkCompact(b *testing.B) { benchmarkCompact(b, false) }

// BenchmarkCompactTiered: the same data tiered first (8 objects in the
// in-memory store, no local copies): the pass reads the objects, writes
// and verifies new ones and queues and deletes the old ones.
func BenchmarkCompactTiered(b *testing.B) { benchmarkCompact(b, true) }

func benchmarkCompact(b *testing.B, tiered bool) {
	value := strings.Repeat("v", 1024)
	var inBytes int64
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		f := partlog.NewFixture(b)
		cfg := compactConfig(f, 1)
		cfg.SegmentBytes = 1 << 20
		if tiered {
			store := memstore.New(memstore.Options{})
			cfg.Tier = &partlog.Tier{Store: store, Reader: segfileReader{store}, KeyPrefix: "p/", SegmentBytes: 1, MaxDelay: time.Hour, OrphanGrace: time.Hour}
			cfg.Policy = tieredCompactPolicy()
		}
		l := f.Open(cfg)
		rng := rand.New(rand.NewPCG(1, uint64(i)))
		for range 8 {
			for range 100 {
				recs := make([]recordbatch.Record, 10)
				for j := range recs {
					recs[j] = recordbatch.Record{TimestampMs: f.Clock.Now().UnixMilli(), Key: fmt.Appendf(nil, "key-%d", rng.IntN(2000)), Value: []byte(value)}
				}
				bt, err := recordbatch.Encode(&recordbatch.Batch{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1, Records: recs})
				if err != nil {
					b.Fatal(err)
				}
				partlog.MustAppend(b, l, bt, partlog.AcksQuorum)
			}
			f.Clock.Advance(cfg.SegmentAge + time.Second)
			if err := l.MaybeRoll(partlog.Ctx(b)); err != nil {
				b.Fatal(err)
			}
		}
		if tiered {
			if err := tierpass.Run(partlog.Ctx(b), l, false); err != nil || len(l.Describe().Tiered) != 8 {
				b.Fatalf("tiering: %d objects, %v", len(l.Describe().Tiered), err)
			}
			l.Config().Tier.SegmentBytes = 8 << 20 // one output object
		}
		m := compact.NewOffsetMap(8 << 20)
		b.StartTimer()
		res, err := compaction.Compact(partlog.Ctx(b), l, compaction.Options{Map: m})
		if err != nil || !res.Ran || (tiered && res.InputObjects != 8) {
			b.Fatalf("Compact: %+v, %v", res, err)
		}
		inBytes += res.Stats.BytesIn
	}
	b.SetBytes(inBytes / int64(b.N))
}

// appendRandomLedgers appends ledgers of random keys, values and
// tombstones (and one idempotent producer's batch per ledger), each
// closed by a roll.
func appendRandomLedgers(t *testing.T, f *partlog.Fixture, l *partlog.Log, m *keyedModel, rng *rand.Rand, ledgers int, seq *int32) {
	t.Helper()
	for range ledgers {
		for range 5 {
			var kv []string
			for range 1 + rng.IntN(4) {
				v := fmt.Sprintf("v%d", rng.IntN(1000))
				if rng.IntN(6) == 0 {
					v = ""
				}
				kv = append(kv, fmt.Sprintf("k%d", rng.IntN(12)), v)
			}
			m.appendKeyed(t, f, l, -1, 0, kv...)
		}
		m.appendKeyed(t, f, l, 7, *seq, "idem", fmt.Sprintf("s%d", *seq))
		*seq++
		partlog.RollByAge(t, f, l)
	}
}

// tierAll uploads every closed ledger (one object each) and drops the
// local copies.
func tierAll(t *testing.T, l *partlog.Log) {
	t.Helper()
	if err := tierpass.Run(partlog.Ctx(t), l, false); err != nil {
		t.Fatal(err)
	}
	for _, s := range l.Describe().Segments {
		if s.Closed {
			t.Fatalf("ledger %d (%d-%d) still listed after tiering", s.LedgerId, s.FirstOffset, s.LastOffset)
		}
	}
}

// tieredKeyedLog is a compacted, tiered log (tieredCompactionLog) over a
// memstore, with its model of the keyed records written so far.
type tieredKeyedLog struct {
	f     *partlog.Fixture
	store *memstore.Store
	l     *partlog.Log
	m     keyedModel
	rng   *rand.Rand
	seq   int32
}

// newTieredKeyedLog opens one and writes ledgers random ledgers of keyed
// records (appendRandomLedgers), all tiered.
func newTieredKeyedLog(t *testing.T, seed uint64, ledgers int) *tieredKeyedLog {
	t.Helper()
	k := &tieredKeyedLog{f: partlog.NewFixture(t), store: memstore.New(memstore.Options{}), rng: rand.New(rand.NewPCG(seed, seed+1))}
	k.l = tieredCompactionLog(t, k.f, 1, k.store, true)
	k.appendLedgers(t, ledgers)
	tierAll(t, k.l)
	return k
}

// appendLedgers writes n more random ledgers (not tiered).
func (k *tieredKeyedLog) appendLedgers(t *testing.T, n int) {
	t.Helper()
	appendRandomLedgers(t, k.f, k.l, &k.m, k.rng, n, &k.seq)
}

// TestCompactTieredObjects: a pass over segment objects and the ledgers
// after them keeps exactly the latest record per key at its original
// offset (checked against the reference model), writes the object part as
// new compacted objects covering the same offsets (the tiered end does not
// move) and the ledger part as new ledgers, queues the replaced objects in
// the same CAS and deletes them; after delete.retention.ms the next pass
// drops the tombstones and merges small objects; a new owner reads the
// same log.
func TestCompactTieredObjects(t *testing.T) {
	k := newTieredKeyedLog(t, 3, 6)
	f, store, l, m := k.f, k.store, k.l, &k.m
	k.appendLedgers(t, 3) // on the bookies only
	m.appendKeyed(t, f, l, -1, 0, "open", "tail")
	before := l.Describe()
	hw := l.HighWatermark()
	if len(before.Tiered) != 6 {
		t.Fatalf("%d objects, want 6", len(before.Tiered))
	}

	res := compactNow(t, l, 1<<20)
	if !res.Ran || res.InputObjects != 6 || res.OutputObjects != 6 || res.InputLedgers != 3 || res.CleanedOffset != before.Segments[2].LastOffset+1 {
		t.Fatalf("pass %+v, want 6 objects and 3 ledgers cleaned up to %d", res, before.Segments[2].LastOffset+1)
	}
	after := l.Describe()
	if l.HighWatermark() != hw || partlog.TieredEnd(after) != partlog.TieredEnd(before) || len(after.Garbage) != 0 {
		t.Fatalf("hw %d (was %d), tiered end %d (was %d), garbage %v", l.HighWatermark(), hw, partlog.TieredEnd(after), partlog.TieredEnd(before), after.Garbage)
	}
	for i, o := range after.Tiered {
		if o.BaseOffset != before.Tiered[i].BaseOffset || o.LastOffset != before.Tiered[i].LastOffset || !objectFooter(t, store, o).GetCompacted() {
			t.Fatalf("output %d covers %d-%d, input %d-%d", i, o.BaseOffset, o.LastOffset, before.Tiered[i].BaseOffset, before.Tiered[i].LastOffset)
		}
	}
	if got := storedKeys(t, store); fmt.Sprint(got) != fmt.Sprint(tieredKeys(after)) {
		t.Fatalf("objects in the store %v, listed %v: the replaced ones must be deleted", got, tieredKeys(after))
	}
	got := consumeAll(t, l, 0)
	if want := m.want(res.CleanedOffset, true); strings.Join(partlog.DescribeAll(got), " ") != strings.Join(want, " ") {
		t.Fatalf("after compaction:\n got %v\nwant %v", partlog.DescribeAll(got), want)
	}
	checkFetchEveryOffset(t, l, got)
	checkNoLeftovers(t, f, l, before.Segments)
	if again := compactNow(t, l, 1<<20); again.Ran {
		t.Fatalf("a second pass with nothing dirty ran: %+v", again)
	}

	// Past delete.retention.ms, with outputs up to 1 MiB: one object.
	f.Clock.Advance(2 * time.Hour)
	m.appendKeyed(t, f, l, -1, 0, "k0", "late")
	partlog.RollByAge(t, f, l)
	l.Config().Tier.SegmentBytes = 1 << 20
	res = compactNow(t, l, 1<<20)
	if !res.Ran || res.InputObjects != 6 || res.OutputObjects != 1 {
		t.Fatalf("second pass %+v, want 6 objects merged into 1", res)
	}
	got = consumeAll(t, l, 0)
	if want := m.want(res.CleanedOffset, false); strings.Join(partlog.DescribeAll(got), " ") != strings.Join(want, " ") {
		t.Fatalf("after the horizon:\n got %v\nwant %v", partlog.DescribeAll(got), want)
	}
	checkFetchEveryOffset(t, l, got)
	if keys := storedKeys(t, store); fmt.Sprint(keys) != fmt.Sprint(tieredKeys(l.Describe())) {
		t.Fatalf("objects in the store %v, listed %v", keys, tieredKeys(l.Describe()))
	}

	if err := l.Close(partlog.Ctx(t)); err != nil {
		t.Fatal(err)
	}
	l2 := tieredCompactionLog(t, f, 2, store, true)
	if got2 := consumeAll(t, l2, 0); strings.Join(partlog.DescribeAll(got2), " ") != strings.Join(partlog.DescribeAll(got), " ") {
		t.Fatalf("new owner reads\n %v\nwant %v", partlog.DescribeAll(got2), partlog.DescribeAll(got))
	}
}

// TestCompactTieredSmallMap: a key map too small for the whole dirty range
// compacts object by object over several passes (C8) and ends where one
// big pass ends.
func TestCompactTieredSmallMap(t *testing.T) {
	f := partlog.NewFixture(t)
	store := memstore.New(memstore.Options{})
	l := tieredCompactionLog(t, f, 1, store, true)
	var m keyedModel
	for s := range 4 {
		for i := range 3 {
			m.appendKeyed(t, f, l, -1, 0, fmt.Sprintf("s%dk%d", s, i), "x", "shared", fmt.Sprint(s))
		}
		partlog.RollByAge(t, f, l)
	}
	tierAll(t, l)
	passes := 0
	for {
		res := compactNow(t, l, 9*24)
		if !res.Ran {
			break
		}
		if passes++; passes > 10 {
			t.Fatal("passes do not converge")
		}
	}
	if passes < 2 {
		t.Fatalf("%d passes with a small map, want several", passes)
	}
	got := partlog.DescribeAll(consumeAll(t, l, 0))
	if want := m.want(l.Describe().CleanedOffset, true); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("after %d passes:\n got %v\nwant %v", passes, got, want)
	}
}

// TestCompactTieredFailureBeforeCAS: a pass whose CAS never lands (metad
// unreachable: the outcome is unknown, as after a crash between upload
// and CAS) leaves the stored list as it was and its new objects unnamed;
// a new owner reads the log unchanged and its orphan sweep deletes them.
func TestCompactTieredFailureBeforeCAS(t *testing.T) {
	k := newTieredKeyedLog(t, 5, 4)
	f, store, l := k.f, k.store, k.l
	k.appendLedgers(t, 1)
	stored, _, err := partlog.ReadPartitionLog(partlog.Ctx(t), f.Store, "orders", 3)
	if err != nil {
		t.Fatal(err)
	}
	records := partlog.DescribeAll(consumeAll(t, l, 0))
	f.Store.SetBeforePut(func(key string) error {
		if key == partlog.PartitionKey("orders", 3) {
			return errors.New("metad unreachable")
		}
		return nil
	})
	_, err = compaction.Compact(partlog.Ctx(t), l, compaction.Options{Map: compact.NewOffsetMap(1 << 20)})
	f.Store.SetBeforePut(nil)
	if !errors.Is(err, partlog.ErrUnknownOutcome) || l.Err() == nil {
		t.Fatalf("Compact with metad unreachable at its CAS: %v (log: %v), want ErrUnknownOutcome and a failed log", err, l.Err())
	}
	now, _, err := partlog.ReadPartitionLog(partlog.Ctx(t), f.Store, "orders", 3)
	if err != nil || !proto.Equal(now, stored) {
		t.Fatalf("the stored list changed: %v", err)
	}
	orphans := 0
	for _, k := range storedKeys(t, store) {
		if !slices.Contains(tieredKeys(stored), k) {
			orphans++
		}
	}
	if orphans != 4 {
		t.Fatalf("%d unnamed objects in the store, want the pass's 4 outputs", orphans)
	}
	_ = l.Close(partlog.Ctx(t))

	l2 := tieredCompactionLog(t, f, 2, store, true)
	if got := partlog.DescribeAll(consumeAll(t, l2, 0)); strings.Join(got, " ") != strings.Join(records, " ") {
		t.Fatalf("new owner reads\n %v\nwant %v", got, records)
	}
	l2.Config().Tier.OrphanGrace = time.Nanosecond
	if err := tierpass.Run(partlog.Ctx(t), l2, true); err != nil {
		t.Fatal(err)
	}
	if keys := storedKeys(t, store); fmt.Sprint(keys) != fmt.Sprint(tieredKeys(l2.Describe())) {
		t.Fatalf("objects after the sweep %v, listed %v", keys, tieredKeys(l2.Describe()))
	}
}

// TestCompactTieredStale: retention removing an input object, or tiering
// taking an input ledger, while a pass writes its outputs: the CAS
// re-validates, nothing is swapped in, the outputs (objects and ledgers)
// are deleted and the log stays healthy.
func TestCompactTieredStale(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(t *testing.T, l *partlog.Log)
	}{
		{"retention", func(t *testing.T, l *partlog.Log) {
			p := tieredCompactPolicy()
			p.Delete, p.RetentionBytes = true, 1
			l.SetPolicy(p)
			if cut, err := retention.Enforce(partlog.Ctx(t), l); err != nil || cut.Pieces == 0 {
				t.Errorf("retention: %+v, %v", cut, err)
			}
			p.Delete = false
			l.SetPolicy(p)
		}},
		{"tiering", func(t *testing.T, l *partlog.Log) {
			if err := tierpass.Run(partlog.Ctx(t), l, false); err != nil {
				t.Error(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := newTieredKeyedLog(t, 7, 3)
			f, store, l := k.f, k.store, k.l
			k.appendLedgers(t, 2)
			before := l.Describe()
			inputs := tieredKeys(before)
			var fired atomic.Bool // the change's own uploads come back here
			store.SetHook(func(c memstore.Call) memstore.Fault {
				if c.Op == objstore.OpPut && !slices.Contains(inputs, c.Key) && fired.CompareAndSwap(false, true) {
					tc.change(t, l)
				}
				return memstore.Fault{}
			})
			_, err := compaction.Compact(partlog.Ctx(t), l, compaction.Options{Map: compact.NewOffsetMap(1 << 20)})
			store.SetHook(nil)
			if !errors.Is(err, compaction.ErrStale) || l.Err() != nil {
				t.Fatalf("Compact racing %s: %v (log: %v), want compaction.ErrStale", tc.name, err, l.Err())
			}
			after := l.Describe()
			if after.CleanedOffset != before.CleanedOffset || after.LastCompactionMs != 0 {
				t.Fatalf("cleaned offset %d, last compaction %d: something was swapped in", after.CleanedOffset, after.LastCompactionMs)
			}
			if err := tierpass.Run(partlog.Ctx(t), l, false); err != nil { // collects what retention queued
				t.Fatal(err)
			}
			if keys := storedKeys(t, store); fmt.Sprint(keys) != fmt.Sprint(tieredKeys(l.Describe())) {
				t.Fatalf("objects in the store %v, listed %v: the outputs must be deleted", keys, tieredKeys(l.Describe()))
			}
			checkNoLeftovers(t, f, l, before.Segments)
		})
	}
}

// TestCompactReadsObjectsInRanges: a pass reads an object in ranges
// smaller than its batches (so that batches straddle ranges and some span
// several), with the result of one read of the whole; with a buffer that
// holds them, the objects are read once, not twice; a bit flipped in one
// of those ranges fails the pass, which then swaps nothing in.
func TestCompactReadsObjectsInRanges(t *testing.T) {
	const readBytes = 40 // a batch here is 100-250 bytes
	var twice int64
	for _, tc := range []struct {
		name    string
		buffer  int64
		damaged bool
	}{{"read twice", 0, false}, {"buffered", 1 << 20, false}, {"damaged", 0, true}} {
		t.Run(tc.name, func(t *testing.T) {
			k := newTieredKeyedLog(t, 7, 4)
			store, l, m := k.store, k.l, &k.m
			before := l.Describe()
			var ranges, flipped atomic.Int64
			store.SetHook(func(c memstore.Call) memstore.Fault {
				if c.Op != objstore.OpGetRange || c.N > readBytes || c.Off < segfile.HeaderSize {
					return memstore.Fault{}
				}
				if ranges.Add(1) != 25 || !tc.damaged {
					return memstore.Fault{}
				}
				flipped.Add(1)
				return memstore.Fault{Body: func(b []byte) []byte {
					b = bytes.Clone(b)
					b[len(b)/2] ^= 1
					return b
				}}
			})
			res, err := compaction.Compact(partlog.Ctx(t), l, compaction.Options{Map: compact.NewOffsetMap(1 << 20), BufferBytes: tc.buffer, ReadBytes: readBytes})
			store.SetHook(nil)
			if ranges.Load() < 25 {
				t.Fatalf("%d ranged reads of at most %d bytes: the objects were not read in ranges", ranges.Load(), readBytes)
			}
			if tc.damaged {
				var ce *segfile.CorruptError
				if flipped.Load() != 1 || !errors.As(err, &ce) || res.Ran {
					t.Fatalf("a pass over a damaged range (%d flipped): %+v, %v; want a segfile corruption error", flipped.Load(), res, err)
				}
				if after := l.Describe(); !proto.Equal(after, before) {
					t.Fatal("a failed pass changed the list")
				}
				return
			}
			if err != nil || !res.Ran || res.InputObjects != 4 {
				t.Fatalf("pass %+v, %v; want 4 objects compacted", res, err)
			}
			got := consumeAll(t, l, 0)
			if want := m.want(res.CleanedOffset, true); strings.Join(partlog.DescribeAll(got), " ") != strings.Join(want, " ") {
				t.Fatalf("after compaction:\n got %v\nwant %v", partlog.DescribeAll(got), want)
			}
			switch {
			case tc.buffer == 0:
				twice = ranges.Load()
			case twice == 0 || ranges.Load() != twice/2:
				t.Fatalf("%d ranged reads with a buffer, %d without: want half", ranges.Load(), twice)
			}
		})
	}
}

// TestCompactDropsLocalCopies: with local.retention.ms keeping the tiered
// ledgers, a pass over the objects unlinks and deletes the copies of what
// it compacted, so that a consumer from the start reads the compacted
// objects, not the superseded records the copies still hold.
func TestCompactDropsLocalCopies(t *testing.T) {
	k := newTieredKeyedLog(t, 9, 0)
	f, l, m := k.f, k.l, &k.m
	p := tieredCompactPolicy()
	p.LocalRetentionMs = int64(time.Hour / time.Millisecond)
	l.SetPolicy(p)
	k.appendLedgers(t, 4)
	if err := tierpass.Run(partlog.Ctx(t), l, false); err != nil {
		t.Fatal(err)
	}
	before := l.Describe()
	te := partlog.TieredEnd(before)
	var copies []*brokerpb.LedgerSegment
	for _, s := range before.Segments {
		if s.FirstOffset < te {
			copies = append(copies, s)
		}
	}
	if len(before.Tiered) != 4 || len(copies) != 4 {
		t.Fatalf("%d objects and %d local copies, want 4 of each", len(before.Tiered), len(copies))
	}
	res := compactNow(t, l, 1<<20)
	if !res.Ran || res.InputObjects != 4 {
		t.Fatalf("pass %+v, want the 4 objects compacted", res)
	}
	got := consumeAll(t, l, 0)
	if want := m.want(res.CleanedOffset, true); strings.Join(partlog.DescribeAll(got), " ") != strings.Join(want, " ") {
		t.Fatalf("a consumer from the start reads\n %v\nwant\n %v", partlog.DescribeAll(got), want)
	}
	after := l.Describe()
	for _, s := range after.Segments {
		if s.FirstOffset < partlog.TieredEnd(after) {
			t.Fatalf("ledger %d [%d, %d] is still listed as a local copy of compacted objects", s.LedgerId, s.FirstOffset, s.LastOffset)
		}
	}
	checkNoLeftovers(t, f, l, copies)
}
