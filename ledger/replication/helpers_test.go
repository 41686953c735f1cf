package replication

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/ledger/ledgertest"
	"github.com/strata-log/strata/proto/bookiepb"
	"github.com/strata-log/strata/proto/ledgerpb"

	"github.com/strata-log/strata/ledger/bookies"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testTimeout bounds every blocking call; nothing waits for it unless a
// test fails.
const testTimeout = 10 * time.Second

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// memKV is an in-memory KV.
type memKV struct {
	mu   sync.Mutex
	data map[string][]byte
	puts int
}

func newMemKV() *memKV { return &memKV{data: map[string][]byte{}} }

func (m *memKV) List(ctx context.Context, prefix string) ([]KeyValue, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var out []KeyValue
	for k, v := range m.data {
		if strings.HasPrefix(k, prefix) {
			out = append(out, KeyValue{Key: k, Value: slices.Clone(v)})
		}
	}
	slices.SortFunc(out, func(a, b KeyValue) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

func (m *memKV) Put(ctx context.Context, key string, value []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.data[key] = slices.Clone(value)
	m.puts++
	return ctx.Err()
}

func (m *memKV) Delete(ctx context.Context, key string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.data, key)
	return ctx.Err()
}

func (m *memKV) keys(prefix string) []string {
	kvs, _ := m.List(context.Background(), prefix)
	var out []string
	for _, kv := range kvs {
		out = append(out, kv.Key)
	}
	return out
}

// rig is a cluster of fake bookies with their registrations both in the
// ledger registry (placement) and in the KV (liveness), and a replicator
// whose clock is the cluster's scheduler.
type rig struct {
	t  *testing.T
	c  *ledgertest.Cluster
	kv *memKV
	r  *Replicator
}

func newRig(t *testing.T, bookies int) *rig {
	g := &rig{t: t, c: ledgertest.NewCluster(bookies), kv: newMemKV()}
	for _, a := range g.c.Bookies.Addrs() {
		g.register(a)
	}
	r, err := New(Config{Grace: grace, Interval: time.Second, Now: g.c.Scheduler.Now, Scheduler: g.c.Scheduler},
		g.c.Env(), g.kv, &fakeElector{})
	if err != nil {
		t.Fatal(err)
	}
	g.r = r
	t.Cleanup(func() { r.Close() })
	return g
}

func addr(i int) string { return fmt.Sprintf("bookie-%d", i) }

func (g *rig) register(a string) {
	value, _ := proto.Marshal(&bookiepb.BookieInfo{Id: a, Address: a, State: bookiepb.BookieState_WRITABLE})
	g.kv.data[bookies.RegistryPrefix+a] = value
}

// kill crashes a bookie and lets its registration expire.
func (g *rig) kill(a string) {
	g.c.Bookies.Crash(a)
	g.c.Registry.Deregister(a)
	g.kv.Delete(context.Background(), bookies.RegistryPrefix+a)
}

func (g *rig) decommission(a string) {
	if _, err := MarkDecommissioned(testCtx(g.t), g.kv, a, "", g.c.Scheduler.Now()); err != nil {
		g.t.Fatal(err)
	}
}

// write creates a ledger, appends n entries and, if closeIt, closes it.
func (g *rig) write(opts ledger.CreateOptions, n int, closeIt bool) *ledger.Writer {
	g.t.Helper()
	ctx := testCtx(g.t)
	w, err := ledger.Create(ctx, g.c.Env(), g.c.Options(opts))
	if err != nil {
		g.t.Fatal(err)
	}
	for i := range n {
		if _, err := w.AppendSync(ctx, payload(w.ID(), int64(i))); err != nil {
			g.t.Fatal(err)
		}
	}
	if closeIt {
		if err := w.Close(ctx); err != nil {
			g.t.Fatal(err)
		}
	}
	return w
}

func payload(id uint64, e int64) []byte { return fmt.Appendf(nil, "ledger %d entry %d", id, e) }

func (g *rig) metadata(id uint64) *ledgerpb.LedgerMetadata {
	md, _, ok := g.c.Meta.Ledger(id)
	if !ok {
		g.t.Fatalf("ledger %d: no metadata", id)
	}
	return md
}

// checkFullyReplicated checks that no fragment names any of gone and that
// every entry 0..last is on every bookie of its write set with its payload.
func (g *rig) checkFullyReplicated(id uint64, gone ...string) {
	g.t.Helper()
	md := g.metadata(id)
	if md.State != ledgerpb.LedgerState_CLOSED {
		g.t.Fatalf("ledger %d is %s", id, md.State)
	}
	for i, f := range md.Fragments {
		for _, b := range f.Bookies {
			if slices.Contains(gone, b) {
				g.t.Errorf("fragment %d still names %s: %v", i, b, f.Bookies)
			}
		}
		if len(f.Bookies) != int(md.EnsembleSize) || len(slices.Compact(slices.Sorted(slices.Values(f.Bookies)))) != len(f.Bookies) {
			g.t.Errorf("fragment %d: invalid ensemble %v", i, f.Bookies)
		}
	}
	for e := int64(0); e <= md.LastEntryId; e++ {
		fi := 0
		for i, f := range md.Fragments {
			if f.FirstEntryId <= e {
				fi = i
			}
		}
		for _, b := range writeSet(md.Fragments[fi].Bookies, e, int(md.WriteQuorum)) {
			stored, ok := g.c.Bookies.Stored(b, id, uint64(e))
			got, err := ledger.OpenEntry(md, e, stored)
			if !ok || err != nil || string(got) != string(payload(id, e)) {
				g.t.Errorf("entry %d on %s: %q, %v", e, b, got, ok)
			}
		}
	}
}

// fakeElector grants leadership when the test sends on grant.
type fakeElector struct {
	grant      chan chan struct{} // the test sends the "lost" channel
	campaigns  chan struct{}      // signalled at each Campaign
	mu         sync.Mutex
	resigned   int
	campaigned int
}

func (e *fakeElector) Campaign(ctx context.Context) (<-chan struct{}, func(), error) {
	e.mu.Lock()
	e.campaigned++
	e.mu.Unlock()
	if e.campaigns != nil {
		select {
		case e.campaigns <- struct{}{}:
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
	}
	select {
	case lost := <-e.grant:
		return lost, func() {
			e.mu.Lock()
			e.resigned++
			e.mu.Unlock()
		}, nil
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
}

// hookMeta runs beforeUpdate before each Update of the wrapped store.
type hookMeta struct {
	ledger.MetadataStore
	beforeUpdate func(n int)
	updates      int
}

func (h *hookMeta) Update(ctx context.Context, md *ledgerpb.LedgerMetadata, version int64) (int64, error) {
	h.updates++
	if h.beforeUpdate != nil {
		h.beforeUpdate(h.updates)
	}
	return h.MetadataStore.Update(ctx, md, version)
}

// hookBookies runs onAdd before each Add of the wrapped client.
type hookBookies struct {
	ledger.BookieClient
	mu    sync.Mutex
	adds  int
	onAdd func(n int, bookie string, req *bookiepb.AddRequest)
}

func (h *hookBookies) Add(bookie string, req *bookiepb.AddRequest, cb func(*bookiepb.AddResponse, error)) {
	h.mu.Lock()
	h.adds++
	n := h.adds
	h.mu.Unlock()
	if h.onAdd != nil {
		h.onAdd(n, bookie, req)
	}
	h.BookieClient.Add(bookie, req, cb)
}

// useEnv replaces the replicator with one over env.
func (g *rig) useEnv(env ledger.Env) {
	g.r.Close()
	r, err := New(g.r.cfg, env, g.kv, &fakeElector{})
	if err != nil {
		g.t.Fatal(err)
	}
	g.r = r
	g.t.Cleanup(func() { r.Close() })
}

func addRequest(id uint64, e int64, p []byte) *bookiepb.AddRequest {
	return &bookiepb.AddRequest{LedgerId: id, EntryId: uint64(e), Lac: e - 1, Payload: p}
}

func infoOf(a string) *bookiepb.BookieInfo {
	return &bookiepb.BookieInfo{Id: a, Address: a, State: bookiepb.BookieState_WRITABLE}
}

// metricValue reads a counter's or a gauge's value.
func metricValue(t *testing.T, c prometheus.Metric) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	if m.Counter != nil {
		return m.GetCounter().GetValue()
	}
	return m.GetGauge().GetValue()
}
