package partlog_test

import (
	"math"
	"testing"
	"time"

	"github.com/strata-log/strata/broker/partlog"
	"github.com/strata-log/strata/metad/kv"
	"github.com/strata-log/strata/proto/brokerpb"
)

// TestManyProducersKeepTheListWritable: every idempotent producer id a
// partition saw was kept in its producer state, and that state is
// snapshotted into the PartitionLog at every CAS (P5). 40,000 producer
// ids (one tiny batch each; a client picks its ids) pushed the list past
// metad's value bound: Close's (and a roll's) CAS failed, the log failed,
// and every takeover's Open failed the same way, so the partition stayed
// down until the producers expired (a day). Now the state keeps the
// maxProducers most recently active producers.
func TestManyProducersKeepTheListWritable(t *testing.T) {
	f := partlog.NewFixture(t)
	store := &scaleStore{inner: f.Store}
	cfg := f.Config(1)
	cfg.Store = store
	l := f.Open(cfg)
	now := f.Clock.Now().UnixMilli()
	const producers = 40_000
	for i := range int64(producers) {
		if i%1000 == 0 {
			f.Clock.Advance(1) // the later producers are the more recent
		}
		partlog.MustAppend(t, l, partlog.IdemBatch(t, 1<<56+i, 32767, 0, now, "x", "y"), partlog.AcksQuorum)
	}
	if err := l.Close(partlog.Ctx(t)); err != nil {
		t.Errorf("Close after %d producers: %v", producers, err)
	}
	cfg = f.Config(2)
	cfg.Store = store
	b, err := partlog.Open(partlog.Ctx(t), cfg)
	if err != nil {
		t.Fatalf("Open after %d producers: %v", producers, err)
	}
	t.Cleanup(func() { _ = b.Close(partlog.Ctx(t)) })
	kept := len(b.Describe().Producers)
	t.Logf("list after %d producers: at most %d bytes, %d producers kept", producers, store.mu.maxPartitionBytes, kept)
	if kept != partlog.MaxProducers {
		t.Errorf("%d producers kept, want %d", kept, partlog.MaxProducers)
	}
	// The most recent producer is still deduplicated.
	last := int64(producers - 1)
	if d := partlog.MustAppend(t, b, partlog.IdemBatch(t, 1<<56+last, 32767, 0, now, "x", "y"), partlog.AcksQuorum); !d.Duplicate || d.BaseOffset != 2*last {
		t.Fatalf("retry of the last producer's batch: %+v, want a duplicate at %d", d, 2*last)
	}
	if r := partlog.MustAppend(t, b, partlog.Batch(t, now, "after"), partlog.AcksQuorum); r.BaseOffset != 2*producers {
		t.Fatalf("append after reopening at %d, want %d", r.BaseOffset, 2*producers)
	}
}

// TestProducerStateBound: maxProducers producers of the largest
// encoding (10-byte id, epoch and sequences where the protocol allows,
// five batches each) and 10,000 ledgers fit in one metad value.
func TestProducerStateBound(t *testing.T) {
	pl := &brokerpb.PartitionLog{}
	for i := range partlog.MaxProducers {
		s := &brokerpb.ProducerState{ProducerId: math.MaxInt64 - int64(i), Epoch: -1, LastTimestampMs: math.MaxInt64}
		for range partlog.ProducerBatches {
			s.Batches = append(s.Batches, &brokerpb.ProducerBatch{FirstSequence: math.MaxInt32, LastSequence: math.MaxInt32,
				BaseOffset: math.MaxInt64, LastOffset: math.MaxInt64})
		}
		pl.Producers = append(pl.Producers, s)
	}
	producers := len(mustMarshal(t, pl))
	for range 10_000 {
		pl.Segments = append(pl.Segments, &brokerpb.LedgerSegment{LedgerId: 1 << 20, FirstOffset: 1 << 40, LastOffset: 1<<40 + 99,
			LastEntryId: 1 << 16, Bytes: 1 << 30, MaxTimestampMs: 1_700_000_600_000, CreatedAtMs: 1_700_000_000_000, Closed: true})
	}
	total := len(mustMarshal(t, pl))
	t.Logf("%d worst-case producers: %d bytes; with 10,000 ledgers: %d of %d bytes", partlog.MaxProducers, producers, total, kv.MaxValueBytes)
	if total > kv.MaxValueBytes {
		t.Fatalf("%d bytes, more than metad's %d", total, kv.MaxValueBytes)
	}
}

// TestFutureTimestampsDoNotChooseWhoIsEvicted: a partition keeps
// maxProducers producers and evicts the longest idle, and a takeover
// rebuilds their recency from the open ledger, where the broker's append
// time is not stored. Taken from the batches' timestamps, which their
// producer writes, a client with WRITE filled the table with producers
// dated years ahead: after a takeover they ranked as the most recent, so
// the next new producer evicted an honest one that had appended after
// them, and that producer's retry was refused (or, from a client that
// resets its sequence on UNKNOWN_PRODUCER_ID, written twice).
func TestFutureTimestampsDoNotChooseWhoIsEvicted(t *testing.T) {
	f := partlog.NewFixture(t)
	l := f.Open(f.Config(1))
	now := f.Clock.Now().UnixMilli()
	future := now + 10*365*24*time.Hour.Milliseconds()
	for i := range int64(partlog.MaxProducers - 1) {
		partlog.MustAppend(t, l, partlog.IdemBatch(t, 1000+i, 0, 0, future, "forged"), partlog.AcksQuorum)
	}
	f.Clock.Advance(time.Second)
	const honest = 7
	partlog.MustAppend(t, l, partlog.IdemBatch(t, honest, 0, 0, now, "a"), partlog.AcksQuorum)
	last := partlog.MustAppend(t, l, partlog.IdemBatch(t, honest, 0, 1, now, "b"), partlog.AcksQuorum)

	// A takeover (l is not closed: its state is rebuilt from the ledger).
	b := f.Open(f.Config(2))
	partlog.MustAppend(t, b, partlog.IdemBatch(t, 5, 0, 0, now, "new producer"), partlog.AcksQuorum)
	d, err := b.Append(partlog.Ctx(t), partlog.IdemBatch(t, honest, 0, 1, now, "b"), partlog.AcksQuorum)
	if err != nil || !d.Duplicate || d.BaseOffset != last.BaseOffset {
		t.Fatalf("retry of the honest producer's last batch after the takeover: %+v, %v; want a duplicate at %d", d, err, last.BaseOffset)
	}
	if err := b.Close(partlog.Ctx(t)); err != nil { // the state is snapshotted in the list
		t.Fatal(err)
	}
	kept := map[int64]bool{}
	for _, p := range f.Open(f.Config(3)).Describe().Producers {
		kept[p.GetProducerId()] = true
		if p.GetLastTimestampMs() > f.Clock.Now().UnixMilli() {
			t.Errorf("producer %d kept as active at %d, after the broker's clock %d", p.GetProducerId(), p.GetLastTimestampMs(), f.Clock.Now().UnixMilli())
		}
	}
	if kept[1000] || !kept[1001] || !kept[5] || len(kept) != partlog.MaxProducers {
		t.Errorf("kept %d producers (1000: %v, 1001: %v, 5: %v); want the first forged one evicted", len(kept), kept[1000], kept[1001], kept[5])
	}
}
