package broker

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/strata-log/strata/broker/partlog"
	"github.com/strata-log/strata/internal/bytebudget"
)

// Fetch memory (--max-inflight-fetch-bytes) is split in two:
//
//   - responses: the bytes of the fetch responses gathered and not yet
//     written to their connection (an adapter releases them once it has
//     handed the response to the transport, or dropped it), and the
//     read-ahead of the reads from the bookies in flight;
//   - read-ahead kept: entries read from the bookies beyond what their
//     fetch asked for, kept for the next fetches (partlog.ReadAhead),
//     readAheadShare of the whole.
//
// Each client connection may hold at most a share of the responses' part
// (FetchConn), and one fetch at most maxResponseBytes of it (its
// response's bound), plus one batch when its first batch is larger than
// its partition's bound. A connection that stops reading keeps what its
// responses hold until it is closed (gRPC's keepalive closes one that
// does not answer pings within 40 s; the Kafka listener one whose write
// makes no progress for --kafka-idle-timeout), so the share is small:
// many such connections are needed to fill the budget.
const (
	// readAheadShare: the part of the budget the read-ahead keeps, 1/4.
	readAheadShare = 4
	// connShare: the part of the responses' budget one connection may
	// hold, 1/16, and never less than minConnFetchBytes. A fetch larger
	// than the share still goes through on a connection that holds
	// nothing else (bytebudget lets it in).
	connShare         = 16
	minConnFetchBytes = 8 << 20
	// fetchBudgetWait: a fetch that has gathered nothing and finds no
	// room waits this long at least (until its long poll's end at most)
	// before it answers empty, so that clients do not spin on empty
	// answers while the budget is full.
	fetchBudgetWait = 250 * time.Millisecond
)

// fetchBudget is the broker's bound on fetch memory.
type fetchBudget struct {
	responses *bytebudget.Budget
	readAhead *partlog.ReadAhead
	perConn   int64
	metrics   *fetchMetrics
}

func newFetchBudget(total int64, reg prometheus.Registerer) *fetchBudget {
	ahead := total / readAheadShare
	responses := bytebudget.New(total - ahead)
	fb := &fetchBudget{
		responses: responses,
		readAhead: partlog.NewReadAhead(ahead, responses),
		perConn:   max((total-ahead)/connShare, minConnFetchBytes),
	}
	fb.metrics = newFetchMetrics(reg, fb)
	return fb
}

// fetchMetrics are the fetch budget's and the long polls'.
type fetchMetrics struct {
	// waits: fetches that found no room and waited for it; short: fetches
	// answered with less than they had room for (or nothing) because the
	// budget stayed full.
	waits, short prometheus.Counter
	// reads: partition reads of fetches (a long poll reads again only the
	// partitions whose high watermark moved).
	reads prometheus.Counter
}

func newFetchMetrics(reg prometheus.Registerer, fb *fetchBudget) *fetchMetrics {
	m := &fetchMetrics{
		waits: prometheus.NewCounter(prometheus.CounterOpts{Name: "strata_broker_fetch_budget_waits_total",
			Help: "Fetches that found no room in --max-inflight-fetch-bytes (or their connection's share of it) and waited for some."}),
		short: prometheus.NewCounter(prometheus.CounterOpts{Name: "strata_broker_fetch_budget_short_total",
			Help: "Fetches answered with less than the response had room for, or empty after waiting, because the fetch budget stayed full."}),
		reads: prometheus.NewCounter(prometheus.CounterOpts{Name: "strata_broker_fetch_partition_reads_total",
			Help: "Partition reads by fetches; a long poll reads again only the partitions whose high watermark moved."}),
	}
	inflight := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "strata_broker_fetch_inflight_bytes",
		Help: "Bytes of fetch responses gathered and not yet written, and of read-ahead being read, held from --max-inflight-fetch-bytes."},
		func() float64 { return float64(fb.responses.Used()) })
	ahead := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "strata_broker_fetch_readahead_bytes",
		Help: "Bytes read from the bookies ahead of fetches and kept for the next ones (a quarter of --max-inflight-fetch-bytes at most)."},
		func() float64 { return float64(fb.readAhead.Bytes()) })
	reg.MustRegister(m.waits, m.short, m.reads, inflight, ahead)
	return m
}

// newHold returns an empty hold of a fetch on conn (nil: none).
func (fb *fetchBudget) newHold(conn *FetchConn) *fetchHold {
	return &fetchHold{fb: fb, conn: conn}
}

// FetchConn is one client connection's share of the fetch budget: its
// fetches hold at most 1/connShare of the responses' budget at once, so
// that one connection (16 fetches in flight on the Kafka protocol,
// hundreds of streams on gRPC) cannot take the whole budget from the
// others. An adapter makes one per connection (Service.NewFetchConn),
// passes it to Fetch in the context (WithFetchConn), and closes it once
// the connection has ended. Safe for concurrent use.
type FetchConn struct {
	share *bytebudget.Budget
	mu    struct {
		sync.Mutex
		// holds: the responses handed over and not released yet.
		holds  map[*fetchHold]struct{}
		closed bool
	}
}

// NewFetchConn returns a connection's share of the fetch budget.
func (s *Service) NewFetchConn() *FetchConn {
	return &FetchConn{share: bytebudget.New(s.b.fetchBudget.perConn)}
}

// Close releases what the connection's responses still hold: they will
// not be written. A response handed over after Close is released at once.
// Idempotent.
func (fc *FetchConn) Close() {
	fc.mu.Lock()
	holds := fc.mu.holds
	fc.mu.holds, fc.mu.closed = nil, true
	fc.mu.Unlock()
	for h := range holds {
		h.release()
	}
}

type fetchConnKey struct{}

// WithFetchConn returns ctx carrying fc: the Fetch calls made with it
// hold their bytes from fc's share too.
func WithFetchConn(ctx context.Context, fc *FetchConn) context.Context {
	return context.WithValue(ctx, fetchConnKey{}, fc)
}

func fetchConnOf(ctx context.Context) *FetchConn {
	fc, _ := ctx.Value(fetchConnKey{}).(*FetchConn)
	return fc
}

// fetchHold is what one Fetch holds of the budget and of its connection's
// share (conn nil: none). Until handOver only the Fetch touches it; then
// release gives everything back, once, from whichever goroutine gets there
// first (the adapter after writing, or the connection's Close).
type fetchHold struct {
	fb       *fetchBudget
	conn     *FetchConn
	bytes    int64
	released atomic.Bool
}

// reserve takes n bytes, or reports false when they do not fit now and
// wait is false, or still do not fit by until (or ctx's end).
func (h *fetchHold) reserve(ctx context.Context, n int64, wait bool, until time.Time) bool {
	if n == 0 || h.tryTake(n) {
		return true
	}
	if !wait {
		return false
	}
	h.fb.metrics.waits.Inc()
	wctx, cancel := context.WithDeadline(ctx, until)
	defer cancel()
	if h.conn != nil {
		if err := h.conn.share.Acquire(wctx, n); err != nil {
			return false
		}
	}
	if err := h.fb.responses.Acquire(wctx, n); err != nil {
		if h.conn != nil {
			h.conn.share.Release(n)
		}
		return false
	}
	h.bytes += n
	return true
}

// tryTake takes n bytes if they fit now.
func (h *fetchHold) tryTake(n int64) bool {
	if h.conn != nil && !h.conn.share.TryAcquire(n) {
		return false
	}
	if !h.fb.responses.TryAcquire(n) {
		if h.conn != nil {
			h.conn.share.Release(n)
		}
		return false
	}
	h.bytes += n
	return true
}

// settle turns a reservation into the n bytes a read returned: it gives
// back what the read did not use, and takes what it returned beyond the
// reservation when it fits (or whether it fits or not, when keep). It reports
// false, holding none of the read's bytes, when the excess did not fit.
func (h *fetchHold) settle(reserved, n int64, keep bool) bool {
	switch {
	case n <= reserved:
		h.give(reserved - n)
	case keep:
		if h.conn != nil {
			h.conn.share.Take(n - reserved)
		}
		h.fb.responses.Take(n - reserved)
		h.bytes += n - reserved
	case !h.tryTake(n - reserved):
		h.give(reserved)
		return false
	}
	return true
}

func (h *fetchHold) give(n int64) {
	if n == 0 {
		return
	}
	h.bytes -= n
	h.fb.responses.Release(n)
	if h.conn != nil {
		h.conn.share.Release(n)
	}
}

// handOver ends the Fetch's use of the hold and returns its release: the
// connection's Close releases it too if the adapter never does.
func (h *fetchHold) handOver() func() {
	if h.bytes == 0 || h.conn == nil {
		return h.release
	}
	fc := h.conn
	fc.mu.Lock()
	closed := fc.mu.closed
	if !closed {
		if fc.mu.holds == nil {
			fc.mu.holds = map[*fetchHold]struct{}{}
		}
		fc.mu.holds[h] = struct{}{}
	}
	fc.mu.Unlock()
	if closed {
		h.release()
	}
	return h.release
}

// release gives back everything the hold has; only the first call does.
func (h *fetchHold) release() {
	if !h.released.CompareAndSwap(false, true) {
		return
	}
	h.give(h.bytes)
	if fc := h.conn; fc != nil {
		fc.mu.Lock()
		delete(fc.mu.holds, h)
		fc.mu.Unlock()
	}
}
