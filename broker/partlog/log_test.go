package partlog

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/strata-log/strata/internal/testwait"
	"github.com/strata-log/strata/metad/metaclient"
	"github.com/strata-log/strata/recordbatch"
)

func TestAppendFetchRoundTrip(t *testing.T) {
	f := NewFixture(t)
	l := f.Open(f.Config(1))
	r := MustAppend(t, l, Batch(t, 1000, "a", "b", "c"), AcksQuorum)
	if r.BaseOffset != 0 || r.LastOffset != 2 || r.Duplicate {
		t.Fatalf("first append %+v, want offsets 0..2", r)
	}
	r = MustAppend(t, l, Batch(t, 2000, "d"), AcksQuorum)
	if r.BaseOffset != 3 || r.LastOffset != 3 {
		t.Fatalf("second append %+v, want offset 3", r)
	}
	if hw := l.HighWatermark(); hw != 4 {
		t.Fatalf("HW %d, want 4", hw)
	}
	res, err := l.Fetch(Ctx(t), 1, 1<<20, 0)
	if err != nil {
		t.Fatal(err)
	}
	if res.HighWatermark != 4 || res.LogStartOffset != 0 {
		t.Fatalf("fetch result %+v", res)
	}
	recs := DecodeAll(t, res.Records())
	var got []string
	for _, r := range recs {
		got = append(got, fmt.Sprintf("%d=%s", r.Offset, r.Value))
	}
	if want := "[0=a 1=b 2=c 3=d]"; fmt.Sprint(got) != want {
		t.Fatalf("fetched %v, want %s (whole batches)", got, want)
	}
	batches, _ := recordbatch.Split(res.Records())
	if h, _ := recordbatch.ParseHeader(batches[1]); h.PartitionLeaderEpoch != 1 {
		t.Errorf("leader epoch %d, want the owner epoch 1", h.PartitionLeaderEpoch)
	}
	if f.Cache.Bytes() == 0 {
		t.Errorf("tail cache empty after acknowledged appends")
	}
}

func TestAppendRejectsBadBatches(t *testing.T) {
	f := NewFixture(t)
	cfg := f.Config(1)
	cfg.MaxBatchBytes = 200
	l := f.Open(cfg)
	b := Batch(t, 1, "x")
	b[len(b)-1] ^= 0xff
	if _, err := l.Append(Ctx(t), b, AcksQuorum); !errors.Is(err, ErrCorruptBatch) {
		t.Errorf("corrupt batch: %v, want ErrCorruptBatch", err)
	}
	if _, err := l.Append(Ctx(t), Batch(t, 1, string(make([]byte, 300))), AcksQuorum); !errors.Is(err, ErrTooLarge) {
		t.Errorf("large batch: %v, want ErrTooLarge", err)
	}
	if _, err := l.Append(Ctx(t), []byte("short"), AcksQuorum); !errors.Is(err, ErrCorruptBatch) {
		t.Errorf("short batch: %v, want ErrCorruptBatch", err)
	}
	if hw := l.HighWatermark(); hw != 0 {
		t.Errorf("HW %d after rejected batches, want 0", hw)
	}
}

// Offsets are dense across many batches of varying sizes.
func TestOffsetsDense(t *testing.T) {
	f := NewFixture(t)
	l := f.Open(f.Config(1))
	next := int64(0)
	for i := range 60 {
		vals := make([]string, 1+i%4)
		for j := range vals {
			vals[j] = fmt.Sprintf("v%d-%d", i, j)
		}
		r := MustAppend(t, l, Batch(t, int64(i), vals...), AcksQuorum)
		if r.BaseOffset != next || r.LastOffset != next+int64(len(vals))-1 {
			t.Fatalf("batch %d: offsets %d..%d, want %d..", i, r.BaseOffset, r.LastOffset, next)
		}
		next = r.LastOffset + 1
	}
	recs := FetchAll(t, l, 0)
	for i, r := range recs {
		if r.Offset != int64(i) {
			t.Fatalf("record %d has offset %d", i, r.Offset)
		}
	}
	if int64(len(recs)) != next {
		t.Fatalf("fetched %d records, want %d", len(recs), next)
	}
}

// appendN appends n batches of 3 records "r<offset>", timestamps 10*offset.
func AppendN(t *testing.T, l *Log, n int) {
	t.Helper()
	for range n {
		base := l.HighWatermark()
		vals := []string{fmt.Sprintf("r%d", base), fmt.Sprintf("r%d", base+1), fmt.Sprintf("r%d", base+2)}
		recs := make([]recordbatch.Record, 3)
		for i := range recs {
			recs[i] = recordbatch.Record{TimestampMs: 10 * (base + int64(i)), Value: []byte(vals[i])}
		}
		b, err := recordbatch.Encode(&recordbatch.Batch{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1, Records: recs})
		if err != nil {
			t.Fatal(err)
		}
		MustAppend(t, l, b, AcksQuorum)
	}
}

// rollNow rolls the open segment if it is due.
func RollNow(t *testing.T, l *Log) {
	t.Helper()
	if err := l.MaybeRoll(Ctx(t)); err != nil {
		t.Fatalf("roll: %v", err)
	}
}

// Roll by size, then fetch at every offset: the first record returned at
// or after the offset is exactly that offset's, from the tail cache, and
// from the bookies (a fresh cache) through the indexes.
func TestRollBySizeFetchEveryOffset(t *testing.T) {
	f := NewFixture(t)
	cfg := f.Config(1)
	cfg.SegmentBytes = 600
	cfg.IndexIntervalBytes = 200
	l := f.Open(cfg)
	for range 12 {
		AppendN(t, l, 3)
		RollNow(t, l)
	}
	pl := l.Describe()
	if len(pl.Segments) < 5 {
		t.Fatalf("%d segments after rolls, want several: %v", len(pl.Segments), pl.Segments)
	}
	for i, s := range pl.Segments[:len(pl.Segments)-1] {
		if !s.Closed || s.LastEntryId < 0 || s.Bytes == 0 || s.MaxTimestampMs != 10*s.LastOffset {
			t.Errorf("segment %d: %v", i, s)
		}
		if i > 0 && s.FirstOffset != pl.Segments[i-1].LastOffset+1 {
			t.Errorf("segment %d starts at %d, previous ends at %d", i, s.FirstOffset, pl.Segments[i-1].LastOffset)
		}
		idx, err := readIndex(Ctx(t), f.Store, s.LedgerId)
		if err != nil || len(idx.Points) == 0 || idx.Points[0].EntryId != 0 || idx.Points[0].BaseOffset != s.FirstOffset {
			t.Errorf("segment %d index %v, %v", i, idx, err)
		}
	}
	if got := f.Store.kv[PartitionKey("orders", 3)]; got.version < 3 {
		t.Errorf("PartitionLog version %d", got.version)
	}
	check := func(name string, l *Log) {
		hw := l.HighWatermark()
		for off := int64(0); off < hw; off++ {
			res, err := l.Fetch(Ctx(t), off, 1, 0)
			if err != nil {
				t.Fatalf("%s: Fetch(%d): %v", name, off, err)
			}
			found := false
			for _, r := range DecodeAll(t, res.Records()) {
				if r.Offset == off {
					found = string(r.Value) == fmt.Sprintf("r%d", off)
				}
			}
			if !found {
				t.Fatalf("%s: Fetch(%d) did not return that offset's record", name, off)
			}
		}
		if recs := FetchAll(t, l, 0); int64(len(recs)) != hw {
			t.Fatalf("%s: fetched %d records, want %d", name, len(recs), hw)
		}
	}
	check("tail cache", l)
	// The next owner, with an empty cache, reads everything from the
	// bookies. (Close first: l may be rolling in the background.)
	if err := l.Close(Ctx(t)); err != nil {
		t.Fatal(err)
	}
	cfg2 := f.Config(2)
	cfg2.Cache = nil
	cfg2.SegmentBytes = 600
	l2 := f.Open(cfg2)
	check("bookies", l2)
}

func TestListOffset(t *testing.T) {
	f := NewFixture(t)
	cfg := f.Config(1)
	cfg.SegmentBytes = 400
	cfg.IndexIntervalBytes = 150
	l := f.Open(cfg)
	for range 5 {
		AppendN(t, l, 3)
		RollNow(t, l)
	}
	AppendN(t, l, 2) // the open segment has data too
	hw := l.HighWatermark()
	ctx := Ctx(t)
	for _, tc := range []struct {
		ts, wantOff, wantTs int64
	}{
		{-2, 0, -1},
		{-1, hw, -1},
		{0, 0, 0},
		{5, 1, 10},
		{10, 1, 10},
		{10 * (hw - 1), hw - 1, 10 * (hw - 1)},
		{10*(hw-1) + 1, hw, -1},
		{10 * 20, 20, 200},
		{10*20 - 3, 20, 200},
		{10 * (hw - 4), hw - 4, 10 * (hw - 4)},
	} {
		off, ts, err := l.ListOffset(ctx, tc.ts)
		if err != nil || off != tc.wantOff || ts != tc.wantTs {
			t.Errorf("ListOffset(%d) = %d, %d, %v; want %d, %d", tc.ts, off, ts, err, tc.wantOff, tc.wantTs)
		}
	}
	// Every timestamp of every segment, through a cold reader.
	if err := l.Close(Ctx(t)); err != nil {
		t.Fatal(err)
	}
	cfg2 := f.Config(2)
	cfg2.Cache = nil
	l2 := f.Open(cfg2)
	for off := int64(1); off < hw; off++ {
		got, ts, err := l2.ListOffset(ctx, 10*off-1)
		if err != nil || got != off || ts != 10*off {
			t.Fatalf("ListOffset(%d) = %d, %d, %v; want %d", 10*off-1, got, ts, err, off)
		}
	}
}

func TestFetchOutOfRange(t *testing.T) {
	f := NewFixture(t)
	l := f.Open(f.Config(1))
	MustAppend(t, l, Batch(t, 1, "a", "b"), AcksQuorum)
	_, err := l.Fetch(Ctx(t), 3, 100, 0)
	var oor *OutOfRangeError
	if !errors.As(err, &oor) || oor.Offset != 3 || oor.Start != 0 || oor.End != 2 {
		t.Fatalf("Fetch(3): %v, want OutOfRangeError 0..2", err)
	}
	if _, err := l.Fetch(Ctx(t), -1, 100, 0); !errors.As(err, &oor) {
		t.Fatalf("Fetch(-1): %v", err)
	}
	res, err := l.Fetch(Ctx(t), 2, 100, 0)
	if err != nil || len(res.Records()) != 0 || res.HighWatermark != 2 {
		t.Fatalf("Fetch at HW: %+v, %v; want empty", res, err)
	}
}

// A long-poll at the HW returns soon after an append.
func TestFetchLongPoll(t *testing.T) {
	f := NewFixture(t)
	l := f.Open(f.Config(1))
	type result struct {
		res FetchResult
		err error
	}
	done := make(chan result, 1)
	began := time.Now()
	go func() {
		res, err := l.Fetch(Ctx(t), 0, 100, 5*time.Second)
		done <- result{res, err}
	}()
	MustAppend(t, l, Batch(t, 1, "late"), AcksQuorum)
	r := <-done
	if r.err != nil || len(DecodeAll(t, r.res.Records())) != 1 {
		t.Fatalf("long poll: %+v, %v", r.res, r.err)
	}
	if d := time.Since(began); d > 2*time.Second {
		t.Fatalf("long poll took %v", d)
	}
	// With nothing appended it times out empty.
	res, err := l.Fetch(Ctx(t), 1, 100, 20*time.Millisecond)
	if err != nil || len(res.Records()) != 0 {
		t.Fatalf("idle long poll: %+v, %v", res, err)
	}
}

// Crash takeover: B fences A's ledger; A fails; B continues right after
// the last acknowledged record and loses nothing acknowledged.
func TestTakeover(t *testing.T) {
	f := NewFixture(t)
	a := f.Open(f.Config(1))
	AppendN(t, a, 4)
	// An append in flight that reached one bookie only: not acknowledged,
	// so it may or may not survive; the HW of B decides.
	f.Cluster.Bookies.SetManual(true)
	if _, err := a.Append(Ctx(t), Batch(t, 99, "maybe"), AcksNone); err != nil {
		t.Fatal(err)
	}
	inflight := f.Cluster.Bookies.InFlight()
	f.Cluster.Bookies.Deliver(func(a2 ledgerInFlight) bool { return a2.Bookie == inflight[0].Bookie })
	f.Cluster.Bookies.SetManual(false)
	ackedHW := a.HighWatermark()

	b := f.Open(f.Config(2))
	if b.HighWatermark() < ackedHW {
		t.Fatalf("B's HW %d below A's acknowledged HW %d", b.HighWatermark(), ackedHW)
	}
	recs := FetchAll(t, b, 0)
	for i := int64(0); i < ackedHW; i++ {
		if recs[i].Offset != i || string(recs[i].Value) != fmt.Sprintf("r%d", i) {
			t.Fatalf("record %d after takeover: %d=%s", i, recs[i].Offset, recs[i].Value)
		}
	}
	next := b.HighWatermark()
	r := MustAppend(t, b, Batch(t, 5, "from-b"), AcksQuorum)
	if r.BaseOffset != next {
		t.Fatalf("B appended at %d, want %d", r.BaseOffset, next)
	}

	// A is fenced: its next append fails and the log fails.
	f.Cluster.Bookies.DeliverAll()
	_, err := a.Append(Ctx(t), Batch(t, 6, "zombie"), AcksQuorum)
	if !errors.Is(err, ErrFenced) {
		t.Fatalf("A's append after takeover: %v, want ErrFenced", err)
	}
	select {
	case <-a.Failed():
	case <-time.After(WaitTimeout):
		t.Fatal("A did not fail")
	}
	if !errors.Is(a.Err(), ErrFenced) {
		t.Fatalf("A.Err() = %v", a.Err())
	}
	if _, err := a.Append(Ctx(t), Batch(t, 7, "again"), AcksQuorum); !errors.Is(err, ErrFenced) {
		t.Fatalf("A accepts appends after failing: %v", err)
	}
	pl := b.Describe()
	if pl.OwnerEpoch != 2 || !pl.Segments[0].Closed || pl.Segments[len(pl.Segments)-1].Closed {
		t.Fatalf("list after takeover %v", pl)
	}
	// P10: each takeover recorded where its epoch starts.
	if got, want := flat(pl.LeaderEpochs), []int64{1, 0, 2, next}; !equalInts(got, want) {
		t.Fatalf("leader epochs %v, want %v", got, want)
	}
	if e, end := b.EpochEnd(1); e != 1 || end != next {
		t.Fatalf("EpochEnd(1) = %d, %d; want 1, %d", e, end, next)
	}
	// A's Close on a failed log returns its error and touches nothing.
	if err := a.Close(Ctx(t)); !errors.Is(err, ErrFenced) {
		t.Fatalf("A.Close: %v", err)
	}
}

// A takeover writes its claim (the broker's ownership record) and the
// recovered segment's index in the transaction of its list CAS: all of
// them, or none when the CAS loses.
func TestTakeoverClaim(t *testing.T) {
	f := NewFixture(t)
	a := f.Open(f.Config(1))
	AppendN(t, a, 3)
	open := a.Describe().Segments[0].LedgerId
	claim := &Record{Key: "/owners/orders/3", Value: []byte("broker-b"), Lease: 7}

	// Lost: someone writes the list between the read and the CAS.
	lost := f.Config(2)
	lost.Claim = claim
	listWrittenFirst(f)
	if _, err := Open(Ctx(t), lost); !errors.Is(err, ErrConflict) {
		t.Fatalf("Open: %v, want ErrConflict", err)
	}
	f.Store.SetBeforePut(nil)
	for _, key := range []string{claim.Key, IndexKey(open)} {
		if _, _, err := f.Store.Get(Ctx(t), key); !errors.Is(err, metaclient.ErrNotFound) {
			t.Fatalf("%s after a lost takeover: %v, want not found", key, err)
		}
	}

	won := f.Config(3)
	won.Claim = claim
	b := f.Open(won)
	kv := b.Claimed()
	if kv == nil || kv.Key != claim.Key || kv.Version != 1 || kv.Lease != 7 {
		t.Fatalf("Claimed() = %v", kv)
	}
	if v, version, err := f.Store.Get(Ctx(t), claim.Key); err != nil || string(v) != "broker-b" || version != 1 {
		t.Fatalf("claim in the store: %q v%d %v", v, version, err)
	}
	if _, _, err := f.Store.Get(Ctx(t), IndexKey(open)); err != nil {
		t.Fatalf("the recovered segment's index: %v", err)
	}
	if f.Open(f.Config(4)).Claimed() != nil {
		t.Fatal("a log opened without a claim has one")
	}
}

// A takeover of an empty open segment drops it and deletes its ledger.
func TestTakeoverDropsEmptyLedger(t *testing.T) {
	f := NewFixture(t)
	cfg := f.Config(1)
	cfg.SegmentBytes = 1
	a := f.Open(cfg)
	AppendN(t, a, 1) // kicks a background roll
	testwait.Until(t, WaitTimeout, "a background roll", func() bool { return len(a.Describe().Segments) >= 2 })
	emptyID := a.Describe().Segments[1].LedgerId
	b := f.Open(f.Config(2))
	pl := b.Describe()
	if len(pl.Segments) != 1 || pl.Segments[0].LedgerId == emptyID || !pl.Segments[0].Closed {
		t.Fatalf("segments %v: the empty ledger %d should be gone", pl.Segments, emptyID)
	}
	if _, _, ok := f.Cluster.Meta.Ledger(emptyID); ok {
		t.Fatalf("empty ledger %d not deleted", emptyID)
	}
	if b.HighWatermark() != 3 {
		t.Fatalf("HW %d", b.HighWatermark())
	}
}

// A takeover whose CAS landed but whose answer was lost (a context
// cancelled mid-call, a metad leader change) must not delete the ledger
// it created: the stored list may name it. The next takeover recovers the
// log, not "no such ledger".
func TestTakeoverUnknownOutcomeKeepsItsLedger(t *testing.T) {
	f := NewFixture(t)
	a := f.Open(f.Config(1))
	AppendN(t, a, 3)
	hw := a.HighWatermark()
	if err := a.Close(Ctx(t)); err != nil {
		t.Fatal(err)
	}
	f.Store.SetAfterPut(func(key string) error {
		if key == PartitionKey("orders", 3) {
			return errors.New("the answer was lost")
		}
		return nil
	})
	if _, err := Open(Ctx(t), f.Config(2)); !errors.Is(err, ErrUnknownOutcome) {
		t.Fatalf("Open with its CAS answer lost: %v, want ErrUnknownOutcome", err)
	}
	f.Store.SetAfterPut(nil)
	pl, _, err := ReadPartitionLog(Ctx(t), f.Store, "orders", 3)
	if err != nil || pl.OwnerEpoch != 2 {
		t.Fatalf("stored list %v, %v: want the lost CAS's (epoch 2)", pl, err)
	}
	open := pl.Segments[len(pl.Segments)-1]
	if _, _, ok := f.Cluster.Meta.Ledger(open.LedgerId); !ok {
		t.Fatalf("the listed ledger %d was deleted", open.LedgerId)
	}
	c := f.Open(f.Config(3))
	if c.HighWatermark() != hw {
		t.Fatalf("HW %d after the next takeover, want %d", c.HighWatermark(), hw)
	}
	if recs := FetchAll(t, c, 0); int64(len(recs)) != hw {
		t.Fatalf("%d records after the next takeover, want %d", len(recs), hw)
	}
}

// A clean Close then Open elsewhere continues exactly.
func TestCloseThenOpen(t *testing.T) {
	f := NewFixture(t)
	a := f.Open(f.Config(1))
	AppendN(t, a, 3)
	if err := a.Close(Ctx(t)); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := a.Append(Ctx(t), Batch(t, 1, "x"), AcksQuorum); !errors.Is(err, ErrClosed) {
		t.Fatalf("append after Close: %v", err)
	}
	select {
	case <-a.Failed():
		t.Fatal("a clean Close failed the log")
	default:
	}
	pl, _, err := ReadPartitionLog(Ctx(t), f.Store, "orders", 3)
	if err != nil || len(pl.Segments) != 1 || !pl.Segments[0].Closed || pl.Segments[0].LastOffset != 8 {
		t.Fatalf("list after Close: %v, %v", pl, err)
	}
	b := f.Open(f.Config(2))
	r := MustAppend(t, b, Batch(t, 1, "next"), AcksQuorum)
	if r.BaseOffset != 9 {
		t.Fatalf("B appended at %d, want 9", r.BaseOffset)
	}
	// Close with an empty open segment drops it.
	b2 := f.Open(f.Config(2)) // takes over from b (same epoch is allowed)
	if err := b2.Close(Ctx(t)); err != nil {
		t.Fatal(err)
	}
	pl, _, _ = ReadPartitionLog(Ctx(t), f.Store, "orders", 3)
	for _, s := range pl.Segments {
		if !s.Closed || s.LastOffset < s.FirstOffset {
			t.Fatalf("after closing an empty segment: %v", pl.Segments)
		}
	}
}

func TestOpenRefusesOlderEpoch(t *testing.T) {
	f := NewFixture(t)
	f.Open(f.Config(5))
	if _, err := Open(Ctx(t), f.Config(4)); !errors.Is(err, ErrFenced) {
		t.Fatalf("Open with an older epoch: %v, want ErrFenced", err)
	}
}

// listWrittenFirst makes someone else write the list of orders/3 before
// each of the log's writes of it, so that its CAS loses.
func listWrittenFirst(f *Fixture) {
	f.Store.SetBeforePut(func(key string) error {
		if key == PartitionKey("orders", 3) {
			f.Store.mu.Lock()
			v := f.Store.kv[key]
			v.version++
			f.Store.kv[key] = v
			f.Store.mu.Unlock()
		}
		return nil
	})
}

// A lost CAS fails the log (opening a ledger for an append, a roll) or
// the takeover.
func TestCASConflict(t *testing.T) {
	t.Run("first append", func(t *testing.T) {
		f := NewFixture(t)
		l := f.Open(f.Config(1))
		listWrittenFirst(f)
		if _, err := l.Append(Ctx(t), Batch(t, 1, "x"), AcksQuorum); !errors.Is(err, ErrConflict) {
			t.Fatalf("append whose ledger's CAS loses: %v, want ErrConflict", err)
		}
		if !errors.Is(l.Err(), ErrConflict) {
			t.Fatalf("Err() = %v, want ErrConflict", l.Err())
		}
		if ids, _ := f.Cluster.Meta.List(Ctx(t)); len(ids) != 0 {
			t.Fatalf("ledgers %v left: no list names them", ids)
		}
	})
	t.Run("roll", func(t *testing.T) {
		f := NewFixture(t)
		cfg := f.Config(1)
		cfg.SegmentBytes = 1
		l := f.Open(cfg)
		MustAppend(t, l, Batch(t, 1, "first"), AcksQuorum) // lists its ledger (P8)
		// Whatever roll the first append kicked has happened or waits
		// for appendSem; take it so the next roll's CAS is the one that
		// loses.
		RollNow(t, l)
		listWrittenFirst(f)
		AppendN(t, l, 1) // full: the roll's CAS loses
		select {
		case <-l.Failed():
		case <-time.After(WaitTimeout):
			t.Fatal("log not failed after a lost CAS")
		}
		if !errors.Is(l.Err(), ErrConflict) {
			t.Fatalf("Err() = %v, want ErrConflict", l.Err())
		}
		if _, err := l.Append(Ctx(t), Batch(t, 1, "x"), AcksQuorum); !errors.Is(err, ErrConflict) {
			t.Fatalf("append after a lost CAS: %v", err)
		}
	})
	t.Run("open", func(t *testing.T) {
		f := NewFixture(t)
		f.Store.SetBeforePut(func(key string) error {
			if key == PartitionKey("orders", 3) {
				f.Store.SetBeforePut(nil)
				_, err := f.Store.Put(context.Background(), key, []byte{}, 0)
				return err
			}
			return nil
		})
		if _, err := Open(Ctx(t), f.Config(1)); !errors.Is(err, ErrConflict) {
			t.Fatalf("Open: %v, want ErrConflict", err)
		}
		if ids, _ := f.Cluster.Meta.List(Ctx(t)); len(ids) != 0 {
			t.Fatalf("ledgers %v left after a lost takeover", ids)
		}
	})
}

func TestIdleAndAgeRoll(t *testing.T) {
	f := NewFixture(t)
	cfg := f.Config(1)
	cfg.IdleRoll = time.Minute
	cfg.SegmentAge = time.Hour
	l := f.Open(cfg)
	f.Clock.Advance(2 * time.Minute)
	RollNow(t, l)
	if n := len(l.Describe().Segments); n != 0 {
		t.Fatalf("a segment before any append (P8): %d segments", n)
	}
	AppendN(t, l, 1)
	f.Clock.Advance(30 * time.Second)
	RollNow(t, l)
	if segs := l.Describe().Segments; len(segs) != 1 || segs[0].Closed {
		t.Fatalf("rolled before idle: %v", segs)
	}
	f.Clock.Advance(31 * time.Second)
	RollNow(t, l)
	if segs := l.Describe().Segments; len(segs) != 1 || !segs[0].Closed {
		t.Fatalf("no idle roll (sealed, nothing open until the next append): %v", segs)
	}
	for range 70 { // busy for over an hour: rolls on age
		AppendN(t, l, 1)
		f.Clock.Advance(time.Minute - time.Second)
	}
	RollNow(t, l)
	// (run may have rolled on age already, and the appends after it
	// opened a third segment.)
	if segs := l.Describe().Segments; len(segs) < 2 || !segs[1].Closed {
		t.Fatalf("no age roll: %v", segs)
	}
}

// An idle roll happens on run's deadline timer alone (RollCheckInterval is
// an hour here), run then ends (no goroutine while idle, P8), and the next
// append starts it again.
func TestIdleRollOnItsDeadline(t *testing.T) {
	f := NewFixture(t)
	cfg := f.Config(1)
	cfg.IdleRoll = 200 * time.Millisecond
	l := f.Open(cfg)
	if l.IsRunning() {
		t.Fatal("run started before any append")
	}
	AppendN(t, l, 1)
	if !l.IsRunning() {
		t.Fatal("run not started by the append that opened a segment")
	}
	f.Clock.Advance(time.Second)
	testwait.Until(t, WaitTimeout, "an idle roll without a kick, and run to end", func() bool {
		segs := l.Describe().Segments
		return len(segs) == 1 && segs[0].Closed && !l.IsRunning()
	})
	AppendN(t, l, 1)
	if !l.IsRunning() {
		t.Fatal("run not started again by the next append")
	}
}

// Size rolls happen on their own (run), without a test kick.
func TestSizeRollInBackground(t *testing.T) {
	f := NewFixture(t)
	cfg := f.Config(1)
	cfg.SegmentBytes = 300
	l := f.Open(cfg)
	AppendN(t, l, 5)
	testwait.Until(t, WaitTimeout, "a background roll", func() bool { return len(l.Describe().Segments) >= 2 })
	AppendN(t, l, 1)
	if got := len(FetchAll(t, l, 0)); got != 18 {
		t.Fatalf("%d records", got)
	}
}

func TestIdempotentProducer(t *testing.T) {
	f := NewFixture(t)
	l := f.Open(f.Config(1))
	const pid = 7
	r0 := MustAppend(t, l, IdemBatch(t, pid, 0, 0, 1, "a", "b"), AcksQuorum)
	r1 := MustAppend(t, l, IdemBatch(t, pid, 0, 2, 1, "c"), AcksQuorum)
	MustAppend(t, l, Batch(t, 1, "other"), AcksQuorum)
	dup := MustAppend(t, l, IdemBatch(t, pid, 0, 0, 1, "a", "b"), AcksQuorum)
	if !dup.Duplicate || dup.BaseOffset != r0.BaseOffset || dup.LastOffset != r0.LastOffset {
		t.Fatalf("retry of batch 0: %+v, want %+v duplicate", dup, r0)
	}
	if dup := MustAppend(t, l, IdemBatch(t, pid, 0, 2, 1, "c"), AcksQuorum); !dup.Duplicate || dup.BaseOffset != r1.BaseOffset {
		t.Fatalf("retry of batch 1: %+v", dup)
	}
	if _, err := l.Append(Ctx(t), IdemBatch(t, pid, 0, 5, 1, "gap"), AcksQuorum); !errors.Is(err, ErrOutOfOrderSequence) {
		t.Fatalf("sequence gap: %v", err)
	}
	if _, err := l.Append(Ctx(t), IdemBatch(t, pid, 1, 3, 1, "new epoch, not 0"), AcksQuorum); !errors.Is(err, ErrOutOfOrderSequence) {
		t.Fatalf("new epoch at sequence 3: %v", err)
	}
	MustAppend(t, l, IdemBatch(t, pid, 1, 0, 1, "epoch 1"), AcksQuorum)
	if _, err := l.Append(Ctx(t), IdemBatch(t, pid, 0, 3, 1, "stale"), AcksQuorum); !errors.Is(err, ErrProducerFenced) {
		t.Fatalf("stale epoch: %v", err)
	}
	// A producer the partition does not know starts at sequence 0: a
	// batch further on waits for its predecessors (SequenceGapWait), then
	// is refused, never appended ahead of them (nor, were its state
	// expired, under a sequence the broker cannot check).
	if _, err := l.Append(Ctx(t), IdemBatch(t, 8, 0, 42, 1, "unknown"), AcksQuorum); !errors.Is(err, ErrUnknownProducer) {
		t.Fatalf("unknown producer at sequence 42: %v", err)
	}
	MustAppend(t, l, IdemBatch(t, 8, 0, 0, 1, "new"), AcksQuorum)
	hw := l.HighWatermark()

	// Across a crash takeover the state is rebuilt from the log.
	b := f.Open(f.Config(2))
	if d := MustAppend(t, b, IdemBatch(t, pid, 1, 0, 1, "epoch 1"), AcksQuorum); !d.Duplicate || d.BaseOffset != 4 {
		t.Fatalf("retry after takeover: %+v, want duplicate at 4", d)
	}
	if _, err := b.Append(Ctx(t), IdemBatch(t, pid, 0, 3, 1, "stale"), AcksQuorum); !errors.Is(err, ErrProducerFenced) {
		t.Fatalf("stale epoch after takeover: %v", err)
	}
	if r := MustAppend(t, b, IdemBatch(t, 8, 0, 1, 1, "next"), AcksQuorum); r.Duplicate || r.BaseOffset != hw {
		t.Fatalf("next batch after takeover: %+v, want offset %d", r, hw)
	}
	// And across a clean Close (the snapshot in the list).
	if err := b.Close(Ctx(t)); err != nil {
		t.Fatal(err)
	}
	c := f.Open(f.Config(3))
	if d := MustAppend(t, c, IdemBatch(t, 8, 0, 1, 1, "next"), AcksQuorum); !d.Duplicate || d.BaseOffset != hw {
		t.Fatalf("retry after Close/Open: %+v", d)
	}
	pl := c.Describe()
	if len(pl.Producers) != 2 {
		t.Fatalf("producer snapshot %v", pl.Producers)
	}
}

// Only the last 5 batches are remembered.
func TestProducerWindow(t *testing.T) {
	f := NewFixture(t)
	l := f.Open(f.Config(1))
	for seq := range int32(7) {
		MustAppend(t, l, IdemBatch(t, 1, 0, seq, 1, "x"), AcksQuorum)
	}
	if d := MustAppend(t, l, IdemBatch(t, 1, 0, 2, 1, "x"), AcksQuorum); !d.Duplicate || d.BaseOffset != 2 {
		t.Fatalf("retry of the 5th latest: %+v", d)
	}
	if _, err := l.Append(Ctx(t), IdemBatch(t, 1, 0, 1, 1, "x"), AcksQuorum); !errors.Is(err, ErrOutOfOrderSequence) {
		t.Fatalf("retry of a forgotten batch: %v, want ErrOutOfOrderSequence", err)
	}
}

// A retry of a batch still in flight waits for the original.
func TestDuplicateOfInFlight(t *testing.T) {
	f := NewFixture(t)
	l := f.Open(f.Config(1))
	f.Cluster.Bookies.SetManual(true)
	first := make(chan AppendResult, 1)
	go func() {
		r, _ := l.Append(Ctx(t), IdemBatch(t, 1, 0, 0, 1, "a"), AcksQuorum)
		first <- r
	}()
	testwait.Until(t, WaitTimeout, "appends in flight", func() bool { return len(f.Cluster.Bookies.InFlight()) > 0 })
	// The retry's place is fixed (a duplicate of the original) when
	// Enqueue returns; its Wait must not answer while the original is
	// unacknowledged: with a context already done it reports that.
	a, err := l.Enqueue(Ctx(t), IdemBatch(t, 1, 0, 0, 1, "a"), AcksQuorum)
	if err != nil || a.dup == nil {
		t.Fatalf("retry: %v, duplicate %v", err, a != nil && a.dup != nil)
	}
	done, cancel := context.WithCancel(Ctx(t))
	cancel()
	if r, err := a.Wait(done); !errors.Is(err, ErrUnknownOutcome) {
		t.Fatalf("retry answered %+v, %v before the original was acknowledged", r, err)
	}
	retry := make(chan AppendResult, 1)
	go func() {
		r, err := a.Wait(Ctx(t))
		if err != nil {
			t.Error(err)
		}
		retry <- r
	}()
	f.Cluster.Bookies.SetManual(false)
	f.Cluster.Bookies.DeliverAll()
	if r := <-retry; !r.Duplicate || r.BaseOffset != 0 {
		t.Fatalf("retry: %+v", r)
	}
	if r := <-first; r.Duplicate || r.BaseOffset != 0 {
		t.Fatalf("original: %+v", r)
	}
	if hw := l.HighWatermark(); hw != 1 {
		t.Fatalf("HW %d: the retry was appended", hw)
	}
}

func TestAcks(t *testing.T) {
	f := NewFixture(t)
	l := f.Open(f.Config(1))
	if r := MustAppend(t, l, Batch(t, 1, "none"), AcksNone); r.BaseOffset != -1 {
		t.Fatalf("AcksNone: %+v", r)
	}
	f.Cluster.Bookies.SetManual(true)
	ensemble := f.Cluster.Meta
	md, _, _ := ensemble.Ledger(l.Describe().Segments[0].LedgerId)
	bookies := md.Fragments[0].Bookies

	run := func(acks Acks) chan error {
		done := make(chan error, 1)
		go func() {
			_, err := l.Append(Ctx(t), Batch(t, 1, acks.String()), acks)
			done <- err
		}()
		testwait.Until(t, WaitTimeout, "appends in flight", func() bool { return len(f.Cluster.Bookies.InFlight()) >= 3 })
		return done
	}
	quiet := func(done chan error, what string) {
		t.Helper()
		select {
		case err := <-done:
			t.Fatalf("%s answered (%v) too early", what, err)
		case <-time.After(10 * time.Millisecond): // a negative check: nothing answers within 10 ms
		}
	}
	to := func(b string) func(ledgerInFlight) bool { return func(a ledgerInFlight) bool { return a.Bookie == b } }

	// AcksOne: one bookie suffices; the HW waits for the quorum.
	hw := l.HighWatermark()
	done := run(AcksOne)
	quiet(done, "AcksOne with no bookie")
	f.Cluster.Bookies.Deliver(to(bookies[0]))
	if err := <-done; err != nil {
		t.Fatalf("AcksOne: %v", err)
	}
	if l.HighWatermark() != hw {
		t.Fatalf("HW moved at one bookie")
	}
	f.Cluster.Bookies.DeliverAll()

	// AcksAll waits for the third bookie; the HW moves at the second.
	done = run(AcksAll)
	f.Cluster.Bookies.Deliver(to(bookies[0]))
	f.Cluster.Bookies.Deliver(to(bookies[1]))
	quiet(done, "AcksAll with two bookies")
	// The HW moves once the quorum's answers are processed: wait for it
	// rather than assume the 10 ms of quiet above were enough.
	testwait.Until(t, WaitTimeout, fmt.Sprintf("the HW at the quorum (%d)", hw+2), func() bool { return l.HighWatermark() == hw+2 })
	f.Cluster.Bookies.Deliver(to(bookies[2]))
	if err := <-done; err != nil {
		t.Fatalf("AcksAll: %v", err)
	}

	// AcksQuorum: two bookies.
	done = run(AcksQuorum)
	f.Cluster.Bookies.Deliver(to(bookies[2]))
	quiet(done, "AcksQuorum with one bookie")
	f.Cluster.Bookies.Deliver(to(bookies[1]))
	if err := <-done; err != nil {
		t.Fatalf("AcksQuorum: %v", err)
	}
	f.Cluster.Bookies.SetManual(false)
	f.Cluster.Bookies.DeliverAll()
}

// A write error fails the log and every pending append.
func TestWriteFailureFailsLog(t *testing.T) {
	f := NewFixture(t)
	l := f.Open(f.Config(1))
	f.Cluster.Bookies.SetManual(true)
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := l.Append(Ctx(t), Batch(t, 1, "x"), AcksQuorum)
			errs <- err
		}()
	}
	testwait.Until(t, WaitTimeout, "appends in flight", func() bool { return len(f.Cluster.Bookies.InFlight()) >= 6 })
	// Fence the ledger behind the writer's back (a takeover).
	id := l.Describe().Segments[0].LedgerId
	for _, b := range f.Cluster.Bookies.Addrs() {
		_, _ = f.Cluster.Bookies.Fence(Ctx(t), b, id)
	}
	f.Cluster.Bookies.SetManual(false)
	f.Cluster.Bookies.DeliverAll()
	for range 2 {
		if err := <-errs; !errors.Is(err, ErrFenced) {
			t.Fatalf("pending append: %v, want ErrFenced", err)
		}
	}
	testwait.Recv(t, WaitTimeout, "the log to fail", l.Failed())
	// A read of a failed log is told to look elsewhere (ErrClosed: the
	// broker answers NOT_OWNER, retryable), the cause in the message.
	if _, err := l.Fetch(Ctx(t), 0, 10, 0); !errors.Is(err, ErrClosed) || !strings.Contains(err.Error(), "fenced") {
		t.Fatalf("fetch on a failed log: %v, want ErrClosed naming the cause", err)
	}
}

func TestTailCacheEviction(t *testing.T) {
	c := NewTailCache(10, nil)
	c.Add(1, 0, make([]byte, 4))
	c.Add(1, 1, make([]byte, 4))
	c.Add(2, 0, make([]byte, 4)) // evicts (1,0)
	if _, ok := c.Get(1, 0); ok {
		t.Fatal("oldest entry not evicted")
	}
	if _, ok := c.Get(1, 1); !ok {
		t.Fatal("entry (1,1) evicted")
	}
	if c.Bytes() != 8 {
		t.Fatalf("bytes %d", c.Bytes())
	}
	c.Add(3, 0, make([]byte, 11)) // larger than the cache: ignored
	if c.Bytes() != 8 {
		t.Fatalf("bytes %d", c.Bytes())
	}
}

func TestKeys(t *testing.T) {
	if got := PartitionKey("t.x", 12); got != "/strata/partitions/t.x/12" {
		t.Error(got)
	}
	if got := IndexKey(42); got != "/strata/ledger-index/00000000000000000042" {
		t.Error(got)
	}
}

func TestSegmentIndex(t *testing.T) {
	var entries []entryInfo
	for i := range 10 {
		h := recordbatch.BatchHeader{BaseOffset: int64(10 * i), LastOffsetDelta: 9, MaxTimestamp: int64(100 * i)}
		if i == 3 {
			h.MaxTimestamp = 1000 // out of order: running max
		}
		entries = append(entries, newEntryInfo(h, 100, entries))
	}
	idx := buildIndex(entries, 250)
	var got []string
	for _, p := range idx.Points {
		got = append(got, fmt.Sprintf("%d@%d/%d", p.EntryId, p.BaseOffset, p.MaxTimestampMs))
	}
	if want := "[0@0/0 3@30/1000 6@60/1000 9@90/1000]"; fmt.Sprint(got) != want {
		t.Fatalf("index %v, want %s", got, want)
	}
	if e := indexStartForOffset(idx, 59); e != 3 {
		t.Errorf("start for 59: %d", e)
	}
	if e := indexStartForTime(idx, 150); e != 0 {
		t.Errorf("start for ts 150: %d", e)
	}
	seg := segmentProto(5, 0, 1, entries, true)
	if seg.LastOffset != 99 || seg.LastEntryId != 9 || seg.Bytes != 1000 || seg.MaxTimestampMs != 1000 {
		t.Errorf("segment %v", seg)
	}
}

// Without a tail cache the open segment is read back from the bookies (the
// owner tells the reader its LAC), with read-ahead serving the next
// fetches: a consumer reading one batch per fetch reads the segment from
// the bookies once.
func TestFetchOpenSegmentFromBookies(t *testing.T) {
	f := NewFixture(t)
	cfg := f.Config(1)
	cfg.Cache = nil
	reg := prometheus.NewRegistry()
	cfg.Metrics = NewMetrics(reg)
	l := f.Open(cfg)
	AppendN(t, l, 10) // batches of 3 records
	for off := int64(0); off < 30; off += 3 {
		res, err := l.Fetch(Ctx(t), off, 1, 0)
		if err != nil || len(res.Batches) != 1 {
			t.Fatalf("fetch at %d: %d batches, %v", off, len(res.Batches), err)
		}
	}
	segment := 0
	l.mu.Lock()
	for _, e := range l.mu.seg.entries {
		segment += int(e.size)
	}
	l.mu.Unlock()
	if read := counterValue(t, cfg.Metrics.BookieReadBytes); read != float64(segment) {
		t.Fatalf("sequential fetches read %v bytes from the bookies for a %d-byte segment: the read-ahead did not serve them", read, segment)
	}
	if got := len(FetchAll(t, l, 0)); got != 30 {
		t.Fatalf("fetched %d records, want 30", got)
	}
	if mfs, err := reg.Gather(); err != nil || len(mfs) < 10 {
		t.Fatalf("metrics: %d families, %v", len(mfs), err)
	}
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// Batches of one producer that arrive out of order (a client pipelines
// several requests; the server handles them concurrently) are appended in
// sequence order: the one ahead waits for its predecessor. The test holds
// the predecessor back until the log says the batch ahead waits for it
// (onSequenceGap), so the batch ahead has arrived first, every time.
func TestSequenceGapWaitsForPredecessor(t *testing.T) {
	f := NewFixture(t)
	cfg := f.Config(1)
	cfg.SequenceGapWait = time.Minute // never reached: the predecessor comes
	l := f.Open(cfg)
	waiting := make(chan struct{}, 1)
	l.onSequenceGap = func() {
		select {
		case waiting <- struct{}{}:
		default:
		}
	}
	MustAppend(t, l, IdemBatch(t, 3, 0, 0, 1, "a"), AcksQuorum)
	second := make(chan AppendResult, 1)
	go func() {
		r, err := l.Append(Ctx(t), IdemBatch(t, 3, 0, 2, 1, "c"), AcksQuorum)
		if err != nil {
			t.Error(err)
		}
		second <- r
	}()
	select {
	case <-waiting:
	case r := <-second:
		t.Fatalf("the batch ahead of its predecessor was appended at once, at %d", r.BaseOffset)
	case <-time.After(WaitTimeout):
		t.Fatal("the batch ahead of its predecessor never waited for it")
	}
	if hw := l.HighWatermark(); hw != 1 {
		t.Fatalf("high watermark %d while the batch ahead waits, want 1", hw)
	}
	first := MustAppend(t, l, IdemBatch(t, 3, 0, 1, 1, "b"), AcksQuorum)
	r := <-second
	if first.BaseOffset != 1 || r.BaseOffset != 2 {
		t.Fatalf("offsets %d and %d, want 1 and 2", first.BaseOffset, r.BaseOffset)
	}
}

// SetLimits applies at once: a smaller max batch size refuses larger
// batches, a smaller segment size rolls the open segment.
func TestSetLimits(t *testing.T) {
	f := NewFixture(t)
	l := f.Open(f.Config(1))
	AppendN(t, l, 3)
	l.SetLimits(Limits{MaxBatchBytes: 80, SegmentBytes: 100})
	if _, err := l.Append(Ctx(t), Batch(t, 1, strings.Repeat("x", 100)), AcksQuorum); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("batch over the new limit: %v", err)
	}
	testwait.Until(t, WaitTimeout, "a roll after the segment size shrank", func() bool { return len(l.Describe().Segments) >= 2 })
	if got := l.Limits(); got.MaxBatchBytes != 80 || got.SegmentBytes != 100 || got.SegmentAge != f.Config(1).withDefaults().SegmentAge {
		t.Fatalf("limits %+v", got)
	}
}

// M1: an append in flight when a new owner fences the log may be kept by
// the new owner's recovery (one bookie holding it is enough), so it fails
// with ErrUnknownOutcome, never as "nothing was written": a plain
// producer's retry is then a possible duplicate it was told about. An
// append refused after the failure was never written: ErrFenced alone.
func TestTakeoverDuringAppendIsUnknownOutcome(t *testing.T) {
	f := NewFixture(t)
	a := f.Open(f.Config(1))
	AppendN(t, a, 3)
	f.Cluster.Bookies.SetManual(true)
	res := make(chan error, 1)
	go func() {
		_, err := a.Append(Ctx(t), Batch(t, 50, "in-flight"), AcksQuorum)
		res <- err
	}()
	var inflight []ledgerInFlight
	testwait.Until(t, WaitTimeout, "the append at 3 bookies", func() bool { inflight = f.Cluster.Bookies.InFlight(); return len(inflight) >= 3 })
	// One bookie stores it; A never hears a quorum.
	f.Cluster.Bookies.Deliver(func(r ledgerInFlight) bool { return r.Bookie == inflight[0].Bookie })
	f.Cluster.Bookies.SetManual(false)

	b := f.Open(f.Config(2))
	f.Cluster.Bookies.DeliverAll()
	err := <-res
	if !errors.Is(err, ErrUnknownOutcome) {
		t.Fatalf("append in flight during the takeover: %v, want ErrUnknownOutcome", err)
	}
	// The new owner's recovery may keep the record A was not told about
	// (one bookie holds it; it does unless a slow run made A's writer
	// replace that bookie first): then it is at the next offset, once.
	recs := FetchAll(t, b, 0)
	switch {
	case len(recs) == 10 && recs[9].Offset == 9 && string(recs[9].Value) == "in-flight":
		t.Log("the new owner kept the in-flight record: a retry would have duplicated it")
	case len(recs) == 9:
		t.Log("the new owner did not keep the in-flight record")
	default:
		t.Fatalf("after takeover: %d records, want the 9 acknowledged and at most the in-flight one at offset 9", len(recs))
	}
	if _, err := a.Append(Ctx(t), Batch(t, 51, "after"), AcksQuorum); !errors.Is(err, ErrFenced) || errors.Is(err, ErrUnknownOutcome) {
		t.Fatalf("append after the failure: %v, want ErrFenced only", err)
	}
}

// M3: tiny batches roll the segment at MaxSegmentEntries entries, long
// before SegmentBytes, so the open segment's memory stays bounded.
func TestRollByEntryCount(t *testing.T) {
	f := NewFixture(t)
	cfg := f.Config(1)
	cfg.MaxSegmentEntries = 4
	l := f.Open(cfg)
	AppendN(t, l, 10)
	pl := l.Describe()
	if len(pl.Segments) != 3 {
		t.Fatalf("%d segments after 10 batches at 4 entries each, want 3: %v", len(pl.Segments), pl.Segments)
	}
	for i, s := range pl.Segments {
		if want := min(int64(3), 9-4*int64(i)); s.LastEntryId != want {
			t.Errorf("segment %d ends at entry %d, want %d", i, s.LastEntryId, want)
		}
	}
	if recs := FetchAll(t, l, 0); len(recs) != 30 {
		t.Fatalf("fetched %d records, want 30", len(recs))
	}
}

// M5: a scan uses what it read from the bookies itself, even when other
// readers push its entries out of the shared read-ahead meanwhile: before,
// each such replacement sent the scan back to the bookies for the same
// entries, so readers at different offsets could starve each other.
func TestScanKeepsItsOwnReadAhead(t *testing.T) {
	f := NewFixture(t)
	cfg := f.Config(1)
	cfg.Cache = nil
	cfg.Metrics = NewMetrics(prometheus.NewRegistry())
	l := f.Open(cfg)
	AppendN(t, l, 10)
	l.mu.Lock()
	segs := segmentRefs(l.mu.pl, &l.mu.seg)
	l.mu.Unlock()
	s := segs[len(segs)-1]
	want := func() int { return 0 }
	other := make([]byte, defaultReadAheadBytes)
	scanned := 0
	err := l.reads.scan(Ctx(t), s, 0, want, func(id int64, _ []byte) (bool, error) {
		scanned++
		// Other readers fill the read-ahead with other entries.
		l.reads.ahead.cache.Add(s.ledgerID+1000, int64(scanned), other)
		return true, nil
	})
	if err != nil || scanned != 10 {
		t.Fatalf("scan: %d entries, %v", scanned, err)
	}
	var total int64
	for _, e := range s.entries {
		total += int64(e.size)
	}
	if read := counterValue(t, cfg.Metrics.BookieReadBytes); read != float64(total) {
		t.Fatalf("read %v bytes from the bookies for a %d-byte segment: the scan read entries again", read, total)
	}
}

// A new producer's second batch that arrives longer than SequenceGapWait
// before its first (an overloaded client or network) is refused, not
// appended ahead of it: before, it was taken for a producer whose state
// had expired and appended, and the first batch then failed as out of
// order, so a client saw an error and its records out of order.
func TestUnknownProducerNeverAppendedAheadOfItsFirstBatch(t *testing.T) {
	f := NewFixture(t)
	l := f.Open(f.Config(1)) // SequenceGapWait: 50 ms
	if _, err := l.Append(Ctx(t), IdemBatch(t, 7, 0, 1, 1, "second"), AcksQuorum); !errors.Is(err, ErrUnknownProducer) {
		t.Fatalf("second batch before the first: %v", err)
	}
	if hw := l.HighWatermark(); hw != 0 {
		t.Fatalf("high watermark %d: the refused batch was appended", hw)
	}
	first := MustAppend(t, l, IdemBatch(t, 7, 0, 0, 1, "first"), AcksQuorum)
	second := MustAppend(t, l, IdemBatch(t, 7, 0, 1, 1, "second"), AcksQuorum)
	if first.BaseOffset != 0 || second.BaseOffset != 1 || second.Duplicate {
		t.Fatalf("first at %d, second at %d (duplicate %v)", first.BaseOffset, second.BaseOffset, second.Duplicate)
	}
}

// A quorum acknowledgement that comes once the owner's authority lapsed
// (its metad session may have expired: a successor may have recovered and
// deleted this ledger, and a bookie's fence does not outlive the deletion)
// does not count: the append is an unknown outcome, the high watermark
// stays, and the log fails.
func TestAckAfterAuthorityLapsedDoesNotCount(t *testing.T) {
	f := NewFixture(t)
	cfg := f.Config(1)
	var valid atomic.Bool
	valid.Store(true)
	cfg.Authority = valid.Load
	l := f.Open(cfg)
	AppendN(t, l, 2)
	hw := l.HighWatermark()
	valid.Store(false)
	_, err := l.Append(Ctx(t), Batch(t, f.Clock.Now().UnixMilli(), "late"), AcksQuorum)
	if !errors.Is(err, ErrAuthorityLost) || !errors.Is(err, ErrUnknownOutcome) {
		t.Fatalf("append after the authority lapsed: %v, want ErrAuthorityLost and ErrUnknownOutcome", err)
	}
	if l.HighWatermark() != hw {
		t.Fatalf("high watermark %d, was %d: the late acknowledgement counted", l.HighWatermark(), hw)
	}
	if _, err := l.Append(Ctx(t), Batch(t, f.Clock.Now().UnixMilli(), "next"), AcksQuorum); !errors.Is(err, ErrAuthorityLost) {
		t.Fatalf("the next append: %v, want the failed log's ErrAuthorityLost", err)
	}
}

// P8: a log holds a ledger only while it is written. A takeover creates
// none (and an idle partition's next takeover recovers nothing); the first
// append creates one and lists it; a roll for age leaves none. When no
// ledger can be created the append fails with ErrNoLedger, nothing is
// written and the log stays healthy: the retry succeeds once bookies are
// back.
func TestLedgerOnlyWhileWritten(t *testing.T) {
	f := NewFixture(t)
	cfg := f.Config(1)
	cfg.SegmentAge = time.Hour
	ledgers := func() int {
		ids, err := f.Cluster.Meta.List(Ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		return len(ids)
	}
	l := f.Open(cfg)
	if n, segs := ledgers(), l.Describe().Segments; n != 0 || len(segs) != 0 {
		t.Fatalf("after a takeover of a new partition: %d ledgers, segments %v; want none", n, segs)
	}
	f.Cluster.Registry.SetUnavailable(true)
	if _, err := l.Append(Ctx(t), Batch(t, 1, "x"), AcksQuorum); !errors.Is(err, ErrNoLedger) {
		t.Fatalf("append with no bookie to create a ledger on: %v, want ErrNoLedger", err)
	}
	if err := l.Err(); err != nil || l.HighWatermark() != 0 || ledgers() != 0 {
		t.Fatalf("after ErrNoLedger: err %v, high watermark %d, %d ledgers; want healthy, 0, 0", err, l.HighWatermark(), ledgers())
	}
	f.Cluster.Registry.SetUnavailable(false)
	MustAppend(t, l, Batch(t, 1, "a"), AcksQuorum)
	MustAppend(t, l, Batch(t, 2, "b"), AcksQuorum)
	if n, segs := ledgers(), l.Describe().Segments; n != 1 || len(segs) != 1 || segs[0].Closed || segs[0].LastOffset != 1 {
		t.Fatalf("after two appends: %d ledgers, segments %v; want one open ledger holding offsets 0-1", n, segs)
	}
	RollByAge(t, f, l)
	if err := l.Close(Ctx(t)); err != nil {
		t.Fatal(err)
	}
	// The next owner finds nothing open: it fences and recovers nothing,
	// creates nothing, and continues the offsets.
	l2 := f.Open(f.Config(2))
	if n, segs := ledgers(), l2.Describe().Segments; n != 1 || len(segs) != 1 || !segs[0].Closed {
		t.Fatalf("after the second takeover: %d ledgers, segments %v; want the one sealed ledger", n, segs)
	}
	if r := MustAppend(t, l2, Batch(t, 3, "c"), AcksQuorum); r.BaseOffset != 2 {
		t.Fatalf("first append after the takeover at offset %d, want 2", r.BaseOffset)
	}
	if got := DescribeAll(FetchAll(t, l2, 0)); strings.Join(got, " ") != "0:=a 1:=b 2:=c" {
		t.Fatalf("records %v", got)
	}
}

// TestAppendRefusedWithoutAckQuorum: once two of the open ledger's three
// bookies failed and no spare is writable (all full, say), an append is
// refused at once with ErrNotEnoughBookies and nothing of it is written,
// instead of waiting for its deadline with an unknown outcome. Once the
// bookies are writable again the writer takes them back and appends go on.
func TestAppendRefusedWithoutAckQuorum(t *testing.T) {
	f := NewFixture(t)
	l := f.Open(f.Config(1))
	MustAppend(t, l, Batch(t, 1, "before"), AcksQuorum)
	l.mu.Lock()
	w := l.mu.writer
	l.mu.Unlock()
	down := f.quorumAndSpares(l)
	f.failBookies(down)
	// The writer learns of the failures from an append it cannot
	// acknowledge (acks=none: handed off, not waited for).
	if _, err := l.Append(Ctx(t), Batch(t, 2, "pending"), AcksNone); err != nil {
		t.Fatal(err)
	}
	testwait.UntilNil(t, WaitTimeout, "the writer to find no ack quorum", func() error {
		if w.CanAcknowledge() {
			return errors.New("it still can acknowledge")
		}
		return nil
	})
	if _, err := l.Append(Ctx(t), Batch(t, 3, "refused"), AcksQuorum); !errors.Is(err, ErrNotEnoughBookies) {
		t.Fatalf("append without an ack quorum: %v, want ErrNotEnoughBookies", err)
	}
	if err := l.Err(); err != nil {
		t.Fatalf("the log failed: %v", err)
	}

	f.restoreBookies(down)
	f.Cluster.Scheduler.Advance(time.Minute) // the writer's timed retry takes them back
	r := MustAppend(t, l, Batch(t, 4, "after"), AcksQuorum)
	got := logValues(t, l)
	if want := []string{"before", "pending", "after"}; !slices.Equal(got, want) || r.BaseOffset != 2 {
		t.Fatalf("log holds %q (last at %d), want %q: the refused append written nowhere", got, r.BaseOffset, want)
	}
}

// TestStalledWriterAnswersAppendsInFlight: an append handed to the writer
// just before two of its three bookies turn read-only (no spare is
// writable either) is answered as soon as the writer finds no spare, with
// ErrNotEnoughBookiesAfterAppend (its outcome is unknown), instead of at
// its deadline, while WaitSettled waits on; a roll that falls due
// meanwhile waits rather than holding appends; and once the bookies are
// writable again the writer writes the entry it kept, so the log holds it
// and WaitSettled answers that it was written.
func TestStalledWriterAnswersAppendsInFlight(t *testing.T) {
	f := NewFixture(t)
	l := f.Open(f.Config(1))
	MustAppend(t, l, Batch(t, 1, "before"), AcksQuorum)
	full := f.quorumAndSpares(l)
	f.failBookies(full)
	// No deadline: only the stall can answer it.
	a, err := l.Enqueue(context.Background(), Batch(t, 2, "in flight"), AcksQuorum)
	if err != nil {
		t.Fatal(err)
	}
	answered, settled := make(chan error, 1), make(chan error, 1)
	go func() {
		_, err := a.Wait(context.Background())
		answered <- err
	}()
	go func() {
		_, err := a.WaitSettled(context.Background())
		settled <- err
	}()
	f.Cluster.Scheduler.RunDue() // the writer looks for a spare and finds none
	err = testwait.Recv(t, WaitTimeout, "the append answered once the writer stalls", answered)
	if !errors.Is(err, ErrNotEnoughBookiesAfterAppend) || !errors.Is(err, ErrUnknownOutcome) {
		t.Fatalf("append in flight on a stalled writer: %v, want ErrNotEnoughBookiesAfterAppend (unknown outcome)", err)
	}
	select {
	case err := <-settled:
		t.Fatalf("WaitSettled answered on the stall: %v", err)
	default:
	}
	if _, err := l.Append(Ctx(t), Batch(t, 3, "refused"), AcksQuorum); !errors.Is(err, ErrNotEnoughBookies) || errors.Is(err, ErrUnknownOutcome) {
		t.Fatalf("append to a stalled writer: %v, want ErrNotEnoughBookies (nothing written)", err)
	}
	f.Clock.Advance(l.Limits().SegmentAge + time.Second) // a roll falls due: it waits
	RollNow(t, l)
	if segs := l.Describe().Segments; segs[len(segs)-1].Closed {
		t.Fatal("the segment rolled while its writer was stalled")
	}
	if err := l.Err(); err != nil {
		t.Fatalf("the log failed: %v", err)
	}

	f.restoreBookies(full)
	f.Cluster.Scheduler.Advance(time.Minute) // the writer's timed retry takes them back
	r := MustAppend(t, l, Batch(t, 4, "after"), AcksQuorum)
	if err := testwait.Recv(t, WaitTimeout, "WaitSettled once the bookies are back", settled); err != nil {
		t.Fatalf("WaitSettled of the batch held through the stall: %v, want it written", err)
	}
	got := logValues(t, l)
	if want := []string{"before", "in flight", "after"}; !slices.Equal(got, want) || r.BaseOffset != 2 {
		t.Fatalf("log holds %q (last at %d), want %q", got, r.BaseOffset, want)
	}
}

// TestAppendBehindStalledRollIsRefused: a roll seals the ledger and waits
// for its entries; when the writer stalls meanwhile (its bookies turned
// read-only, no spare), an append waiting behind the roll is refused at
// once with ErrNotEnoughBookies rather than held to its deadline. The roll
// completes once the bookies are back.
func TestAppendBehindStalledRollIsRefused(t *testing.T) {
	f := NewFixture(t)
	l := f.Open(f.Config(1))
	MustAppend(t, l, Batch(t, 1, "before"), AcksQuorum)
	l.mu.Lock()
	w := l.mu.writer
	l.mu.Unlock()
	full := f.quorumAndSpares(l)
	f.Cluster.Bookies.SetManual(true)
	if _, err := l.Append(Ctx(t), Batch(t, 2, "in flight"), AcksNone); err != nil {
		t.Fatal(err)
	}
	f.Clock.Advance(l.Limits().SegmentAge + time.Second)
	rolled := make(chan error, 1)
	go func() { rolled <- l.MaybeRoll(context.Background()) }()
	// Sealing (Close) starts under appendSem, after the roll found the
	// writer able to acknowledge; a stall before that defers the roll.
	testwait.Until(t, WaitTimeout, "the roll sealing the ledger", w.Closing)
	f.failBookies(full)          // the adds in flight to them fail
	f.Cluster.Scheduler.RunDue() // no spare: the writer stalls
	if _, err := l.Append(Ctx(t), Batch(t, 3, "behind the roll"), AcksQuorum); !errors.Is(err, ErrNotEnoughBookies) {
		t.Fatalf("append behind a roll of a stalled writer: %v, want ErrNotEnoughBookies", err)
	}

	f.restoreBookies(full)
	f.Cluster.Bookies.SetManual(false)
	f.Cluster.Bookies.DeliverAll()
	f.Cluster.Scheduler.Advance(time.Minute) // the writer takes them back
	if err := testwait.Recv(t, WaitTimeout, "the roll", rolled); err != nil {
		t.Fatalf("roll: %v", err)
	}
	if got := DescribeAll(FetchAll(t, l, 0)); strings.Join(got, " ") != "0:=before 1:=in flight" {
		t.Fatalf("records %v", got)
	}
	if segs := l.Describe().Segments; !segs[len(segs)-1].Closed {
		t.Fatalf("segments %v: want the ledger sealed", segs)
	}
}

// AfterFail's function runs once the log fails (at once when it has
// failed already), on its own goroutine, and never once stopped.
func TestAfterFail(t *testing.T) {
	f := NewFixture(t)
	l := f.Open(f.Config(1))
	fired := make(chan string, 3)
	l.AfterFail(func() { fired <- "registered before" })
	stop := l.AfterFail(func() { fired <- "stopped" })
	if !stop() {
		t.Fatal("stop before the failure reported that it stopped nothing")
	}
	if stop() {
		t.Fatal("a second stop reported that it stopped the function")
	}
	select {
	case got := <-fired:
		t.Fatalf("%q ran before the log failed", got)
	default:
	}
	l.fail(errors.New("injected"))
	if got := testwait.Recv(t, WaitTimeout, "the hook registered before the failure", fired); got != "registered before" {
		t.Fatalf("ran %q", got)
	}
	stopLate := l.AfterFail(func() { fired <- "registered after" })
	if got := testwait.Recv(t, WaitTimeout, "the hook registered after the failure", fired); got != "registered after" {
		t.Fatalf("ran %q", got)
	}
	if stopLate() {
		t.Fatal("stop after the function ran reported that it stopped it")
	}
	select {
	case got := <-fired:
		t.Fatalf("%q ran too", got)
	default:
	}
}

// TestFetchSharesBatches: a fetch returns the stored batches themselves,
// one per entry, not a copy: two fetches from the tail cache give the
// same memory (the fetch response refers to it, brokerpb's copy-free
// encoding frames it without a copy).
func TestFetchSharesBatches(t *testing.T) {
	f := NewFixture(t)
	l := f.Open(f.Config(1))
	MustAppend(t, l, Batch(t, 1, "a", "b"), AcksQuorum)
	MustAppend(t, l, Batch(t, 1, "c"), AcksQuorum)
	var got []FetchResult
	for range 2 {
		res, err := l.Fetch(Ctx(t), 0, 1<<20, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Batches) != 2 || res.Bytes() != len(res.Records()) {
			t.Fatalf("fetched %d batches, %d bytes; want the 2 appended", len(res.Batches), res.Bytes())
		}
		got = append(got, res)
	}
	for i := range got[0].Batches {
		if &got[0].Batches[i][0] != &got[1].Batches[i][0] {
			t.Fatalf("batch %d was copied by a fetch", i)
		}
	}
	if recs := DecodeAll(t, got[0].Records()); len(recs) != 3 {
		t.Fatalf("decoded %d records, want 3", len(recs))
	}
}
