package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/ledger/ledgertest"
	"github.com/strata-log/strata/proto/ledgerpb"
)

// wtTimeout bounds every blocking call of a test; nothing waits for it
// unless the test fails.
const wtTimeout = 10 * time.Second

func wtCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), wtTimeout)
	t.Cleanup(cancel)
	return ctx
}

func wtAddr(i int) string { return fmt.Sprintf("bookie-%d", i) }

// wtRecorder records a writer's callbacks and checks, at each
// acknowledgement, the protocol's promise: entries are acknowledged once,
// in order, and at that moment Qa members of the entry's write set IN THE
// DURABLE METADATA store it (W2, W3).
type wtRecorder struct {
	t  *testing.T
	c  *ledgertest.Cluster
	id uint64

	mu     sync.Mutex
	acked  []int64
	failed map[int64]error
}

func newWTRecorder(t *testing.T, c *ledgertest.Cluster, w *ledger.Writer) *wtRecorder {
	return &wtRecorder{t: t, c: c, id: w.ID(), failed: make(map[int64]error)}
}

func (r *wtRecorder) cb(id int64, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		if _, dup := r.failed[id]; dup || slices.Contains(r.acked, id) {
			r.t.Errorf("entry %d: second callback (%v)", id, err)
		}
		r.failed[id] = err
		return
	}
	if want := int64(len(r.acked)); id != want {
		r.t.Errorf("acknowledged entry %d, want %d next (in order, dense)", id, want)
	}
	r.acked = append(r.acked, id)
	md, _, _ := r.c.Meta.Ledger(r.id)
	if md == nil {
		r.t.Errorf("entry %d acknowledged without metadata", id)
		return
	}
	have := 0
	for _, b := range ledger.EntryWriteSet(md, id) {
		if _, ok := r.c.Bookies.Stored(b, r.id, uint64(id)); ok {
			have++
		}
	}
	if have < int(md.AckQuorum) {
		r.t.Errorf("entry %d acknowledged with %d copies in its durable write set %v, want >= %d",
			id, have, ledger.EntryWriteSet(md, id), md.AckQuorum)
	}
}

func (r *wtRecorder) ackedIDs() []int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.acked)
}

func (r *wtRecorder) failure(id int64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed[id]
}

func (r *wtRecorder) maxAcked() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.acked) == 0 {
		return -1
	}
	return r.acked[len(r.acked)-1]
}

func wtCreate(t *testing.T, c *ledgertest.Cluster, opts ledger.CreateOptions) *ledger.Writer {
	t.Helper()
	w, err := ledger.Create(wtCtx(t), c.Env(), c.Options(opts))
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	return w
}

func wtAppend(t *testing.T, w *ledger.Writer, r *wtRecorder, payload string) {
	t.Helper()
	if err := w.Append(wtCtx(t), []byte(payload), r.cb); err != nil {
		t.Fatalf("Append(%q): %v", payload, err)
	}
}

func wtWantAcked(t *testing.T, r *wtRecorder, want ...int64) {
	t.Helper()
	if got := r.ackedIDs(); !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
		t.Fatalf("acknowledged %v, want %v", got, want)
	}
}

func wtSeq(from, to int64) []int64 {
	var out []int64
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}

// wtClose closes a writer at the end of a test, whatever its state.
func wtClose(t *testing.T, c *ledgertest.Cluster, w *ledger.Writer) {
	t.Helper()
	c.Bookies.SetManual(false)
	c.Bookies.DeliverAll()
	err := w.Close(wtCtx(t))
	if err != nil && !errors.Is(err, ledger.ErrFenced) {
		t.Logf("Close: %v", err)
	}
}

func wtMetadata(t *testing.T, c *ledgertest.Cluster, id uint64) *ledgerpb.LedgerMetadata {
	t.Helper()
	md, _, ok := c.Meta.Ledger(id)
	if !ok {
		t.Fatalf("no metadata for ledger %d", id)
	}
	return md
}

// copies counts the bookies of entry's durable write set that store it.
func wtCopies(c *ledgertest.Cluster, md *ledgerpb.LedgerMetadata, entry int64) int {
	n := 0
	for _, b := range ledger.EntryWriteSet(md, entry) {
		if _, ok := c.Bookies.Stored(b, md.Id, uint64(entry)); ok {
			n++
		}
	}
	return n
}
