package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
	"unsafe"

	"github.com/strata-log/strata/internal/grpcopts"
	"github.com/strata-log/strata/internal/rpcerror"
	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/recordbatch"
)

// fetcher keeps a set of partitions, each with a position, and fetches
// them ahead of Poll: one loop per broker sends long-polling FetchRequests
// for the partitions routed to that broker. Partitions can be added (or
// repositioned) and removed at any time; a response for a partition that
// changed since the request is dropped. Consumer uses it for assigned
// partitions; consumer groups reuse it with the partitions the coordinator
// assigns.
//
// Liveness: every fetchable partition is, at all times, either in flight,
// routed to a loop that has been woken since (fetchPart.addr), waiting for
// its backoff to end (the retry timer routes it again then), or waiting
// for a metadata refresh of its topic that routes it again when it ends.
// Routing is decided once, under f.mu, in routeLocked; loops only take the
// partitions routed to them, so a change of the shared metadata cache (by a
// producer, an admin call, another consumer) never strands a partition.
// Only a full buffer waits for Poll: that is back-pressure.
//
// Memory: what is held decoded ahead of Poll, every partition together, is
// at most MaxDecodedBytes (mu.decoded, the sum of the parts' decoded): a
// batch is decoded only when it fits beside it (decodeLocked), and no
// partition is fetched while it is full. A part's decoded is non-zero only
// while it buffers records, so the next Poll gives it all back; a
// partition whose next batch did not fit waits for that (waitRoom). The
// compressed responses are bounded by MaxBytes per request,
// maxFetchesPerBroker requests per broker.
type fetcher struct {
	c   *Client
	cfg ConsumerConfig
	log *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu struct {
		sync.Mutex
		closed     bool
		gen        uint64 // source of fetchPart.gen
		parts      map[TopicPartition]*fetchPart
		decoded    int              // the sum of the parts' decoded
		order      []TopicPartition // Poll's round-robin order
		loops      map[string]chan struct{}
		refreshing map[string]bool
		changed    chan struct{} // closed and replaced when Poll has news
		// retry ends the earliest backoff: it routes again at retryAt, so
		// no partition waits for a Poll call (or anything else) to resume.
		retry   *time.Timer
		retryAt time.Time
	}
}

// fetchPart is one partition's fetch state. Guarded by fetcher.mu.
type fetchPart struct {
	tp       TopicPartition
	gen      uint64 // changes on every reposition
	fetchAt  int64  // next offset to fetch
	position int64  // next offset Poll returns
	records  []*Record
	bytes    int
	decoded  int // what records take decoded (decodeLocked's count)
	// waitRoom: its next batch did not fit in MaxDecodedBytes; it is not
	// fetched again until room is freed (roomFreedLocked).
	waitRoom bool
	hw       int64
	haveHW   bool
	err      error // for Poll, once
	stopped  bool  // no fetching until repositioned
	inflight bool
	addr     string // the broker its fetches go to; "" = not routed
	retryAt  time.Time
	attempts int
}

func newFetcher(c *Client, cfg ConsumerConfig) *fetcher {
	f := &fetcher{c: c, cfg: cfg, log: c.log.With("component", "fetcher")}
	f.ctx, f.cancel = context.WithCancel(context.Background())
	f.mu.parts = map[TopicPartition]*fetchPart{}
	f.mu.loops = map[string]chan struct{}{}
	f.mu.refreshing = map[string]bool{}
	f.mu.changed = make(chan struct{})
	return f
}

// set starts (or restarts) fetching tp at offset, dropping buffered records.
func (f *fetcher) set(tp TopicPartition, offset int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mu.closed {
		return ErrClosed
	}
	f.mu.gen++
	if old, ok := f.mu.parts[tp]; ok {
		f.mu.decoded -= old.decoded
		f.roomFreedLocked()
	} else {
		f.mu.order = append(f.mu.order, tp)
	}
	f.mu.parts[tp] = &fetchPart{tp: tp, gen: f.mu.gen, fetchAt: offset, position: offset}
	f.routeLocked()
	return nil
}

// remove stops fetching tps and drops their buffered records.
func (f *fetcher) remove(tps ...TopicPartition) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, tp := range tps {
		if p, ok := f.mu.parts[tp]; ok {
			f.mu.decoded -= p.decoded
			delete(f.mu.parts, tp)
		}
	}
	f.roomFreedLocked()
	f.routeLocked()
	order := f.mu.order[:0]
	for _, tp := range f.mu.order {
		if _, ok := f.mu.parts[tp]; ok {
			order = append(order, tp)
		}
	}
	f.mu.order = order
}

func (f *fetcher) position(tp TopicPartition) (int64, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p := f.mu.parts[tp]; p != nil {
		return p.position, true
	}
	return 0, false
}

func (f *fetcher) highWatermark(tp TopicPartition) (int64, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p := f.mu.parts[tp]; p != nil && p.haveHW {
		return p.hw, true
	}
	return 0, false
}

// poll returns the buffered records of every partition, waiting for at
// least one or an error, until ctx is done. A partition's error is returned
// once, after the records fetched before it.
func (f *fetcher) poll(ctx context.Context) ([]*Record, error) {
	for {
		f.mu.Lock()
		if f.mu.closed {
			f.mu.Unlock()
			return nil, ErrClosed
		}
		var out []*Record
		var err error
		n := len(f.mu.order)
		for _, tp := range f.mu.order {
			p := f.mu.parts[tp]
			if len(p.records) > 0 {
				out = append(out, p.records...)
				p.position = p.records[len(p.records)-1].Offset + 1
				p.records, p.bytes = nil, 0
				f.mu.decoded -= p.decoded
				p.decoded = 0
			}
		}
		for _, tp := range f.mu.order {
			if p := f.mu.parts[tp]; len(out) == 0 && p.err != nil {
				err, p.err = p.err, nil
				break
			}
		}
		if n > 1 { // rotate so no partition is always first
			f.mu.order = append(f.mu.order[1:], f.mu.order[0])
		}
		if len(out) > 0 || err != nil {
			f.roomFreedLocked()
			f.routeLocked() // drained buffers may be fetched again
			f.mu.Unlock()
			return out, err
		}
		changed := f.mu.changed
		f.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (f *fetcher) close() {
	f.mu.Lock()
	if f.mu.closed {
		f.mu.Unlock()
		return
	}
	f.mu.closed = true
	close(f.mu.changed) // Poll returns ErrClosed; nothing notifies after this
	if f.mu.retry != nil {
		f.mu.retry.Stop()
	}
	f.mu.Unlock()
	f.cancel()
	f.wg.Wait()
}

// notifyLocked wakes Poll.
// REQUIRES: f.mu held.
func (f *fetcher) notifyLocked() {
	if f.mu.closed {
		return // changed is closed for good
	}
	close(f.mu.changed)
	f.mu.changed = make(chan struct{})
}

// fetchableLocked reports whether p should be fetched (ignoring backoff).
// REQUIRES: f.mu held.
func (f *fetcher) fetchableLocked(p *fetchPart) bool {
	return !p.stopped && !p.inflight && p.err == nil && !p.waitRoom && p.bytes < f.cfg.PartitionMaxBytes &&
		f.mu.decoded < f.cfg.MaxDecodedBytes
}

// roomFreedLocked lets the partitions waiting for room in MaxDecodedBytes
// be fetched again: some was freed. The caller routes them.
// REQUIRES: f.mu held.
func (f *fetcher) roomFreedLocked() {
	for _, p := range f.mu.parts {
		p.waitRoom = false
	}
}

// routeLocked routes every fetchable partition to its owner's loop and
// wakes that loop, starting loops and metadata refreshes as needed; it arms
// the retry timer for the partitions still backing off. Call it after
// anything that may make a partition fetchable.
// REQUIRES: f.mu held.
func (f *fetcher) routeLocked() {
	if f.mu.closed {
		return
	}
	now := time.Now()
	var nextRetry time.Time
	for _, p := range f.mu.parts {
		if !f.fetchableLocked(p) {
			continue
		}
		addr, refresh := f.c.cachedOwner(p.tp)
		if refresh {
			f.refreshLocked(p.tp.Topic) // routes again when it ends
		}
		if now.Before(p.retryAt) {
			if addr == "" || addr == p.addr {
				// Same broker as the failed attempt: wait the backoff out.
				if nextRetry.IsZero() || p.retryAt.Before(nextRetry) {
					nextRetry = p.retryAt
				}
				continue
			}
			p.retryAt = time.Time{} // a new owner: try it at once
		}
		p.addr = addr
		if addr == "" {
			continue
		}
		wake, ok := f.mu.loops[addr]
		if !ok {
			wake = make(chan struct{}, 1)
			f.mu.loops[addr] = wake
			f.wg.Add(1)
			go f.loop(addr, wake)
		}
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	f.armRetryLocked(nextRetry)
}

// armRetryLocked makes sure routeLocked runs again at at (zero: no need).
// REQUIRES: f.mu held.
func (f *fetcher) armRetryLocked(at time.Time) {
	if at.IsZero() || (!f.mu.retryAt.IsZero() && !at.Before(f.mu.retryAt)) {
		return
	}
	f.mu.retryAt = at
	d := max(time.Until(at), time.Millisecond)
	if f.mu.retry == nil {
		f.mu.retry = time.AfterFunc(d, f.retryDue)
		return
	}
	f.mu.retry.Reset(d)
}

// retryDue runs on the retry timer: backoffs have ended.
func (f *fetcher) retryDue() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mu.retryAt = time.Time{}
	f.routeLocked()
}

// refreshLocked refreshes topic's metadata in the background.
// REQUIRES: f.mu held.
func (f *fetcher) refreshLocked(topic string) {
	if f.mu.closed || f.mu.refreshing[topic] {
		return
	}
	f.mu.refreshing[topic] = true
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		ti, err := f.c.refreshTopic(f.ctx, topic)
		f.mu.Lock()
		defer f.mu.Unlock()
		delete(f.mu.refreshing, topic)
		for _, p := range f.mu.parts {
			if p.tp.Topic != topic {
				continue
			}
			if errors.Is(err, ErrUnknownTopic) || (ti != nil && int(p.tp.Partition) >= len(ti.owners)) {
				if !p.stopped {
					p.stopped = true
					p.err = fmt.Errorf("%w: %s", ErrUnknownPartition, p.tp)
					if errors.Is(err, ErrUnknownTopic) {
						p.err = err
					}
					f.notifyLocked()
				}
			}
		}
		f.routeLocked()
	}()
}

// maxFetchesPerBroker bounds the fetch requests in flight to one broker.
// Each request carries a disjoint set of partitions, so a partition that
// becomes fetchable again (its buffer was drained, its previous fetch
// answered) is fetched at once instead of waiting for a long poll on the
// others to end.
const maxFetchesPerBroker = 8

// loop fetches the partitions routed to addr. It ends when the fetcher
// closes, or when no partition is routed to addr any more (routeLocked
// starts a new one when one is).
func (f *fetcher) loop(addr string, wake chan struct{}) {
	defer f.wg.Done()
	slots := make(chan struct{}, maxFetchesPerBroker)
	for {
		select {
		case slots <- struct{}{}:
		case <-f.ctx.Done():
			return
		}
		req, parts, done := f.collect(addr, wake)
		if done {
			return
		}
		if len(parts) == 0 {
			<-slots
			select {
			case <-wake:
			case <-f.ctx.Done():
				return
			}
			continue
		}
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			resp, err := f.fetch(addr, req)
			f.apply(parts, resp, err)
			<-slots
			select { // a slot is free: look again
			case wake <- struct{}{}:
			default:
			}
		}()
	}
}

// collect marks the fetchable partitions routed to addr in flight and
// builds their request. done: nothing is routed to addr any more, and the
// loop is removed (under f.mu, so routeLocked starts a new one if needed).
func (f *fetcher) collect(addr string, wake chan struct{}) (req *brokerpb.FetchRequest, parts []*fetchPart, done bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	req = &brokerpb.FetchRequest{
		MaxWaitMs: int32(f.cfg.MaxWait.Milliseconds()),
		MinBytes:  int32(f.cfg.MinBytes),
		// Leave room for the response's framing under the gRPC limit.
		MaxBytes: int32(min(f.cfg.MaxBytes, grpcopts.MaxMessageBytes-1<<20)),
	}
	now := time.Now()
	routed := false
	for _, p := range f.mu.parts {
		if p.addr != addr {
			continue
		}
		routed = true
		if !f.fetchableLocked(p) || now.Before(p.retryAt) {
			continue // the retry timer routes it when its backoff ends
		}
		if len(parts) == maxRequestPartitions {
			continue // the next request takes it (the loop collects again once a slot frees)
		}
		p.inflight = true
		parts = append(parts, p)
		req.Partitions = append(req.Partitions, &brokerpb.FetchPartition{
			Topic: p.tp.Topic, Partition: p.tp.Partition, Offset: p.fetchAt,
			MaxBytes: int32(min(f.cfg.PartitionMaxBytes, grpcopts.MaxMessageBytes-1<<20)),
		})
	}
	if !routed && f.mu.loops[addr] == wake {
		delete(f.mu.loops, addr)
		return nil, nil, true
	}
	return req, parts, false
}

func (f *fetcher) fetch(addr string, req *brokerpb.FetchRequest) (*brokerpb.FetchResponse, error) {
	stub, err := f.c.broker(addr)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(f.ctx, f.c.cfg.RequestTimeout+f.cfg.MaxWait)
	defer cancel()
	resp, err := stub.Fetch(ctx, req)
	if f.ctx.Err() == nil {
		f.c.noteCall(addr, err)
	}
	return resp, err
}

// apply takes in a fetch response (or the call's error) for parts.
func (f *fetcher) apply(parts []*fetchPart, resp *brokerpb.FetchResponse, callErr error) {
	results := map[TopicPartition]*brokerpb.FetchPartitionResult{}
	if resp != nil {
		for _, r := range resp.Partitions {
			results[TopicPartition{r.Topic, r.Partition}] = r
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mu.closed {
		return // Poll has returned ErrClosed; nothing reads these any more
	}
	news := false
	for _, p := range parts {
		p.inflight = false
		if f.mu.parts[p.tp] != p {
			continue // removed or repositioned meanwhile
		}
		r := results[p.tp]
		switch {
		case errors.Is(callErr, ErrClosed):
			// The Client was closed under the consumer: no retry can help.
			p.stopped, p.err = true, callErr
			news = true
		case callErr != nil:
			f.retryLocked(p, callErr)
		case r == nil:
			// The broker skipped it (e.g. its response filled up): go again.
		case r.Error != nil:
			news = f.partitionErrorLocked(p, r) || news
		default:
			p.hw, p.haveHW = r.HighWatermark, true
			p.attempts = 0
			if err := f.appendLocked(p, r.AllRecords()); err != nil {
				p.err, p.stopped = err, true
			}
			news = news || len(p.records) > 0 || p.err != nil
		}
	}
	if news {
		f.notifyLocked()
	}
	f.routeLocked()
}

// retryLocked backs p off after a failure that may pass.
// REQUIRES: f.mu held.
func (f *fetcher) retryLocked(p *fetchPart, err error) {
	p.attempts++
	p.retryAt = time.Now().Add(backoffFor(50*time.Millisecond, p.attempts))
	f.c.routeError(p.tp, err)
	f.log.Debug("fetch retry", "partition", p.tp.String(), "attempt", p.attempts, "err", err)
}

// partitionErrorLocked handles a per-partition error; it reports whether
// Poll has something new.
// REQUIRES: f.mu held.
func (f *fetcher) partitionErrorLocked(p *fetchPart, r *brokerpb.FetchPartitionResult) bool {
	err := partitionError(r.Error)
	switch rpcerror.Reason(err) {
	case rpcerror.ReasonNotOwner:
		f.c.routeError(p.tp, err)
		if info := rpcerror.Info(err); info == nil || info.Redirect == "" {
			f.retryLocked(p, err)
		}
		return false
	case rpcerror.ReasonOutOfRange:
		p.stopped = true
		p.err = &OffsetOutOfRangeError{TopicPartition: p.tp, Offset: p.fetchAt,
			LogStartOffset: r.LogStartOffset, HighWatermark: r.HighWatermark, Err: err}
		if r.HighWatermark > 0 || r.LogStartOffset > 0 {
			p.hw, p.haveHW = r.HighWatermark, true
		}
		return true
	case rpcerror.ReasonNotFound:
		f.retryLocked(p, err) // the refresh decides whether it is gone
		f.refreshLocked(p.tp.Topic)
		return false
	}
	if retryableCall(err) {
		f.retryLocked(p, err)
		return false
	}
	p.stopped, p.err = true, fmt.Errorf("client: fetch %s at %d: %w", p.tp, p.fetchAt, err)
	return true
}

// appendLocked decodes fetched batches into p's buffer, skipping records
// below p.fetchAt and control batches, while they fit in MaxDecodedBytes:
// the first batch that does not is left (with the rest) for a fetch after
// Poll has taken the records.
// REQUIRES: f.mu held.
func (f *fetcher) appendLocked(p *fetchPart, buf []byte) error {
	if len(buf) == 0 {
		return nil
	}
	batches, err := recordbatch.Split(buf)
	if err != nil {
		return fmt.Errorf("client: fetch %s at %d: %w", p.tp, p.fetchAt, err)
	}
	for _, raw := range batches {
		hdr, err := recordbatch.ParseHeader(raw) // Split parsed it
		if err != nil {
			return fmt.Errorf("client: fetch %s at %d: %w", p.tp, p.fetchAt, err)
		}
		if hdr.LastOffset() < p.fetchAt {
			continue // below the position: not worth decoding
		}
		recs, decoded, err := f.decodeLocked(p, raw, hdr)
		if errors.Is(err, errNoRoom) {
			p.waitRoom = true
			return nil
		}
		if err != nil {
			return err
		}
		kept := 0
		if !hdr.IsControl() {
			for _, rr := range recs {
				if rr.Offset >= p.fetchAt {
					r := consumedRecord(p.tp, rr)
					p.records = append(p.records, r)
					p.bytes += recordBytes(r)
					kept++
				}
			}
		}
		if kept > 0 {
			// The records kept alias the batch's decoded bytes: it is
			// held until Poll takes them. A batch with none kept is
			// garbage already, and counting it would hold room that no
			// Poll gives back.
			p.decoded += decoded
			f.mu.decoded += decoded
		}
		p.fetchAt = hdr.LastOffset() + 1
	}
	return nil
}

// errNoRoom: a batch does not fit beside what the consumer holds decoded.
var errNoRoom = errors.New("client: no room to decode")

// Decoded sizes besides what recordbatch.DecodeWithin counts: the Record
// each record becomes (and its pointer in the buffer, with append's
// slack), and the Header each header is copied into.
const (
	consumedRecordBytes = int(unsafe.Sizeof(Record{})) + 2*int(unsafe.Sizeof(uintptr(0)))
	consumedHeaderBytes = int(unsafe.Sizeof(Header{}))
)

// decodeLocked decodes raw, p's batch with header hdr, if what it takes
// decoded (recordbatch.DecodeWithin's count, the Records and Headers it
// becomes) fits beside what the consumer holds: decoded is that size. If
// it does not, the error is errNoRoom while anything is held (Poll makes
// room), else ErrBatchTooLarge naming the partition and the offset: the
// batch alone is larger than MaxDecodedBytes.
// REQUIRES: f.mu held.
func (f *fetcher) decodeLocked(p *fetchPart, raw []byte, hdr recordbatch.BatchHeader) ([]recordbatch.Record, int, error) {
	limit := f.cfg.MaxDecodedBytes
	room := int64(limit - f.mu.decoded)
	tooLarge := func(err error) error {
		if f.mu.decoded > 0 {
			return errNoRoom
		}
		return fmt.Errorf("%w: partition %s: the batch at offset %d (%d records) decodes to more than %d bytes: %w",
			ErrBatchTooLarge, p.tp, hdr.BaseOffset, hdr.RecordCount, limit, err)
	}
	consumed := int64(max(hdr.RecordCount, 0)) * int64(consumedRecordBytes)
	if consumed > room {
		return nil, 0, tooLarge(recordbatch.ErrTooLarge)
	}
	_, recs, decoded, err := recordbatch.DecodeWithin(raw, int(room-consumed))
	if errors.Is(err, recordbatch.ErrTooLarge) {
		return nil, 0, tooLarge(err)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("client: fetch %s at %d: %w", p.tp, p.fetchAt, err)
	}
	headers := 0
	for i := range recs {
		headers += len(recs[i].Headers)
	}
	total := int64(decoded) + consumed + int64(headers)*int64(consumedHeaderBytes)
	if total > room {
		return nil, 0, tooLarge(fmt.Errorf("%w: %d bytes", recordbatch.ErrTooLarge, total))
	}
	return recs, int(total), nil
}

// consumedRecord is the Record Poll returns for rr, read from tp.
func consumedRecord(tp TopicPartition, rr recordbatch.Record) *Record {
	r := &Record{
		Topic: tp.Topic, Partition: tp.Partition,
		Key: rr.Key, Value: rr.Value,
		Timestamp: time.UnixMilli(rr.TimestampMs), Offset: rr.Offset,
	}
	if len(rr.Headers) > 0 {
		r.Headers = make([]Header, len(rr.Headers))
		for i, h := range rr.Headers {
			r.Headers[i] = Header{Key: h.Key, Value: h.Value}
		}
	}
	return r
}
