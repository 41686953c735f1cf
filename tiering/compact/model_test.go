package compact

import (
	"bytes"
	"fmt"
	"math/rand"
	"slices"
	"testing"

	"github.com/strata-log/strata/recordbatch"
)

// genLog makes a random log of n batches starting at offset base: keys
// from a small pool (so that keys repeat), ~20% tombstones, ~5% keyless
// records, headers on some records, several producers and codecs.
func genLog(rng *rand.Rand, n int, base, tsStart int64, keys int) [][]byte {
	codecs := []recordbatch.Compression{recordbatch.CompressionNone, recordbatch.CompressionNone,
		recordbatch.CompressionLZ4, recordbatch.CompressionGzip, recordbatch.CompressionSnappy, recordbatch.CompressionZstd}
	var out [][]byte
	ts := tsStart
	for range n {
		nrec := 1 + rng.Intn(8)
		recs := make([]recordbatch.Record, nrec)
		for i := range recs {
			r := &recs[i]
			ts += int64(rng.Intn(50)) - 10 // timestamps need not increase
			r.TimestampMs = ts
			if rng.Intn(20) != 0 {
				r.Key = []byte(fmt.Sprintf("key-%d", rng.Intn(keys)))
			}
			if rng.Intn(5) != 0 {
				r.Value = make([]byte, rng.Intn(40))
				rng.Read(r.Value)
			}
			if rng.Intn(4) == 0 {
				r.Headers = []recordbatch.Header{{Key: "h", Value: []byte{byte(i)}}}
			}
		}
		b := &recordbatch.Batch{BaseOffset: base, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1,
			Compression: codecs[rng.Intn(len(codecs))], Records: recs}
		if pid := rng.Intn(4); pid > 0 {
			b.ProducerID, b.ProducerEpoch, b.BaseSequence = int64(pid), int16(rng.Intn(3)), int32(rng.Intn(1000))
		}
		buf, err := recordbatch.Encode(b)
		if err != nil {
			panic(err)
		}
		recordbatch.SetPartitionLeaderEpoch(buf, int32(rng.Intn(5)))
		out = append(out, buf)
		base += int64(nrec)
	}
	return out
}

// modelRecord is a record the reference model expects to survive.
type modelRecord struct {
	rec     recordbatch.Record
	horizon int64 // tombstones: delete horizon once stamped, else 0
}

// model is the reference: the records of the log, and the original
// header of every batch (by base offset).
type model struct {
	recs    []modelRecord
	headers map[int64]recordbatch.BatchHeader
}

func (md *model) append(t *testing.T, batches [][]byte) {
	for _, b := range batches {
		h, recs, err := recordbatch.Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		md.headers[h.BaseOffset] = h
		for _, r := range recs {
			md.recs = append(md.recs, modelRecord{rec: r})
		}
	}
}

// compact applies the contract to the model: keep keyless records and
// each key's latest record; a tombstone gets a horizon the first time it
// survives and goes once now >= horizon.
func (md *model) compact(nowMs, retentionMs int64) {
	latest := map[string]int64{}
	for _, r := range md.recs {
		if r.rec.Key != nil {
			latest[string(r.rec.Key)] = r.rec.Offset
		}
	}
	kept := md.recs[:0]
	for _, r := range md.recs {
		if r.rec.Key != nil {
			if latest[string(r.rec.Key)] != r.rec.Offset {
				continue
			}
			if r.rec.Value == nil {
				if r.horizon == 0 {
					r.horizon = nowMs + retentionMs
				} else if nowMs >= r.horizon {
					continue
				}
			}
		}
		kept = append(kept, r)
	}
	md.recs = kept
}

// check compares the compacted log with the model.
func (md *model) check(t *testing.T, log [][]byte) {
	t.Helper()
	var headers []recordbatch.BatchHeader
	for _, b := range log {
		h, _ := recordbatch.ParseHeader(b)
		headers = append(headers, h)
	}
	lastOfProducer := LastBatchOfProducer(headers)
	var got []modelRecord
	prevOffset := int64(-1)
	for i, b := range log {
		h, err := recordbatch.Verify(b) // C6: valid CRC
		if err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
		orig, ok := md.headers[h.BaseOffset]
		if !ok {
			t.Fatalf("batch %d: base offset %d is not an original batch's", i, h.BaseOffset)
		}
		// C5: same span and producer state.
		if h.LastOffsetDelta != orig.LastOffsetDelta || h.ProducerID != orig.ProducerID ||
			h.ProducerEpoch != orig.ProducerEpoch || h.BaseSequence != orig.BaseSequence ||
			h.PartitionLeaderEpoch != orig.PartitionLeaderEpoch {
			t.Fatalf("batch %d: header %+v, original %+v", i, h, orig)
		}
		_, recs, err := recordbatch.Decode(b)
		if err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
		if len(recs) == 0 {
			// C5: empty batches only as the last batch of a producer.
			if h.ProducerID < 0 || lastOfProducer[h.ProducerID] != h.LastOffset() {
				t.Fatalf("batch %d at %d: empty but not its producer's last", i, h.BaseOffset)
			}
		} else if h.Compression() != orig.Compression() {
			t.Fatalf("batch %d: codec %v, original %v", i, h.Compression(), orig.Compression())
		}
		horizon, hasHorizon := DeleteHorizon(h)
		for _, r := range recs {
			if r.Offset <= prevOffset || r.Offset < h.BaseOffset || r.Offset > h.LastOffset() {
				t.Fatalf("batch %d: record offset %d after %d, batch [%d, %d]", i, r.Offset, prevOffset, h.BaseOffset, h.LastOffset())
			}
			prevOffset = r.Offset
			m := modelRecord{rec: r}
			if r.Key != nil && r.Value == nil {
				if !hasHorizon {
					t.Fatalf("batch %d: tombstone at %d without a delete horizon", i, r.Offset)
				}
				m.horizon = horizon
			}
			got = append(got, m)
		}
		prevOffset = max(prevOffset, h.LastOffset())
	}
	if len(got) != len(md.recs) {
		t.Fatalf("got %d records, model has %d", len(got), len(md.recs))
	}
	for i := range got {
		g, w := got[i], md.recs[i]
		if g.rec.Offset != w.rec.Offset || !bytes.Equal(g.rec.Key, w.rec.Key) || !bytes.Equal(g.rec.Value, w.rec.Value) ||
			(g.rec.Value == nil) != (w.rec.Value == nil) || g.rec.TimestampMs != w.rec.TimestampMs ||
			g.horizon != w.horizon || !slices.EqualFunc(g.rec.Headers, w.rec.Headers, func(a, b recordbatch.Header) bool {
			return a.Key == b.Key && bytes.Equal(a.Value, b.Value)
		}) {
			t.Fatalf("record %d: got offset %d key %q ts %d horizon %d, want offset %d key %q ts %d horizon %d",
				i, g.rec.Offset, g.rec.Key, g.rec.TimestampMs, g.horizon, w.rec.Offset, w.rec.Key, w.rec.TimestampMs, w.horizon)
		}
	}
}

// passStats sums the stats of every fullPass, to check that the random
// logs reach every case.
var passStats Stats

// fullPass compacts the whole log with one map big enough for it, with
// and without Survivors: both must give the same batches and stats, the
// first dropping some batches unread.
func fullPass(t *testing.T, log [][]byte, nowMs, retentionMs int64) [][]byte {
	t.Helper()
	m := NewOffsetMap(1 << 20)
	end := lastOffset(t, log) + 1
	surv := NewSurvivors(0)
	res, err := Plan(m, log, end, Options{Survivors: surv})
	if err != nil || res.IndexedEnd != end || res.Full {
		t.Fatalf("Plan: %+v, %v", res, err)
	}
	surv.AddLatest(m, res.IndexedEnd)
	opt := Options{NowMs: nowMs, DeleteRetentionMs: retentionMs}
	out, st, err := CompactBatches(log, m, opt, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st.BatchesIn != int64(len(log)) || st.BatchesOut != int64(len(out)) || st.BatchesDroppedUnread != 0 {
		t.Fatalf("stats %+v for %d batches in, %d out", st, len(log), len(out))
	}
	opt.Survivors = surv
	out2, st2, err := CompactBatches(log, m, opt, nil)
	if err != nil {
		t.Fatal(err)
	}
	unread := st2.BatchesDroppedUnread
	st2.BatchesDroppedUnread = 0
	if st2 != st || !slices.EqualFunc(out, out2, bytes.Equal) {
		t.Fatalf("with Survivors: %d batches, stats %+v; without: %d batches, stats %+v", len(out2), st2, len(out), st)
	}
	st.BatchesDroppedUnread = unread
	passStats.Add(st)
	return out
}

func lastOffset(t *testing.T, log [][]byte) int64 {
	h, err := recordbatch.ParseHeader(log[len(log)-1])
	if err != nil {
		t.Fatal(err)
	}
	return h.LastOffset()
}

// TestModel runs rounds of compaction over a growing log, with clock
// steps around the delete horizon, against the reference model
// (C1-C6).
func TestModel(t *testing.T) {
	const retentionMs = 1000
	for seed := int64(1); seed <= 150; seed++ {
		rng := rand.New(rand.NewSource(seed))
		md := &model{headers: map[int64]recordbatch.BatchHeader{}}
		log := genLog(rng, 5+rng.Intn(30), 0, 1_000_000, 2+rng.Intn(20))
		md.append(t, log)
		now := int64(2_000_000)
		for round := range 6 {
			if round%2 == 1 { // new data between some rounds
				more := genLog(rng, 1+rng.Intn(10), lastOffset(t, log)+1, now-500, 2+rng.Intn(20))
				md.append(t, more)
				log = append(log, more...)
			}
			log = fullPass(t, log, now, retentionMs)
			md.compact(now, retentionMs)
			md.check(t, log)
			if t.Failed() {
				t.Fatalf("seed %d round %d", seed, round)
			}
			// Land just before, on, or past the horizons stamped so far.
			now += []int64{retentionMs - 1, 1, retentionMs / 2, retentionMs * 2}[rng.Intn(4)]
		}
	}
	st := passStats
	t.Logf("%+v", st)
	if st.TombstonesDropped == 0 || st.HorizonsStamped == 0 || st.EmptyBatchesKept == 0 ||
		st.BatchesRewritten == 0 || st.BatchesOut == st.BatchesIn || st.BatchesOut == st.BatchesRewritten ||
		st.BatchesDroppedUnread == 0 {
		t.Fatalf("the random logs miss a case: %+v", st)
	}
}

// TestTwoPassesEqualOne: a map too small for the dirty range makes Plan
// stop early; passes that each continue from the last IndexedEnd give
// byte for byte what one pass with a big map gives (C8).
func TestTwoPassesEqualOne(t *testing.T) {
	for seed := int64(1); seed <= 40; seed++ {
		rng := rand.New(rand.NewSource(seed))
		log := genLog(rng, 40, 0, 1_000_000, 200)
		const now, retention = 2_000_000, 1000
		want := fullPass(t, log, now, retention)

		var headers []recordbatch.BatchHeader
		for _, b := range log {
			h, _ := recordbatch.ParseHeader(b)
			headers = append(headers, h)
		}
		lastOfProducer := LastBatchOfProducer(headers)
		end := lastOffset(t, log) + 1
		m := NewOffsetMap(40 * slotBytes) // 32 keys
		cleaned, passes := int64(0), 0
		for cleaned < end {
			passes++
			m.Reset()
			var dirty [][]byte
			for _, b := range log {
				if h, _ := recordbatch.ParseHeader(b); h.BaseOffset >= cleaned {
					dirty = append(dirty, b)
				}
			}
			// Odd seeds drop what they can by header.
			var surv *Survivors
			if seed%2 == 1 {
				surv = NewSurvivors(cleaned)
			}
			res, err := Plan(m, dirty, end, Options{Survivors: surv})
			if err != nil {
				t.Fatal(err)
			}
			if surv != nil {
				surv.AddLatest(m, res.IndexedEnd)
			}
			if res.IndexedEnd <= cleaned {
				t.Fatalf("seed %d: no progress at %d", seed, cleaned)
			}
			var head, tail [][]byte
			for _, b := range log {
				if h, _ := recordbatch.ParseHeader(b); h.LastOffset() < res.IndexedEnd {
					head = append(head, b)
				} else {
					tail = append(tail, b)
				}
			}
			head, _, err = CompactBatches(head, m, Options{NowMs: now, DeleteRetentionMs: retention, Survivors: surv}, lastOfProducer)
			if err != nil {
				t.Fatal(err)
			}
			log = append(head, tail...)
			cleaned = res.IndexedEnd
		}
		if passes < 2 {
			t.Fatalf("seed %d: the small map took %d pass", seed, passes)
		}
		if len(log) != len(want) {
			t.Fatalf("seed %d: %d batches after %d passes, one pass gives %d", seed, len(log), passes, len(want))
		}
		for i := range log {
			if !bytes.Equal(log[i], want[i]) {
				t.Fatalf("seed %d: batch %d differs after %d passes", seed, i, passes)
			}
		}
	}
}

// TestSurvivorsJudgeOnlyTheIndexedRange: Rewrite drops by header only
// the batches wholly inside [from, end): a batch straddling from, or at
// or past the IndexedEnd of a map that filled, is decoded (its keys may
// not be in the map), so a rewrite of the whole log gives what it gives
// without Survivors. A range beyond maxSurvivorOffsets drops nothing.
func TestSurvivorsJudgeOnlyTheIndexedRange(t *testing.T) {
	var unread, full int64
	for seed := int64(1); seed <= 40; seed++ {
		rng := rand.New(rand.NewSource(seed))
		log := genLog(rng, 40, 0, 1_000_000, 34)
		// from inside the fifth batch; the map fills before the end.
		h4, _ := recordbatch.ParseHeader(log[4])
		from := h4.BaseOffset + int64(h4.LastOffsetDelta)/2 + 1
		m := NewOffsetMap(40 * slotBytes) // 32 keys
		surv := NewSurvivors(from)
		res, err := Plan(m, log[4:], lastOffset(t, log)+1, Options{Survivors: surv})
		if err != nil {
			t.Fatal(err)
		}
		if res.Full {
			full++
		}
		surv.AddLatest(m, res.IndexedEnd)
		opt := Options{NowMs: 2_000_000, DeleteRetentionMs: 1000}
		want, wst, err := CompactBatches(log, m, opt, nil)
		if err != nil {
			t.Fatal(err)
		}
		opt.Survivors = surv
		got, gst, err := CompactBatches(log, m, opt, nil)
		if err != nil {
			t.Fatal(err)
		}
		unread += gst.BatchesDroppedUnread
		gst.BatchesDroppedUnread = 0
		if gst != wst || !slices.EqualFunc(got, want, bytes.Equal) {
			t.Fatalf("seed %d: with Survivors %d batches %+v, without %d batches %+v", seed, len(got), gst, len(want), wst)
		}
	}
	if unread == 0 || full == 0 {
		t.Fatalf("the random logs miss a case: %d batches dropped unread, %d maps filled", unread, full)
	}
	s := NewSurvivors(0)
	s.keep(maxSurvivorOffsets, maxSurvivorOffsets)
	s.AddLatest(NewOffsetMap(1<<10), maxSurvivorOffsets+1)
	batch, err := recordbatch.Encode(&recordbatch.Batch{BaseOffset: 5, ProducerID: -1, Records: []recordbatch.Record{{Key: []byte("k")}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s.drop(batch, Options{}); ok || s.bits != nil {
		t.Fatal("a Survivors over more than maxSurvivorOffsets offsets dropped a batch or kept its bits")
	}
}
