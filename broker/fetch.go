package broker

import (
	"context"
	"errors"
	"time"

	"github.com/strata-log/strata/broker/partlog"
	"github.com/strata-log/strata/internal/acl"
)

// FetchRequest is a long-polling read of several partitions.
type FetchRequest struct {
	// MaxWait: how long to wait for MinBytes (capped by --max-fetch-wait).
	MaxWait  time.Duration
	MinBytes int
	// MaxBytes bounds the response (0 or above maxResponseBytes: that);
	// the first partition with data returns at least one batch.
	MaxBytes   int
	Partitions []FetchPartition
}

// FetchPartition is one partition to read from Offset.
type FetchPartition struct {
	Topic     string
	Partition int32
	Offset    int64
	// MaxBytes bounds this partition's share (0: the response's bound).
	MaxBytes int
	// LeaderEpoch: the owner epoch the client believes current (Kafka's
	// CurrentLeaderEpoch), checked when >= 0: ErrFencedLeaderEpoch when
	// older than the owner's, ErrUnknownLeaderEpoch when newer.
	LeaderEpoch int32
}

// FetchResult is one partition's answer: stored batches, as they are.
type FetchResult struct {
	Batches                       [][]byte
	HighWatermark, LogStartOffset int64
	Err                           error
}

// Bytes is the size of r's batches.
func (r *FetchResult) Bytes() int {
	n := 0
	for _, b := range r.Batches {
		n += len(b)
	}
	return n
}

// Fetch reads every partition from its offset, waiting up to MaxWait
// until MinBytes are there (or a partition fails). Results are in request
// order; the error is for the whole call. A long poll reads again only
// the partitions whose high watermark moved since their last read.
//
// The results' bytes are held from the broker's fetch budget
// (--max-inflight-fetch-bytes) and from the connection's share of it
// (WithFetchConn) until release, which the caller calls exactly once
// when nothing refers to them any more: once the response is written to
// the connection, or dropped. A fetch the budget has no room for answers
// with what it has gathered; with nothing gathered it first waits for
// room, at least fetchBudgetWait and at most until its long poll's end,
// and then answers empty (the client fetches again). release is never
// nil.
func (s *Service) Fetch(ctx context.Context, req *FetchRequest) (results []FetchResult, release func(), err error) {
	b := s.b
	if err := s.checkFetch(ctx, req); err != nil {
		return nil, func() {}, err
	}
	start := time.Now()
	defer b.metrics.observe("fetch", start)
	f := fetch{
		req:      req,
		deadline: start.Add(min(req.MaxWait, b.cfg.MaxFetchWait)),
		maxBytes: req.MaxBytes,
		out:      make([]FetchResult, len(req.Partitions)),
		logs:     make([]*partlog.Log, len(req.Partitions)),
		changed:  make([]<-chan struct{}, len(req.Partitions)),
		hold:     b.fetchBudget.newHold(fetchConnOf(ctx)),
		metrics:  b.fetchBudget.metrics,
	}
	f.budgetDeadline = start.Add(fetchBudgetWait)
	if f.deadline.After(f.budgetDeadline) {
		f.budgetDeadline = f.deadline
	}
	if f.maxBytes <= 0 || f.maxBytes > maxResponseBytes {
		f.maxBytes = maxResponseBytes
	}
	for i, fp := range req.Partitions {
		f.out[i] = FetchResult{HighWatermark: -1, LogStartOffset: -1}
		f.logs[i], f.out[i].Err = s.servedAt(fp.Topic, fp.Partition, fp.LeaderEpoch)
	}
	for {
		total, errs, waiting := f.round(ctx)
		if f.short || total >= max(req.MinBytes, 1) || errs > 0 || !waiting || !time.Now().Before(f.deadline) {
			break
		}
		if !waitAny(ctx, f.parked(), time.Until(f.deadline)) {
			break
		}
	}
	if f.short {
		f.metrics.short.Inc()
	}
	f.boundsOfUnread()
	return f.out, f.hold.handOver(), nil
}

// checkFetch refuses a request too large, naming a partition twice, or
// that the principal may not read.
func (s *Service) checkFetch(ctx context.Context, req *FetchRequest) error {
	if n := len(req.Partitions); n > MaxFetchPartitions {
		return invalidf("fetch request names %d partitions, at most %d", n, MaxFetchPartitions)
	}
	named := make(map[tp]struct{}, len(req.Partitions))
	for _, fp := range req.Partitions {
		k := tp{fp.Topic, fp.Partition}
		if _, dup := named[k]; dup {
			// Served twice it would return the same bytes twice.
			return invalidf("fetch request names %s/%d more than once", fp.Topic, fp.Partition)
		}
		named[k] = struct{}{}
	}
	return authorizeTopics(ctx, s.b.sec, acl.Read, req.Partitions, func(p FetchPartition) string { return p.Topic })
}

// fetch is one Fetch call's state across its long-poll rounds.
type fetch struct {
	req      *FetchRequest
	deadline time.Time
	// budgetDeadline: how long a fetch that has gathered nothing waits
	// for room in the budget.
	budgetDeadline time.Time
	maxBytes       int
	out            []FetchResult
	logs           []*partlog.Log
	// changed[i]: partition i's high-watermark channel, taken before its
	// last read (nil: not read yet). Until it closes, a read would find
	// what the last one found.
	changed []<-chan struct{}
	hold    *fetchHold
	metrics *fetchMetrics
	// short: the budget had no room for a read the response had room
	// for; the fetch answers with what it has.
	short bool
}

// errNoRoom: the budget has no room for a read.
var errNoRoom = errors.New("broker: no room in the fetch budget")

// round reads every partition that has no data and no error yet and is
// due (never read, or its high watermark moved), within what the response
// has room for; it returns the bytes gathered, the partitions failed, and
// whether any partition waits for an append. It stops early when the
// budget has no room (f.short).
func (f *fetch) round(ctx context.Context) (total, errs int, waiting bool) {
	for i := range f.req.Partitions {
		res := &f.out[i]
		if res.Err != nil {
			errs++
			continue
		}
		if n := res.Bytes(); n > 0 {
			total += n
			continue
		}
		room := f.maxBytes - total
		if room <= 0 {
			break
		}
		if !f.due(i) {
			waiting = true
			continue
		}
		n, err := f.read(ctx, i, room, total == 0)
		switch {
		case errors.Is(err, errNoRoom):
			f.short = true
			return total, errs, waiting
		case err != nil:
			errs++
		case n == 0:
			waiting = true
		}
		total += n
	}
	return total, errs, waiting
}

// due reports whether partition i must be read: never read yet, or its
// high watermark moved since its last read (which found nothing).
func (f *fetch) due(i int) bool {
	ch := f.changed[i]
	if ch == nil {
		return true
	}
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// read reads partition i, with room bytes left in the response (first:
// nothing gathered yet), into its result, its bytes held from the
// budget; errNoRoom when the budget has none.
func (f *fetch) read(ctx context.Context, i, room int, first bool) (int, error) {
	fp, res, l := f.req.Partitions[i], &f.out[i], f.logs[i]
	pmax := fp.MaxBytes
	if pmax <= 0 || pmax > room {
		pmax = room
	}
	// A partition at its high watermark has nothing to read: its read
	// reserves nothing (an append racing it is settled after the read).
	reserved := int64(pmax)
	if fp.Offset == l.HighWatermark() {
		reserved = 0
	}
	if !f.hold.reserve(ctx, reserved, first, f.budgetDeadline) {
		return 0, errNoRoom
	}
	f.changed[i] = l.HWChanged()
	f.metrics.reads.Inc()
	r, err := l.Fetch(ctx, fp.Offset, pmax, 0)
	if err != nil {
		f.hold.settle(reserved, 0, false)
		res.Err, res.HighWatermark, res.LogStartOffset = err, l.HighWatermark(), l.LogStartOffset()
		var oor *partlog.OutOfRangeError
		if errors.As(err, &oor) {
			res.LogStartOffset, res.HighWatermark = oor.Start, oor.End
		}
		return 0, err
	}
	// The first data of the response is kept even beyond what was
	// reserved (a batch larger than the partition's bound); later data
	// only if the budget has room for it.
	n := r.Bytes()
	if !f.hold.settle(reserved, int64(n), first) {
		return 0, errNoRoom
	}
	// The batches go out as they are, shared with the tail cache.
	res.Batches, res.HighWatermark, res.LogStartOffset = r.Batches, r.HighWatermark, r.LogStartOffset
	return n, nil
}

// parked are the channels of the partitions waiting for an append.
func (f *fetch) parked() []<-chan struct{} {
	var chans []<-chan struct{}
	for i, ch := range f.changed {
		if ch != nil && f.out[i].Err == nil && len(f.out[i].Batches) == 0 {
			chans = append(chans, ch)
		}
	}
	return chans
}

// boundsOfUnread gives the partitions the fetch did not read (the
// response or the budget was full first) their bounds.
func (f *fetch) boundsOfUnread() {
	for i, l := range f.logs {
		if res := &f.out[i]; f.changed[i] == nil && res.Err == nil && l != nil {
			res.HighWatermark, res.LogStartOffset = l.HighWatermark(), l.LogStartOffset()
		}
	}
}
