package partlog

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

	"github.com/strata-log/strata/internal/ctxtime"
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
func (f *fixture) compactConfig(epoch int64) Config {
	cfg := f.config(epoch)
	cfg.SegmentAge = time.Minute
	cfg.Policy = compactPolicy
	return cfg
}

// compactPolicy compacts whatever is closed (dirty ratio 0, no lag) and
// keeps tombstones an hour.
var compactPolicy = Policy{RetentionMs: -1, RetentionBytes: -1, MaxTimestampAheadMs: -1, LocalRetentionMs: -1,
	Compact: true, Compaction: compact.Policy{MinCleanableDirtyRatio: 0}, DeleteRetentionMs: time.Hour.Milliseconds()}

// keyedModel is the reference: every record appended, by offset.
type keyedModel struct {
	recs []recordbatch.Record
}

// appendKeyed appends one batch of keyed records (value "" = tombstone)
// and records them in the model.
func (m *keyedModel) appendKeyed(t *testing.T, f *fixture, l *Log, pid int64, seq int32, kv ...string) AppendResult {
	t.Helper()
	ts := f.clock.Now().UnixMilli()
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
	res := mustAppend(t, l, b, AcksQuorum)
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
		out = append(out, describeRecord(r))
	}
	return out
}

func describeRecord(r recordbatch.Record) string {
	v := "<tombstone>"
	if r.Value != nil {
		v = string(r.Value)
	}
	return fmt.Sprintf("%d:%s=%s", r.Offset, r.Key, v)
}

func describeAll(recs []recordbatch.Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = describeRecord(r)
	}
	return out
}

// checkFetchEveryOffset: a fetch at any offset in [start, hw) returns a
// batch ending at or after it, whose first record at or after it is the
// first the model keeps there (P7: a fetch at a removed offset returns
// the next batch).
func checkFetchEveryOffset(t *testing.T, l *Log, want []recordbatch.Record) {
	t.Helper()
	for off := l.LogStartOffset(); off < l.HighWatermark(); off++ {
		res, err := l.Fetch(testCtx(t), off, 1, 0)
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
		for _, r := range decodeAll(t, res.Records()) {
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

func compactNow(t *testing.T, l *Log, mapBytes int) CompactResult {
	t.Helper()
	// The small buffer keeps the first piece or two of a test's log:
	// every pass rewrites some pieces from memory and reads the rest again.
	res, err := l.Compact(testCtx(t), CompactOptions{Map: compact.NewOffsetMap(mapBytes), BufferBytes: 1 << 10})
	if err != nil {
		t.Fatalf("Compact: %v", err)
	}
	return res
}

// listedIndexes checks that the store holds an index for exactly the
// closed segments the log lists (outputs of a lost pass and replaced
// inputs are gone) and that every replaced ledger is deleted.
func checkNoLeftovers(t *testing.T, f *fixture, l *Log, replaced []*brokerpb.LedgerSegment) {
	t.Helper()
	listed, listedLedgers := map[string]bool{}, map[uint64]bool{}
	for _, s := range l.Describe().Segments {
		listedLedgers[s.LedgerId] = true
		if s.Closed {
			listed[IndexKey(s.LedgerId)] = true
		}
	}
	f.store.mu.Lock()
	for k := range f.store.kv {
		if strings.HasPrefix(k, LedgerIndexPrefix) && !listed[k] {
			t.Errorf("index %s names no listed segment", k)
		}
	}
	f.store.mu.Unlock()
	for _, s := range replaced {
		if listedLedgers[s.LedgerId] {
			continue
		}
		if _, _, err := f.cluster.Env().Meta.Get(testCtx(t), s.LedgerId); !errors.Is(err, ledger.ErrNoSuchLedger) {
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
	f := newFixture(t)
	cfg := f.compactConfig(1)
	cfg.SegmentBytes = 2000 // outputs: several ledgers
	l := f.open(cfg)
	rng := rand.New(rand.NewPCG(1, 2))
	var m keyedModel
	var seq int32
	var lastIdem AppendResult
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
		rollByAge(t, f, l)
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
	got := describeAll(fetchAll(t, l, 0))
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
	checkFetchEveryOffset(t, l, fetchAll(t, l, 0))
	checkNoLeftovers(t, f, l, before[:8])
	stored, _, err := ReadPartitionLog(testCtx(t), f.store, "orders", 3)
	if err != nil || stored.CleanedOffset != res.CleanedOffset || stored.LastCompactionMs != f.clock.Now().UnixMilli() {
		t.Fatalf("stored cleaned offset %d, last compaction %d, %v", stored.GetCleanedOffset(), stored.GetLastCompactionMs(), err)
	}
	if again := compactNow(t, l, 1<<20); again.Ran {
		t.Fatalf("a second pass with nothing dirty ran: %+v", again)
	}

	// Past delete.retention.ms, a pass over new data drops the tombstones.
	f.clock.Advance(2 * time.Hour)
	m.appendKeyed(t, f, l, -1, 0, "k0", "late")
	rollByAge(t, f, l)
	res = compactNow(t, l, 1<<20)
	if !res.Ran {
		t.Fatalf("second pass did not run: %+v", res)
	}
	got = describeAll(fetchAll(t, l, 0))
	want = m.want(res.CleanedOffset, false)
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("after the horizon:\n got %v\nwant %v", got, want)
	}

	// A new owner: same records, same ends, producer state intact.
	if err := l.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	cfg2 := f.config(2)
	cfg2.Policy = compactPolicy
	l2 := f.open(cfg2)
	if d := l2.Describe(); d.CleanedOffset != res.CleanedOffset || d.LastCompactionMs == 0 {
		t.Fatalf("new owner: cleaned offset %d, last compaction %d; want %d", d.CleanedOffset, d.LastCompactionMs, res.CleanedOffset)
	}
	if again := compactNow(t, l2, 1<<20); again.Ran {
		t.Fatalf("the new owner compacted clean ledgers again: %+v", again)
	}
	if got2 := describeAll(fetchAll(t, l2, 0)); strings.Join(got2, " ") != strings.Join(got, " ") {
		t.Fatalf("new owner reads\n %v\nwant %v", got2, got)
	}
	retry, err := recordbatch.Encode(&recordbatch.Batch{ProducerID: 7, ProducerEpoch: 0, BaseSequence: seq - 1,
		Records: []recordbatch.Record{{TimestampMs: 1, Key: []byte("idem"), Value: lastIdemBatch}}})
	if err != nil {
		t.Fatal(err)
	}
	r := mustAppend(t, l2, retry, AcksQuorum)
	if !r.Duplicate || r.BaseOffset != lastIdem.BaseOffset {
		t.Fatalf("retried batch after compaction and takeover: %+v, want a duplicate at %d", r, lastIdem.BaseOffset)
	}
	next, err := recordbatch.Encode(&recordbatch.Batch{ProducerID: 7, ProducerEpoch: 0, BaseSequence: seq,
		Records: []recordbatch.Record{{TimestampMs: f.clock.Now().UnixMilli(), Key: []byte("idem"), Value: []byte("next")}}})
	if err != nil {
		t.Fatal(err)
	}
	if r := mustAppend(t, l2, next, AcksQuorum); r.Duplicate {
		t.Fatalf("the next sequence was taken for a duplicate: %+v", r)
	}
}

// TestCompactKeepsTheLastBatch: when every record of the compacted range
// is superseded by records in the open ledger, the range's last batch
// stays (empty) so that a fetch anywhere below the high watermark finds
// a batch (P7) — a consumer at a removed offset is never stuck.
func TestCompactKeepsTheLastBatch(t *testing.T) {
	f := newFixture(t)
	cfg := f.compactConfig(1)
	l := f.open(cfg)
	var m keyedModel
	for range 3 {
		m.appendKeyed(t, f, l, -1, 0, "a", "1", "b", "2")
	}
	rollByAge(t, f, l)
	for range 2 {
		m.appendKeyed(t, f, l, -1, 0, "a", "3", "b", "4")
	}
	rollByAge(t, f, l)
	res := compactNow(t, l, 1<<20)
	if !res.Ran {
		t.Fatalf("no pass: %+v", res)
	}
	// Only offsets 8 and 9 hold records now; 0-7 are holes.
	recs := fetchAll(t, l, 0)
	if got := describeAll(recs); strings.Join(got, " ") != "8:a=3 9:b=4" {
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
	f := newFixture(t)
	cfg := f.compactConfig(1)
	l := f.open(cfg)
	var m keyedModel
	for s := range 4 {
		for i := range 3 {
			m.appendKeyed(t, f, l, -1, 0, fmt.Sprintf("s%dk%d", s, i), "x", "shared", fmt.Sprint(s))
		}
		rollByAge(t, f, l)
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
	got := describeAll(fetchAll(t, l, 0))
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
	f := newFixture(t)
	cfg := f.compactConfig(1)
	l := f.open(cfg)
	var m keyedModel
	for range 3 {
		m.appendKeyed(t, f, l, -1, 0, "a", "1", "b", "2")
		rollByAge(t, f, l)
	}
	before := l.Describe().Segments

	// Retention runs between the outputs' index write and the CAS.
	fired := false
	f.store.setBeforePut(func(key string) error {
		if fired || !strings.HasPrefix(key, LedgerIndexPrefix) {
			return nil
		}
		fired = true
		p := compactPolicy
		p.Delete, p.RetentionBytes = true, 0
		l.SetPolicy(p)
		if cut, err := l.EnforceRetention(testCtx(t)); err != nil || cut.Pieces == 0 {
			t.Errorf("retention: %+v, %v", cut, err)
		}
		l.SetPolicy(compactPolicy)
		return nil
	})
	if _, err := l.Compact(testCtx(t), CompactOptions{Map: compact.NewOffsetMap(1 << 20)}); !errors.Is(err, ErrCompactionStale) {
		t.Fatalf("Compact racing retention: %v, want ErrCompactionStale", err)
	}
	f.store.setBeforePut(nil)
	if l.Err() != nil {
		t.Fatalf("log failed: %v", l.Err())
	}
	checkNoLeftovers(t, f, l, before)

	// Another owner bumps the list while the pass runs.
	for range 2 {
		m.appendKeyed(t, f, l, -1, 0, "a", "3")
		rollByAge(t, f, l)
	}
	fired = false
	f.store.setBeforePut(func(key string) error {
		if fired || !strings.HasPrefix(key, LedgerIndexPrefix) {
			return nil
		}
		fired = true
		val, v, err := f.store.Get(testCtx(t), PartitionKey("orders", 3))
		if err != nil {
			return err
		}
		_, err = f.store.Put(testCtx(t), PartitionKey("orders", 3), val, v)
		return err
	})
	_, err := l.Compact(testCtx(t), CompactOptions{Map: compact.NewOffsetMap(1 << 20)})
	if !errors.Is(err, ErrConflict) || !errors.Is(l.Err(), ErrConflict) {
		t.Fatalf("Compact after another owner's write: %v (log: %v), want ErrConflict", err, l.Err())
	}
	f.store.setBeforePut(nil)
	stored, _, err := ReadPartitionLog(testCtx(t), f.store, "orders", 3)
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, s := range stored.Segments {
		listed[IndexKey(s.LedgerId)] = true
	}
	f.store.mu.Lock()
	defer f.store.mu.Unlock()
	for k := range f.store.kv {
		if strings.HasPrefix(k, LedgerIndexPrefix) && !listed[k] {
			t.Errorf("index %s of a lost pass's output was left", k)
		}
	}
}

// TestDecideCompactionSkipsTiered: ledgers a segment object covers are
// never compaction candidates (local copies); the objects are, first, when
// the log has a store to rewrite them in, and left alone when it has not.
func TestDecideCompactionSkipsTiered(t *testing.T) {
	pl := &brokerpb.PartitionLog{
		Tiered: []*brokerpb.TieredSegment{{ObjectKey: "o1", BaseOffset: 0, LastOffset: 9, DataBytes: 100}},
		Segments: []*brokerpb.LedgerSegment{
			{LedgerId: 1, FirstOffset: 0, LastOffset: 9, Bytes: 100, Closed: true},
			{LedgerId: 2, FirstOffset: 10, LastOffset: 19, Bytes: 100, Closed: true},
			{LedgerId: 3, FirstOffset: 20, LastOffset: 19, Closed: false},
		},
	}
	pieces, d, cleaned := decideCompaction(pl, 1000, compact.Policy{MinCleanableDirtyRatio: 0.5}, false)
	if len(pieces) != 2 || pieces[0].ledger.GetLedgerId() != 2 || cleaned != 10 || !d.Compact || d.Cleanable != 1 || d.CleanableEnd != 20 {
		t.Fatalf("without a store: pieces %v, decision %+v, cleaned %d", pieces, d, cleaned)
	}
	pieces, d, cleaned = decideCompaction(pl, 1000, compact.Policy{MinCleanableDirtyRatio: 0.5}, true)
	if len(pieces) != 3 || pieces[0].object.GetObjectKey() != "o1" || pieces[1].ledger.GetLedgerId() != 2 || cleaned != 0 ||
		!d.Compact || d.Cleanable != 2 || d.CleanableEnd != 20 {
		t.Fatalf("with a store: pieces %v, decision %+v, cleaned %d", pieces, d, cleaned)
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
		f := newFixture(b)
		cfg := f.compactConfig(1)
		cfg.SegmentBytes = 1 << 20
		if tiered {
			store := memstore.New(memstore.Options{})
			cfg.Tier = &Tier{Store: store, Reader: segfileReader{store}, KeyPrefix: "p/", SegmentBytes: 1, MaxDelay: time.Hour, OrphanGrace: time.Hour}
			cfg.Policy = tieredCompactPolicy()
		}
		l := f.open(cfg)
		rng := rand.New(rand.NewPCG(1, uint64(i)))
		for range 8 {
			for range 100 {
				recs := make([]recordbatch.Record, 10)
				for j := range recs {
					recs[j] = recordbatch.Record{TimestampMs: f.clock.Now().UnixMilli(), Key: fmt.Appendf(nil, "key-%d", rng.IntN(2000)), Value: []byte(value)}
				}
				bt, err := recordbatch.Encode(&recordbatch.Batch{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1, Records: recs})
				if err != nil {
					b.Fatal(err)
				}
				mustAppend(b, l, bt, AcksQuorum)
			}
			f.clock.Advance(cfg.SegmentAge + time.Second)
			if err := l.maybeRoll(testCtx(b)); err != nil {
				b.Fatal(err)
			}
		}
		if tiered {
			if err := l.TierOnce(testCtx(b), false); err != nil || len(l.Describe().Tiered) != 8 {
				b.Fatalf("tiering: %d objects, %v", len(l.Describe().Tiered), err)
			}
			l.cfg.Tier.SegmentBytes = 8 << 20 // one output object
		}
		m := compact.NewOffsetMap(8 << 20)
		b.StartTimer()
		res, err := l.Compact(testCtx(b), CompactOptions{Map: m})
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
func appendRandomLedgers(t *testing.T, f *fixture, l *Log, m *keyedModel, rng *rand.Rand, ledgers int, seq *int32) {
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
		rollByAge(t, f, l)
	}
}

// tierAll uploads every closed ledger (one object each) and drops the
// local copies.
func tierAll(t *testing.T, l *Log) {
	t.Helper()
	if err := l.TierOnce(testCtx(t), false); err != nil {
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
	f     *fixture
	store *memstore.Store
	l     *Log
	m     keyedModel
	rng   *rand.Rand
	seq   int32
}

// newTieredKeyedLog opens one and writes ledgers random ledgers of keyed
// records (appendRandomLedgers), all tiered.
func newTieredKeyedLog(t *testing.T, seed uint64, ledgers int) *tieredKeyedLog {
	t.Helper()
	k := &tieredKeyedLog{f: newFixture(t), store: memstore.New(memstore.Options{}), rng: rand.New(rand.NewPCG(seed, seed+1))}
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
	if l.HighWatermark() != hw || tieredEnd(after) != tieredEnd(before) || len(after.Garbage) != 0 {
		t.Fatalf("hw %d (was %d), tiered end %d (was %d), garbage %v", l.HighWatermark(), hw, tieredEnd(after), tieredEnd(before), after.Garbage)
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
	if want := m.want(res.CleanedOffset, true); strings.Join(describeAll(got), " ") != strings.Join(want, " ") {
		t.Fatalf("after compaction:\n got %v\nwant %v", describeAll(got), want)
	}
	checkFetchEveryOffset(t, l, got)
	checkNoLeftovers(t, f, l, before.Segments)
	if again := compactNow(t, l, 1<<20); again.Ran {
		t.Fatalf("a second pass with nothing dirty ran: %+v", again)
	}

	// Past delete.retention.ms, with outputs up to 1 MiB: one object.
	f.clock.Advance(2 * time.Hour)
	m.appendKeyed(t, f, l, -1, 0, "k0", "late")
	rollByAge(t, f, l)
	l.cfg.Tier.SegmentBytes = 1 << 20
	res = compactNow(t, l, 1<<20)
	if !res.Ran || res.InputObjects != 6 || res.OutputObjects != 1 {
		t.Fatalf("second pass %+v, want 6 objects merged into 1", res)
	}
	got = consumeAll(t, l, 0)
	if want := m.want(res.CleanedOffset, false); strings.Join(describeAll(got), " ") != strings.Join(want, " ") {
		t.Fatalf("after the horizon:\n got %v\nwant %v", describeAll(got), want)
	}
	checkFetchEveryOffset(t, l, got)
	if keys := storedKeys(t, store); fmt.Sprint(keys) != fmt.Sprint(tieredKeys(l.Describe())) {
		t.Fatalf("objects in the store %v, listed %v", keys, tieredKeys(l.Describe()))
	}

	if err := l.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	l2 := tieredCompactionLog(t, f, 2, store, true)
	if got2 := consumeAll(t, l2, 0); strings.Join(describeAll(got2), " ") != strings.Join(describeAll(got), " ") {
		t.Fatalf("new owner reads\n %v\nwant %v", describeAll(got2), describeAll(got))
	}
}

// TestCompactTieredSmallMap: a key map too small for the whole dirty range
// compacts object by object over several passes (C8) and ends where one
// big pass ends.
func TestCompactTieredSmallMap(t *testing.T) {
	f := newFixture(t)
	store := memstore.New(memstore.Options{})
	l := tieredCompactionLog(t, f, 1, store, true)
	var m keyedModel
	for s := range 4 {
		for i := range 3 {
			m.appendKeyed(t, f, l, -1, 0, fmt.Sprintf("s%dk%d", s, i), "x", "shared", fmt.Sprint(s))
		}
		rollByAge(t, f, l)
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
	got := describeAll(consumeAll(t, l, 0))
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
	stored, _, err := ReadPartitionLog(testCtx(t), f.store, "orders", 3)
	if err != nil {
		t.Fatal(err)
	}
	records := describeAll(consumeAll(t, l, 0))
	f.store.setBeforePut(func(key string) error {
		if key == PartitionKey("orders", 3) {
			return errors.New("metad unreachable")
		}
		return nil
	})
	_, err = l.Compact(testCtx(t), CompactOptions{Map: compact.NewOffsetMap(1 << 20)})
	f.store.setBeforePut(nil)
	if !errors.Is(err, ErrUnknownOutcome) || l.Err() == nil {
		t.Fatalf("Compact with metad unreachable at its CAS: %v (log: %v), want ErrUnknownOutcome and a failed log", err, l.Err())
	}
	now, _, err := ReadPartitionLog(testCtx(t), f.store, "orders", 3)
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
	_ = l.Close(testCtx(t))

	l2 := tieredCompactionLog(t, f, 2, store, true)
	if got := describeAll(consumeAll(t, l2, 0)); strings.Join(got, " ") != strings.Join(records, " ") {
		t.Fatalf("new owner reads\n %v\nwant %v", got, records)
	}
	l2.cfg.Tier.OrphanGrace = time.Nanosecond
	if err := l2.TierOnce(testCtx(t), true); err != nil {
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
		change func(t *testing.T, l *Log)
	}{
		{"retention", func(t *testing.T, l *Log) {
			p := tieredCompactPolicy()
			p.Delete, p.RetentionBytes = true, 1
			l.SetPolicy(p)
			if cut, err := l.EnforceRetention(testCtx(t)); err != nil || cut.Pieces == 0 {
				t.Errorf("retention: %+v, %v", cut, err)
			}
			p.Delete = false
			l.SetPolicy(p)
		}},
		{"tiering", func(t *testing.T, l *Log) {
			if err := l.TierOnce(testCtx(t), false); err != nil {
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
			_, err := l.Compact(testCtx(t), CompactOptions{Map: compact.NewOffsetMap(1 << 20)})
			store.SetHook(nil)
			if !errors.Is(err, ErrCompactionStale) || l.Err() != nil {
				t.Fatalf("Compact racing %s: %v (log: %v), want ErrCompactionStale", tc.name, err, l.Err())
			}
			after := l.Describe()
			if after.CleanedOffset != before.CleanedOffset || after.LastCompactionMs != 0 {
				t.Fatalf("cleaned offset %d, last compaction %d: something was swapped in", after.CleanedOffset, after.LastCompactionMs)
			}
			if err := l.TierOnce(testCtx(t), false); err != nil { // collects what retention queued
				t.Fatal(err)
			}
			if keys := storedKeys(t, store); fmt.Sprint(keys) != fmt.Sprint(tieredKeys(l.Describe())) {
				t.Fatalf("objects in the store %v, listed %v: the outputs must be deleted", keys, tieredKeys(l.Describe()))
			}
			checkNoLeftovers(t, f, l, before.Segments)
		})
	}
}

// TestSwapCompacted: the CAS's change (pure) swaps objects and ledgers
// and queues the replaced objects, accepts objects tiered after its
// inputs, and refuses (ErrCompactionStale, pl untouched) inputs that
// retention removed or ledgers that were tiered meanwhile.
func TestSwapCompacted(t *testing.T) {
	obj := func(key string, base, last int64) *brokerpb.TieredSegment {
		return &brokerpb.TieredSegment{ObjectKey: key, BaseOffset: base, LastOffset: last}
	}
	led := func(id uint64, first, last int64, closed bool) *brokerpb.LedgerSegment {
		return &brokerpb.LedgerSegment{LedgerId: id, FirstOffset: first, LastOffset: last, Closed: closed}
	}
	base := func() *brokerpb.PartitionLog {
		return &brokerpb.PartitionLog{
			Tiered:   []*brokerpb.TieredSegment{obj("a", 0, 9), obj("b", 10, 19)},
			Segments: []*brokerpb.LedgerSegment{led(3, 20, 29, true), led(4, 30, 29, false)},
		}
	}
	sw := compactionSwap{
		objectInputs: []*brokerpb.TieredSegment{obj("a", 0, 9), obj("b", 10, 19)}, objectOutputs: []*brokerpb.TieredSegment{obj("c", 0, 19)},
		ledgerInputs: []*brokerpb.LedgerSegment{led(3, 20, 29, true)}, ledgerOutputs: []*brokerpb.LedgerSegment{led(5, 20, 29, true)},
		end: 30, nowMs: 7, tombstoneHorizonMs: 500,
	}
	pl := base()
	pl.TombstoneHorizonMs = 100 // the previous pass's: this one dropped that tombstone
	if copies, err := swapCompacted(pl, sw); err != nil || len(copies) != 0 {
		t.Fatal(copies, err)
	}
	if fmt.Sprint(tieredKeys(pl)) != "[c]" || pl.Segments[0].LedgerId != 5 || len(pl.Segments) != 2 || pl.CleanedOffset != 30 ||
		len(pl.Garbage) != 2 || pl.Garbage[0].ObjectKey != "a" || pl.Garbage[1].ObjectKey != "b" || pl.Garbage[0].SinceMs != 7 ||
		pl.TombstoneHorizonMs != 500 {
		t.Fatalf("after the swap: %v", pl)
	}
	// A pass that kept no tombstone clears the horizon (no more passes for it).
	pl = base()
	pl.TombstoneHorizonMs = 100
	noTombstones := sw
	noTombstones.tombstoneHorizonMs = 0
	if _, err := swapCompacted(pl, noTombstones); err != nil || pl.TombstoneHorizonMs != 0 {
		t.Fatalf("swap keeping no tombstone: %v, horizon %d", err, pl.TombstoneHorizonMs)
	}

	objectsOnly := sw
	objectsOnly.ledgerInputs, objectsOnly.ledgerOutputs, objectsOnly.end = nil, nil, 20
	pl = base()
	pl.Tiered = append(pl.Tiered, obj("d", 20, 29)) // tiered meanwhile, after the inputs
	pl.Segments = pl.Segments[1:]
	if _, err := swapCompacted(pl, objectsOnly); err != nil || fmt.Sprint(tieredKeys(pl)) != "[c d]" {
		t.Fatalf("objects tiered after the inputs: %v, %v", err, tieredKeys(pl))
	}

	// Local copies of the replaced objects are unlinked and returned; a
	// copy of an object the pass did not replace stays.
	pl = base()
	pl.Tiered = append(pl.Tiered, obj("d", 20, 29))
	pl.Segments = []*brokerpb.LedgerSegment{led(1, 0, 9, true), led(2, 10, 19, true), led(3, 20, 29, true), led(4, 30, 29, false)}
	copies, err := swapCompacted(pl, objectsOnly)
	if err != nil || len(copies) != 2 || copies[0].LedgerId != 1 || copies[1].LedgerId != 2 ||
		len(pl.Segments) != 2 || pl.Segments[0].LedgerId != 3 || fmt.Sprint(tieredKeys(pl)) != "[c d]" {
		t.Fatalf("with local copies: unlinked %v, %v; list %v", copies, err, pl)
	}

	for name, change := range map[string]func(pl *brokerpb.PartitionLog){
		"retention removed an input object": func(pl *brokerpb.PartitionLog) { pl.Tiered = pl.Tiered[1:] },
		"an input ledger was tiered":        func(pl *brokerpb.PartitionLog) { pl.Tiered = append(pl.Tiered, obj("d", 20, 29)) },
		"an input ledger was removed":       func(pl *brokerpb.PartitionLog) { pl.Segments = pl.Segments[1:] },
	} {
		pl := base()
		change(pl)
		want := proto.Clone(pl)
		if _, err := swapCompacted(pl, sw); !errors.Is(err, ErrCompactionStale) || !proto.Equal(pl, want) {
			t.Fatalf("%s: %v, list %v", name, err, pl)
		}
	}
}

// TestCompactReadsObjectsInRanges: a pass reads an object in ranges
// smaller than its batches (so that batches straddle ranges and some span
// several), with the result of one read of the whole; with a buffer that
// holds them, the objects are read once, not twice; a bit flipped in one
// of those ranges fails the pass, which then swaps nothing in.
func TestCompactReadsObjectsInRanges(t *testing.T) {
	defer func(n int64) { compactReadBytes = n }(compactReadBytes)
	compactReadBytes = 40 // a batch here is 100-250 bytes
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
				if c.Op != objstore.OpGetRange || c.N > compactReadBytes || c.Off < segfile.HeaderSize {
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
			res, err := l.Compact(testCtx(t), CompactOptions{Map: compact.NewOffsetMap(1 << 20), BufferBytes: tc.buffer})
			store.SetHook(nil)
			if ranges.Load() < 25 {
				t.Fatalf("%d ranged reads of at most %d bytes: the objects were not read in ranges", ranges.Load(), compactReadBytes)
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
			if want := m.want(res.CleanedOffset, true); strings.Join(describeAll(got), " ") != strings.Join(want, " ") {
				t.Fatalf("after compaction:\n got %v\nwant %v", describeAll(got), want)
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
	if err := l.TierOnce(testCtx(t), false); err != nil {
		t.Fatal(err)
	}
	before := l.Describe()
	te := tieredEnd(before)
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
	if want := m.want(res.CleanedOffset, true); strings.Join(describeAll(got), " ") != strings.Join(want, " ") {
		t.Fatalf("a consumer from the start reads\n %v\nwant\n %v", describeAll(got), want)
	}
	after := l.Describe()
	for _, s := range after.Segments {
		if s.FirstOffset < tieredEnd(after) {
			t.Fatalf("ledger %d [%d, %d] is still listed as a local copy of compacted objects", s.LedgerId, s.FirstOffset, s.LastOffset)
		}
	}
	checkNoLeftovers(t, f, l, copies)
}

// A range whose batches the pass buffer keeps takes the range's bytes and
// no more: the buffer counts data bytes, and a 1 MiB carry room in front
// of every kept range of a small object made a pass over many small
// objects hold hundreds of times its --compaction-buffer-bytes. A pooled
// range keeps the room, and a carry joins either kind intact.
func TestRangeReadSpace(t *testing.T) {
	ctx := testCtx(t)
	store := memstore.New(memstore.Options{})
	data := bytes.Repeat([]byte("0123456789"), 300)
	if _, err := store.Put(ctx, "o", bytes.NewReader(data), int64(len(data)), nil); err != nil {
		t.Fatal(err)
	}
	rr := objectRange{store: store, key: "o", timeout: time.Minute}
	for _, pooled := range []bool{false, true} {
		r := startRangeRead(ctx, rr, 1000, int64(len(data)), pooled)
		<-r.done
		if r.err != nil {
			t.Fatal(r.err)
		}
		want := len(data) - 1000
		if !pooled && (len(r.space) != want || cap(r.space) != want) {
			t.Errorf("kept range: space of %d bytes (cap %d) for %d bytes of data", len(r.space), cap(r.space), want)
		}
		if got := r.join(data[990:1000]); !bytes.Equal(got, data[990:]) {
			t.Errorf("pooled=%v: carry and range joined wrong", pooled)
		}
		r.recycle()
	}
}

// TestPassBufferPacesRewrite: the batches a pass kept in memory and
// must decode are rewritten at rewritePaceFactor times the pass's read
// rate, not as fast as a core goes (which peaked the produce p99 of the
// same broker); those it drops from their header alone
// (compact.Survivors) cost nothing and are not paced.
func TestPassBufferPacesRewrite(t *testing.T) {
	const rate = 1 << 20 // the rewrite goes at 6 MiB/s
	value := make([]byte, 64<<10)
	var kept [][]byte
	for i := range 48 { // 3 MiB: at least half a second
		b, err := recordbatch.Encode(&recordbatch.Batch{BaseOffset: int64(i), ProducerID: -1,
			Records: []recordbatch.Record{{Key: []byte("k"), Value: value}}})
		if err != nil {
			t.Fatal(err)
		}
		kept = append(kept, b)
	}
	// The map has "k" at offset 48, after them: every kept batch goes.
	m := compact.NewOffsetMap(1 << 10)
	m.Put([]byte("k"), 48)
	surv := compact.NewSurvivors(0)
	surv.AddLatest(m, 49)
	p := compactPiece{ledger: &brokerpb.LedgerSegment{LedgerId: 7, Bytes: int64(len(kept) * len(kept[0]))}}
	for _, tc := range []struct {
		rate    float64
		surv    *compact.Survivors
		atLeast time.Duration
	}{
		{rate, nil, time.Duration(float64(len(kept)*len(kept[0])) / (rate * rewritePaceFactor) * float64(time.Second))},
		{0, nil, 0}, // unbounded
		{rate, surv, 0},
	} {
		buf := newPassBuffer(1<<30, tc.rate)
		if !buf.fits(p) {
			t.Fatal("the piece does not fit")
		}
		buf.batches[p.String()] = kept
		rw := &passRewrite{buf: buf, m: m, surv: tc.surv, last: 1000}
		var st compact.Stats
		start := time.Now()
		err := buf.read(testCtx(t), nil, nil, p, func(id int64, payload []byte, kept bool) error {
			nb, bst, err := rw.batch(testCtx(t), p, id, payload, kept)
			st.Add(bst)
			if err == nil && nb != nil {
				err = fmt.Errorf("batch %d kept", id)
			}
			return err
		})
		took := time.Since(start)
		if err != nil || st.BatchesIn != int64(len(kept)) || st.RecordsRemoved != int64(len(kept)) {
			t.Fatalf("rate %v: stats %+v, %v", tc.rate, st, err)
		}
		// The pacer may run ahead by less than ctxtime.PacerMinSleep.
		if took < tc.atLeast-ctxtime.PacerMinSleep {
			t.Errorf("rate %v: rewrote %d batches in %v, want at least %v", tc.rate, len(kept), took, tc.atLeast)
		}
		if unread := st.BatchesDroppedUnread; tc.surv != nil && (unread != int64(len(kept)) || buf.rewrite != nil) {
			t.Errorf("with Survivors: %d batches dropped unread, pacer %v: want all, not paced", unread, buf.rewrite)
		}
	}
}

// A pass opens its ledgers' readers readersAhead at a time (their
// metadata reads then share metad's barriers), each once; a ledger that
// was opened ahead and failed fails when the pass reaches it.
func TestPassReadersOpenAhead(t *testing.T) {
	ctx := testCtx(t)
	f := newFixture(t)
	env := f.cluster.Env()
	var pieces []compactPiece
	for range readersAhead + 4 {
		w, err := ledger.Create(ctx, env, f.cluster.Options(ledger.CreateOptions{}))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.AppendSync(ctx, []byte("x")); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(ctx); err != nil {
			t.Fatal(err)
		}
		pieces = append(pieces, compactPiece{ledger: &brokerpb.LedgerSegment{LedgerId: w.ID(), LastEntryId: 0}})
	}
	pieces = append(pieces, compactPiece{ledger: &brokerpb.LedgerSegment{LedgerId: 1 << 40, LastEntryId: -1}}) // empty: never read
	id := func(i int) uint64 { return pieces[i].ledger.LedgerId }
	rs := newPassReaders(pieces)
	if r, err := rs.open(ctx, env, id(0)); err != nil || r == nil {
		t.Fatalf("open the first: %v, %v", r, err)
	}
	if len(rs.byID) != readersAhead || len(rs.next) != 4 {
		t.Fatalf("after the first miss: %d open, %d to come; want %d, 4", len(rs.byID), len(rs.next), readersAhead)
	}
	for i := range readersAhead {
		if r, err := rs.open(ctx, env, id(i)); err != nil || r != rs.byID[id(i)] {
			t.Fatalf("ledger %d: %v, %v", i, r, err)
		}
	}
	// One of the rest is deleted before the pass reaches it.
	if err := ledger.Delete(ctx, env, id(readersAhead+2)); err != nil {
		t.Fatal(err)
	}
	if _, err := rs.open(ctx, env, id(readersAhead)); err != nil {
		t.Fatal(err)
	}
	if len(rs.byID) != readersAhead+3 || len(rs.next) != 0 {
		t.Fatalf("after the second miss: %d open, %d to come; want %d, 0", len(rs.byID), len(rs.next), readersAhead+3)
	}
	if _, err := rs.open(ctx, env, id(readersAhead+2)); !errors.Is(err, ledger.ErrNoSuchLedger) {
		t.Fatalf("the deleted ledger: %v", err)
	}
}
