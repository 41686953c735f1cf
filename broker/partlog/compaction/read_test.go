package compaction

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/strata-log/strata/broker/partlog/tierpass"
	"github.com/strata-log/strata/internal/ctxtime"
	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/ledger/ledgertest"
	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/recordbatch"
	"github.com/strata-log/strata/tiering/compact"
	"github.com/strata-log/strata/tiering/objstore/memstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
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
	rr := tierpass.ObjectRange{Store: store, Key: "o", Timeout: time.Minute}
	for _, pooled := range []bool{false, true} {
		r := startRangeRead(ctx, rr, 1000, int64(len(data)), DefaultReadBytes, pooled)
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
	p := piece{ledger: &brokerpb.LedgerSegment{LedgerId: 7, Bytes: int64(len(kept) * len(kept[0]))}}
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
	cluster := ledgertest.NewCluster(4)
	env := cluster.Env()
	var pieces []piece
	for range readersAhead + 4 {
		w, err := ledger.Create(ctx, env, cluster.Options(ledger.CreateOptions{}))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.AppendSync(ctx, []byte("x")); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(ctx); err != nil {
			t.Fatal(err)
		}
		pieces = append(pieces, piece{ledger: &brokerpb.LedgerSegment{LedgerId: w.ID(), LastEntryId: 0}})
	}
	pieces = append(pieces, piece{ledger: &brokerpb.LedgerSegment{LedgerId: 1 << 40, LastEntryId: -1}}) // empty: never read
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
