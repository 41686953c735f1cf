package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/strata-log/strata/internal/rpcerror"
	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/recordbatch"
)

// dispatch is the producer's send loop: on every wake-up it takes, for each
// partition, the next batch that may be sent, groups them by owner and
// sends one ProduceRequest per broker.
func (p *Producer) dispatch() {
	defer p.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		select {
		case <-p.wake:
		case <-timer.C:
		case <-p.ctx.Done():
			return
		}
		reqs, next, more := p.collect(time.Now())
		for addr, bs := range reqs {
			p.wg.Add(1)
			go p.send(addr, bs)
		}
		if more {
			p.signal()
		}
		timer.Stop()
		select {
		case <-timer.C:
		default:
		}
		if !next.IsZero() {
			timer.Reset(max(time.Until(next), time.Millisecond))
		}
	}
}

// collect picks the batches to send now. It returns them by broker address
// (a map that the next call reuses), the next time something becomes due
// (retry backoff, expiry), and whether more batches are sendable right
// away.
func (p *Producer) collect(now time.Time) (reqs map[string][]*batch, next time.Time, more bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.collectReqs == nil {
		p.collectReqs, p.collectBytes = map[string][]*batch{}, map[string]int{}
	}
	reqs, reqBytes := p.collectReqs, p.collectBytes
	clear(reqs)
	clear(reqBytes)
	if p.mu.fatal != nil {
		p.failLocked(p.mu.fatal) // batches sealed since the failure
		return reqs, next, false
	}
	for _, ps := range p.mu.parts {
		b, due := p.nextBatchLocked(ps, now)
		next = earliest(next, due)
		if b == nil {
			continue
		}
		addr, refresh := p.c.cachedOwner(ps.tp)
		if refresh {
			p.refreshLocked(ps.tp.Topic)
		}
		if addr == "" {
			continue
		}
		if len(reqs[addr]) >= maxRequestPartitions || len(reqs[addr]) > 0 && reqBytes[addr]+b.bytes > maxRequestBytes {
			more = true // next request
			continue
		}
		reqBytes[addr] += b.bytes
		p.markSentLocked(ps, b)
		reqs[addr] = append(reqs[addr], b)
		if ps.inflight < p.cfg.MaxInFlight && ps.waiting(p.cfg.MaxInFlight) != nil {
			more = true
		}
	}
	return reqs, next, more
}

// nextBatchLocked expires ps's overdue batches and returns the batch of ps
// to send now, nil if none may go: the partition is draining, resetting,
// at MaxInFlight, backing off, or waiting for a producer id. due is when
// ps next needs a look even if nothing is sent (its oldest waiting batch's
// deadline, the end of its backoff); zero when nothing waits.
// REQUIRES: p.mu held.
func (p *Producer) nextBatchLocked(ps *partState, now time.Time) (b *batch, due time.Time) {
	p.expireLocked(ps, now)
	if len(ps.batches) == 0 {
		return nil, due
	}
	if w := ps.waiting(len(ps.batches)); w != nil {
		due = w.deadline
	}
	if ps.draining || ps.resetting || ps.inflight >= p.cfg.MaxInFlight {
		return nil, due
	}
	if now.Before(ps.retryAt) {
		return nil, earliest(due, ps.retryAt)
	}
	if ps.needReset {
		// Settle, one at a time under their own numbers, the batches a
		// broker may hold before the reset renumbers what is left.
		if ps.inflight > 0 {
			return nil, due
		}
		return ps.unsettled(), due
	}
	if p.idempotent && !ps.havePID {
		if p.mu.pid < 0 {
			return nil, due // initProducerID wakes us
		}
		ps.havePID, ps.pid, ps.epoch = true, p.mu.pid, p.mu.epoch
	}
	// The window starts at the oldest unacknowledged batch, not at the
	// in-flight count: answers of concurrent requests arrive in any order,
	// and a batch retried after more than maxIdempotentInFlight later ones
	// were stored is no longer recognised as a duplicate by the broker (it
	// would answer OUT_OF_ORDER_SEQUENCE for data it holds).
	return ps.waiting(p.cfg.MaxInFlight), due
}

// markSentLocked records that b, of ps, goes out now: an idempotent batch
// sent for the first time takes its sequence numbers.
// REQUIRES: p.mu held.
func (p *Producer) markSentLocked(ps *partState, b *batch) {
	if p.idempotent && b.seq < 0 {
		b.pid, b.epoch, b.seq = ps.pid, ps.epoch, ps.nextSeq
		ps.nextSeq = recordbatch.AddSequence(ps.nextSeq, len(b.recs))
		p.dropEncodingLocked(b)
	}
	b.mayBeStored = p.idempotent
	// Sent while an earlier batch is unanswered: the broker may see them
	// out of order (OUT_OF_ORDER_SEQUENCE is then expected).
	b.pipelined = ps.inflight > 0
	b.inflight, b.sent = true, true
	ps.inflight++
}

// waiting returns the first batch among p's oldest window that is neither
// completed nor in flight, nil if none.
func (p *partState) waiting(window int) *batch {
	for _, c := range p.batches[:min(len(p.batches), window)] {
		if !c.done && !c.inflight {
			return c
		}
	}
	return nil
}

// unsettled returns the first batch of p that may be stored and is
// neither completed nor in flight, nil if none.
func (p *partState) unsettled() *batch {
	for _, b := range p.batches {
		if b.mayBeStored && !b.done && !b.inflight {
			return b
		}
	}
	return nil
}

// settling reports whether a batch of p that may be stored is not
// completed: a reset must wait for it.
func (p *partState) settling() bool {
	return slices.ContainsFunc(p.batches, func(b *batch) bool { return b.mayBeStored && !b.done })
}

// earliest is the earlier of a and b, a zero time standing for none.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || !b.IsZero() && b.Before(a) {
		return b
	}
	return a
}

// expireLocked fails ps's waiting batches whose delivery timeout passed.
// REQUIRES: p.mu held.
func (p *Producer) expireLocked(ps *partState, now time.Time) {
	expired := false
	for _, b := range ps.batches {
		if b.done || b.inflight || now.Before(b.deadline) {
			continue
		}
		b.done, expired = true, true
		b.err = fmt.Errorf("%w: %s after %s", ErrDeliveryTimeout, b.tp, p.cfg.DeliveryTimeout)
		if b.lastErr != nil {
			// Why it was still waiting: the cause, not only the symptom.
			b.err = fmt.Errorf("%w (last error: %v)", b.err, b.lastErr)
		}
		if b.sent {
			// The broker may have stored it: sequence numbers after it
			// can no longer be trusted.
			b.err = fmt.Errorf("%w: %w", b.err, ErrUnknownOutcome)
			if p.idempotent {
				ps.needReset = true
			}
		}
	}
	if expired {
		p.afterAnswerLocked(ps)
	}
}

// refreshLocked starts a metadata refresh for topic unless one is running.
// REQUIRES: p.mu held.
func (p *Producer) refreshLocked(topic string) {
	if p.mu.refreshing[topic] {
		return
	}
	p.mu.refreshing[topic] = true
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		_, err := p.c.refreshTopic(p.ctx, topic)
		p.mu.Lock()
		delete(p.mu.refreshing, topic)
		if errors.Is(err, ErrUnknownTopic) {
			p.failTopicLocked(topic, err)
		}
		p.mu.Unlock()
		p.signal()
	}()
}

// failTopicLocked fails the queued batches of a topic that does not exist
// (any more). One sent before (the topic was deleted after) may have been
// stored: its outcome is unknown and, as at a delivery timeout, the
// sequence numbers after it can no longer be trusted.
// REQUIRES: p.mu held.
func (p *Producer) failTopicLocked(topic string, err error) {
	for tp, ps := range p.mu.parts {
		if tp.Topic != topic {
			continue
		}
		for _, b := range ps.batches {
			if b.done || b.inflight {
				continue
			}
			b.done, b.err = true, err
			if b.sent {
				b.err = fmt.Errorf("%w: %w", err, ErrUnknownOutcome)
				if p.idempotent {
					ps.needReset = true
				}
			}
		}
		p.afterAnswerLocked(ps)
	}
}

// initProducerID obtains the producer id, retrying until it succeeds, a
// non-retryable error makes the producer unusable, or Close.
func (p *Producer) initProducerID() {
	defer p.wg.Done()
	pid, epoch, err := p.newProducerID()
	p.mu.Lock()
	if err != nil {
		if p.ctx.Err() == nil {
			p.failLocked(fmt.Errorf("client: init producer id: %w", err))
		}
	} else {
		p.mu.pid, p.mu.epoch = pid, epoch
	}
	p.mu.Unlock()
	p.signal()
}

func (p *Producer) newProducerID() (int64, int16, error) {
	var resp *brokerpb.InitProducerIDResponse
	err := p.c.anyBroker(p.ctx, func(ctx context.Context, b brokerpb.BrokerClient) (err error) {
		resp, err = b.InitProducerID(ctx, &brokerpb.InitProducerIDRequest{})
		return err
	})
	if err != nil {
		return 0, 0, err
	}
	return resp.ProducerId, int16(resp.ProducerEpoch), nil
}

// resetPartition gives ps a new producer id and renumbers its pending
// batches from sequence 0.
func (p *Producer) resetPartition(ps *partState) {
	defer p.wg.Done()
	pid, epoch, err := p.newProducerID()
	p.mu.Lock()
	if err != nil {
		if p.ctx.Err() == nil {
			p.failLocked(fmt.Errorf("client: reset producer id: %w", err))
		}
	} else {
		ps.pid, ps.epoch, ps.nextSeq, ps.havePID = pid, epoch, 0, true
		for _, b := range ps.batches {
			if !b.done {
				b.seq = -1
				p.dropEncodingLocked(b)
			}
		}
		p.log.Debug("partition sequence reset", "partition", ps.tp.String(), "producer_id", pid)
	}
	ps.resetting, ps.needReset = false, false
	p.mu.Unlock()
	p.signal()
}

// failLocked makes the producer unusable and fails every pending batch.
// REQUIRES: p.mu held.
func (p *Producer) failLocked(err error) {
	if p.mu.fatal == nil {
		p.mu.fatal = err
		p.log.Warn("producer failed", "err", err)
	}
	for _, ps := range p.mu.parts {
		for _, b := range ps.batches {
			if !b.done && !b.inflight {
				b.done, b.err = true, p.mu.fatal
			}
		}
		p.completeLocked(ps)
	}
	close(p.mu.spaceFreed)
	p.mu.spaceFreed = make(chan struct{})
}

// encodeRecords holds recordbatch.Record slices for encode, which
// needs one per batch only while it encodes.
var encodeRecords = sync.Pool{New: func() any { return new([]recordbatch.Record) }}

// encode builds the v2 record batch of b (once: a retry resends the same
// bytes, same producer id, epoch and sequence).
func (p *Producer) encode(b *batch) ([]byte, error) {
	scratch := encodeRecords.Get().(*[]recordbatch.Record)
	defer func() {
		clear(*scratch) // the values are the callers'
		encodeRecords.Put(scratch)
	}()
	*scratch = slices.Grow((*scratch)[:0], len(b.recs))[:len(b.recs)]
	rb := &recordbatch.Batch{
		ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1,
		Compression: p.cfg.Compression,
		Records:     *scratch,
	}
	if b.seq >= 0 {
		rb.ProducerID, rb.ProducerEpoch, rb.BaseSequence = b.pid, b.epoch, b.seq
	}
	for i := range b.recs {
		r := b.recs[i].rec
		rr := &rb.Records[i]
		rr.OffsetDelta = int32(i)
		rr.TimestampMs = r.Timestamp.UnixMilli()
		rr.Key, rr.Value = r.Key, r.Value
		if len(r.Headers) > 0 {
			rr.Headers = make([]recordbatch.Header, len(r.Headers))
			for j, h := range r.Headers {
				rr.Headers[j] = recordbatch.Header{Key: h.Key, Value: h.Value}
			}
		}
	}
	buf := encodings.Get(b.bytes) // b.bytes: the encoding's size, estimated from above
	enc, err := recordbatch.AppendEncode((*buf)[:0], rb)
	if err != nil {
		encodings.Put(buf)
	}
	return enc, err
}

// send sends one ProduceRequest with bs (one batch per partition) to addr
// and applies the answer.
func (p *Producer) send(addr string, bs []*batch) {
	defer p.wg.Done()
	req := &brokerpb.ProduceRequest{
		Acks:      brokerpb.Acks(p.cfg.Acks),
		TimeoutMs: int32(min(p.c.cfg.RequestTimeout, p.cfg.DeliveryTimeout).Milliseconds()),
	}
	var errs []error // per batch of bs, when one failed to encode
	parts := make([]brokerpb.ProducePartition, len(bs))
	req.Partitions = make([]*brokerpb.ProducePartition, 0, len(bs))
	var encoded int64 // what the new encodings' buffers take beyond their room
	for i, b := range bs {
		// b is in flight: nobody else touches its encoding.
		if b.encoded == nil {
			enc, err := p.encode(b)
			if err != nil {
				if errs == nil {
					errs = make([]error, len(bs))
				}
				errs[i] = fmt.Errorf("client: encode batch: %w", err)
				continue
			}
			b.encoded = enc
			encoded += int64(cap(enc) - b.bytes)
		}
		pp := &parts[i]
		pp.Topic, pp.Partition, pp.Records = b.tp.Topic, b.tp.Partition, b.encoded
		req.Partitions = append(req.Partitions, pp)
	}
	if encoded != 0 {
		p.mu.Lock()
		p.mu.encoded += encoded
		p.mu.Unlock()
	}
	var resp *brokerpb.ProduceResponse
	var callErr error
	if len(req.Partitions) > 0 {
		p.stats.requests.Add(1)
		p.stats.batches.Add(int64(len(req.Partitions)))
		var stub brokerpb.BrokerClient
		stub, callErr = p.c.broker(addr)
		if callErr == nil {
			ctx, cancel := context.WithTimeout(p.ctx, p.c.cfg.RequestTimeout)
			resp, callErr = stub.Produce(ctx, req)
			cancel()
			if p.ctx.Err() == nil {
				p.c.noteCall(addr, callErr)
			}
		}
	}
	results := produceResults{resp: resp}
	p.mu.Lock()
	for i, b := range bs {
		switch {
		case errs != nil && errs[i] != nil:
			p.answerLocked(b, -1, errs[i], true)
		case callErr != nil:
			p.answerLocked(b, -1, callErr, false)
		default:
			r := results.find(b.tp)
			switch {
			case r == nil:
				p.answerLocked(b, -1, status.Error(codes.Internal, "client: produce response without "+b.tp.String()), true)
			case r.Error != nil:
				p.answerLocked(b, -1, partitionError(r.Error), false)
			default:
				p.answerLocked(b, r.BaseOffset, nil, false)
			}
		}
	}
	p.mu.Unlock()
	p.signal()
}

// produceResults finds a partition's result in a ProduceResponse. A
// broker answers in the request's order, so the next result is tried
// first; a map is made only for an answer in another order.
type produceResults struct {
	resp  *brokerpb.ProduceResponse
	next  int
	index map[TopicPartition]*brokerpb.ProducePartitionResult
}

// find returns tp's result, nil if the response has none.
func (r *produceResults) find(tp TopicPartition) *brokerpb.ProducePartitionResult {
	if r.resp == nil {
		return nil
	}
	if r.index == nil {
		if r.next < len(r.resp.Partitions) {
			if res := r.resp.Partitions[r.next]; res.Topic == tp.Topic && res.Partition == tp.Partition {
				r.next++
				return res
			}
		}
		r.index = make(map[TopicPartition]*brokerpb.ProducePartitionResult, len(r.resp.Partitions))
		for _, res := range r.resp.Partitions {
			r.index[TopicPartition{res.Topic, res.Partition}] = res
		}
	}
	return r.index[tp]
}

// produceVerdict is what to do with a batch after an error.
type produceVerdict int

const (
	verdictRetry        produceVerdict = iota
	verdictFailBatch                   // the broker did not store it
	verdictFailUnknown                 // it may be stored; cannot retry safely
	verdictFailProducer                // fatal for the producer
)

// verdictLocked classifies err for batch b of ps.
// REQUIRES: p.mu held.
func (p *Producer) verdictLocked(ps *partState, b *batch, err error) produceVerdict {
	reason := rpcerror.Reason(err)
	switch reason {
	case rpcerror.ReasonProducerFenced:
		return verdictFailProducer
	case rpcerror.ReasonNotOwner, rpcerror.ReasonNotFound:
		return verdictRetry
	case rpcerror.ReasonUnknownOutcome:
		if p.idempotent {
			return verdictRetry
		}
		return verdictFailUnknown
	case rpcerror.ReasonOutOfOrderSequence, rpcerror.ReasonUnknownProducerID:
		// The broker holds no batch of these numbers: not this one
		// either, whatever became of an earlier send of it (a stored
		// one would have been answered as a duplicate).
		b.mayBeStored = false
		// Expected when an earlier batch of the partition failed or is
		// still unanswered: this one goes again after it.
		if ps.needReset || ps.draining || b.pipelined {
			return verdictRetry
		}
		for _, c := range ps.batches {
			if c == b {
				break
			}
			if !c.done || c.err != nil {
				return verdictRetry
			}
		}
		if reason == rpcerror.ReasonUnknownProducerID {
			// Nothing before it is on its way: the partition lost the
			// producer's state (it expired). The broker stored nothing,
			// so the batch goes again under a new producer id (Kafka's
			// UNKNOWN_PRODUCER_ID).
			ps.needReset = true
			return verdictRetry
		}
		return verdictFailBatch
	case "":
	default:
		if rpcerror.Retryable(err) {
			return verdictRetry
		}
		return verdictFailBatch
	}
	if p.ctx.Err() != nil {
		return verdictFailUnknown
	}
	switch status.Code(err) {
	case codes.Unavailable:
		// Mostly "could not connect"; with idempotence always safe.
		return verdictRetry
	case codes.DeadlineExceeded, codes.Canceled, codes.Unknown, codes.Internal, codes.Aborted:
		if p.idempotent {
			return verdictRetry
		}
		return verdictFailUnknown
	}
	return verdictFailBatch
}

// answerLocked applies the outcome of one send of b.
// REQUIRES: p.mu held.
func (p *Producer) answerLocked(b *batch, base int64, err error, local bool) {
	ps := p.mu.parts[b.tp]
	b.inflight = false
	ps.inflight--
	if err == nil {
		b.done, b.base = true, base
		p.afterAnswerLocked(ps)
		return
	}
	verdict := verdictFailBatch
	if !local {
		verdict = p.verdictLocked(ps, b, err)
	}
	if verdict == verdictRetry && !time.Now().Before(b.deadline) {
		verdict = verdictFailUnknown
		err = fmt.Errorf("%w: %w", ErrDeliveryTimeout, err)
	}
	switch verdict {
	case verdictRetry:
		b.attempts++
		b.lastErr = err
		p.stats.retries.Add(1)
		ps.draining = true
		ps.retryAt = time.Now().Add(backoffFor(p.cfg.RetryBackoff, b.attempts))
		if rpcerror.Reason(err) == rpcerror.ReasonNotOwner {
			p.c.routeError(b.tp, err)
			if info := rpcerror.Info(err); info != nil && info.Redirect != "" {
				ps.retryAt = time.Now() // the owner is known: go now
			}
		} else if r := rpcerror.Reason(err); r != rpcerror.ReasonOutOfOrderSequence && r != rpcerror.ReasonUnknownProducerID {
			p.c.invalidate(b.tp.Topic)
		}
		p.log.Debug("retrying batch", "partition", b.tp.String(), "attempt", b.attempts, "err", err)
	case verdictFailBatch:
		b.done, b.err = true, classify(err)
		if p.idempotent && b.seq >= 0 {
			ps.needReset = true
		}
	case verdictFailUnknown:
		b.done, b.err = true, fmt.Errorf("%w: %w", ErrUnknownOutcome, classify(err))
		if p.idempotent && b.seq >= 0 {
			ps.needReset = true
		}
	case verdictFailProducer:
		b.done, b.err = true, classify(err)
		p.failLocked(b.err)
	}
	p.afterAnswerLocked(ps)
}

// afterAnswerLocked ends a drain when nothing is in flight and delivers
// finished batches.
// REQUIRES: p.mu held.
func (p *Producer) afterAnswerLocked(ps *partState) {
	if ps.needReset && !ps.draining && ps.inflight > 0 {
		ps.draining = true
	}
	if ps.inflight == 0 {
		ps.draining = false
		if ps.needReset && !ps.resetting && !ps.settling() && p.ctx.Err() == nil {
			ps.resetting = true
			p.wg.Add(1)
			go p.resetPartition(ps)
		}
	}
	p.completeLocked(ps)
	// The partition went idle with records waiting for their linger: they
	// go now (see ProducerConfig.Linger). So do the keyless records waiting
	// in the sticky partition once the whole topic is idle (topicState).
	if p.cfg.LingerAlways || p.cfg.Linger <= 0 {
		return
	}
	if ps.open != nil && ps.idleLocked() {
		p.sealLocked(ps, -1)
	}
	ts := p.mu.topics[ps.tp.Topic]
	if ts.sealed == 0 && ts.sticky >= 0 {
		if ss := p.mu.parts[TopicPartition{ps.tp.Topic, ts.sticky}]; ss != nil && ss.open != nil && ss.idleLocked() {
			p.sealLocked(ss, -1)
		}
	}
}
