package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/strata-log/strata/recordbatch"
)

// Producer defaults.
const (
	DefaultLinger           = 5 * time.Millisecond
	DefaultBatchBytes       = 1 << 20
	DefaultMaxBufferedBytes = 64 << 20
	DefaultMaxInFlight      = 5
	DefaultDeliveryTimeout  = 2 * time.Minute
	DefaultRetryBackoff     = 100 * time.Millisecond

	// maxIdempotentInFlight is how many batches per producer and partition
	// a broker remembers for deduplication.
	maxIdempotentInFlight = 5
	// batchOverheadBytes is the fixed size of a v2 record batch header.
	batchOverheadBytes = 61
	// recordOverheadBytes bounds a record's varint framing.
	recordOverheadBytes = 24
	// recordHeldBytes is what the producer holds for a record besides its
	// bytes (recordMemory): the Record, which it keeps for the callback,
	// and the record's slot in its batch.
	recordHeldBytes = int(unsafe.Sizeof(Record{}) + unsafe.Sizeof(pendingRecord{}))
	// maxRequestBytes bounds the batches of one ProduceRequest, below the
	// brokers' message limit (grpcopts.MaxMessageBytes, 16 MiB).
	maxRequestBytes = 12 << 20
	// maxRequestPartitions bounds the partitions one Produce or Fetch
	// request names: brokers refuse more (broker.MaxProducePartitions and
	// MaxFetchPartitions), so a client with more partitions on one broker
	// sends several requests.
	maxRequestPartitions = 1000
)

// ProducerConfig configures a Producer. The zero value is usable.
type ProducerConfig struct {
	Acks Acks
	// Linger is how long a batch waits for more records while earlier
	// batches of its stream are in flight. Default 5ms; negative means
	// send at once. A stream with nothing in flight or queued sends its
	// first record at once, and the records that waited go as soon as it
	// is idle again (unless LingerAlways): batching then comes from the
	// requests in flight, as in Nagle's algorithm, so a lightly loaded
	// producer does not pay the linger and a busy one still batches. A
	// stream is a partition for keyed records and those given a
	// partition, and the whole topic for keyless ones (they go to one
	// sticky partition at a time).
	Linger time.Duration
	// LingerAlways makes every batch wait the whole Linger, even on an
	// idle partition (Kafka's linger.ms).
	LingerAlways bool
	// BatchBytes bounds one record batch. Default 1 MiB.
	BatchBytes int
	// MaxBufferedBytes bounds the memory the producer holds for records,
	// and Produce blocks beyond it. It counts each record from Produce
	// until its callback has run (its key, value and headers, the Record,
	// which the callback gets back, and the producer's slot for it), and
	// each batch's encoding from Produce until the batch is done
	// (acknowledged or failed): the producer encodes a batch when it
	// first sends it and keeps the encoding for retries (a retry resends
	// the same bytes), and each record reserves room for its part of the
	// encoding when Produce takes it. So a batch in flight holds its
	// records' bytes twice, and about half of the budget is record data.
	// An encoding's buffer (from a pool of size classes) may be up to a
	// quarter larger than its estimate (or 256 bytes): the excess
	// counts once the batch is encoded, so the total may go past the
	// budget by that much until its batch is done. Not counted: what a callback's closure holds.
	// Default 64 MiB.
	MaxBufferedBytes int64
	Compression      Compression
	// DisableIdempotence turns off producer ids and sequence numbers (then
	// a retry after an unknown outcome is not attempted). Idempotence is
	// always off with AcksNone.
	DisableIdempotence bool
	// MaxInFlight is the number of batches per partition that may be sent
	// from the oldest unanswered one on (a window, not a count of open
	// requests: answers arrive in any order). Default 5 with idempotence (the broker puts batches that
	// arrive out of order back in sequence order) and 1 without it (more
	// than 1 may then reorder records); at most 5 when idempotent.
	MaxInFlight int
	// DeliveryTimeout bounds the time from Produce to the callback.
	// Default 2m.
	DeliveryTimeout time.Duration
	// RetryBackoff is the first wait before a retry; it doubles up to 1s.
	// Default 100ms.
	RetryBackoff time.Duration
}

func (c ProducerConfig) withDefaults() ProducerConfig {
	if c.Linger == 0 {
		c.Linger = DefaultLinger
	}
	if c.BatchBytes <= 0 {
		c.BatchBytes = DefaultBatchBytes
	}
	if c.MaxBufferedBytes <= 0 {
		c.MaxBufferedBytes = DefaultMaxBufferedBytes
	}
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = DefaultMaxInFlight
		if !c.idempotent() {
			// Without sequence numbers the broker cannot put pipelined
			// batches back in order: one at a time keeps them in order.
			c.MaxInFlight = 1
		}
	}
	if c.DeliveryTimeout <= 0 {
		c.DeliveryTimeout = DefaultDeliveryTimeout
	}
	if c.RetryBackoff <= 0 {
		c.RetryBackoff = DefaultRetryBackoff
	}
	return c
}

// Validate reports the first problem with c.
func (c ProducerConfig) Validate() error {
	switch {
	case c.Acks < AcksQuorum || c.Acks > AcksAll:
		return fmt.Errorf("client: producer config: acks %d", c.Acks)
	case c.Compression < CompressionNone || c.Compression > CompressionZstd:
		return fmt.Errorf("client: producer config: compression %d", c.Compression)
	case c.idempotent() && c.MaxInFlight > maxIdempotentInFlight:
		return fmt.Errorf("client: producer config: max in-flight %d > %d with idempotence", c.MaxInFlight, maxIdempotentInFlight)
	case c.BatchBytes < 0 || c.MaxBufferedBytes < 0 || c.MaxInFlight < 0:
		return errors.New("client: producer config: negative size")
	case c.BatchBytes > maxRequestBytes:
		return fmt.Errorf("client: producer config: batch bytes %d above %d", c.BatchBytes, maxRequestBytes)
	case c.BatchBytes > 0 && c.MaxBufferedBytes > 0 && int64(c.BatchBytes) > c.MaxBufferedBytes:
		return errors.New("client: producer config: batch bytes above max buffered bytes")
	}
	return nil
}

func (c ProducerConfig) idempotent() bool { return !c.DisableIdempotence && c.Acks != AcksNone }

func (c ProducerConfig) String() string {
	return fmt.Sprintf("acks=%s linger=%s batch_bytes=%d max_buffered_bytes=%d compression=%s idempotent=%t max_in_flight=%d delivery_timeout=%s retry_backoff=%s",
		c.Acks, c.Linger, c.BatchBytes, c.MaxBufferedBytes, c.Compression, c.idempotent(), c.MaxInFlight, c.DeliveryTimeout, c.RetryBackoff)
}

// ProducerStats are a Producer's counters since it was made and, in the
// fields marked "now", what it holds at the moment of the call.
type ProducerStats struct {
	RecordsDelivered int64 // callbacks called with nil error
	RecordsFailed    int64 // callbacks called with an error
	BatchesSent      int64 // batch send attempts, retries included
	Retries          int64 // batch retries
	Requests         int64 // Produce RPCs
	// BufferedBytes (now): what the records whose callback has not run
	// hold (recordMemory).
	BufferedBytes   int64
	BufferedRecords int64 // now: records whose callback has not run
	// EncodedBytes (now): the encodings of the batches not yet answered,
	// the buffers of those encoded and the room reserved for those not
	// yet encoded; they count against MaxBufferedBytes with
	// BufferedBytes.
	EncodedBytes int64
}

// Producer batches records per partition and sends them to the partitions'
// owners. It is safe for concurrent use.
//
// Callbacks run on one goroutine, in order per partition; a slow callback
// delays the others.
type Producer struct {
	c          *Client
	cfg        ProducerConfig
	idempotent bool
	log        *slog.Logger

	ctx    context.Context // canceled by Close after the flush
	cancel context.CancelFunc
	// collectReqs and collectBytes are collect's, reused from one round to
	// the next (only the dispatch goroutine calls it).
	collectReqs  map[string][]*batch
	collectBytes map[string]int
	wake         chan struct{} // capacity 1: the dispatcher has work
	cbWake       chan struct{} // capacity 1: completions are queued
	cbStop       chan struct{} // closed when no completion can be added any more
	wg           sync.WaitGroup
	cbDone       chan struct{}

	stats struct {
		delivered, failed, batches, retries, requests atomic.Int64
	}

	mu struct {
		sync.Mutex
		closed bool
		fatal  error
		// pid/epoch from InitProducerID; pid < 0 until known (idempotent).
		pid    int64
		epoch  int16
		parts  map[TopicPartition]*partState
		topics map[string]*topicState
		// buffered: recordMemory of the records whose callback has not
		// run, released as callbacks run. records: their number.
		buffered int64
		records  int64
		// encoded: the encodings of the batches not completed (open,
		// sealed or in flight): cap(b.encoded) for those encoded, b.bytes
		// (the room reserved for the encoding) for the others. A second
		// copy of the records' bytes while a batch is in flight, which
		// counts against MaxBufferedBytes with buffered.
		encoded int64
		// spaceFreed is closed and replaced when bytes are released while
		// spaceWaiters Produce calls wait for room (and on Close and
		// failure); released bytes with nobody waiting leave it be.
		spaceFreed   chan struct{}
		spaceWaiters int
		// idle, made by a Flush that waits, is closed (and forgotten) when
		// records drops to 0.
		idle       chan struct{}
		refreshing map[string]bool
		// completed: finished batches whose callbacks are to run, in
		// order per partition.
		completed []*batch
	}
}

// topicState is what the producer keeps per topic for its keyless
// records: they go to one partition at a time (sticky partitioning,
// KIP-480), so they are one stream per topic, and the rule that sends an
// idle stream's first record at once (ProducerConfig.Linger) looks at the
// whole topic for them. Were it to look at the partition only, every move
// of the sticky partition under load would send one record alone: half of
// the batches, and so of the ledger entries, would hold a single record.
// All fields are guarded by Producer.mu.
type topicState struct {
	sticky int32 // the keyless records' partition; -1 when none is chosen
	// sealed counts the topic's batches sealed and not yet completed, over
	// all its partitions.
	sealed int
}

// partState is one partition's queue.
// All fields are guarded by Producer.mu.
type partState struct {
	tp      TopicPartition
	open    *batch   // accumulating, nil when none
	batches []*batch // sealed and not yet completed, in order
	// linger seals the open batch when its linger is over (lingerExpired);
	// one timer per partition, reset for each batch, not one per batch.
	linger *time.Timer
	// inflight counts batches sent and not answered.
	inflight int
	// draining: a batch failed and is to be retried; nothing new is sent
	// until every in-flight batch is answered, then the failed ones go
	// again in order.
	draining bool
	retryAt  time.Time
	// needReset: the sequence numbers broke (a batch was rejected or
	// expired after it was sent): once drained, and once every pending
	// batch that may be stored is settled (stored, known absent, or
	// expired), the partition takes a new producer id and renumbers its
	// pending batches from 0.
	needReset bool
	resetting bool
	havePID   bool
	pid       int64
	epoch     int16
	nextSeq   int32
}

// pendingRecord is a record of a batch and its callback.
type pendingRecord struct {
	rec *Record
	cb  func(*Record, error)
}

// batch is one record batch being built, queued or in flight.
type batch struct {
	tp   TopicPartition
	recs []pendingRecord
	// recsBox carries recs's array back to pendingRecords once the
	// callbacks ran (nil when recs is not from there).
	recsBox *[]pendingRecord
	// bytes is the encoding's size, estimated from above; held is what
	// the records hold (recordMemory), released after their callbacks.
	bytes       int
	held        int64
	deadline    time.Time
	lingerUntil time.Time // when the open batch is sealed (Linger > 0)

	// Set when first sent (idempotent); kept across retries so the broker
	// recognises a duplicate.
	seq     int32
	pid     int64
	epoch   int16
	encoded []byte

	inflight  bool
	sent      bool
	pipelined bool
	// mayBeStored: sent under its sequence numbers and not known to be
	// absent from the log since. A broker may hold it, so it goes again
	// only under those numbers: renumbered under a new producer id it
	// would be stored twice.
	mayBeStored bool
	attempts    int
	// lastErr is the error of the last attempt that was retried, named
	// when the delivery timeout expires before the next one.
	lastErr error
	done    bool
	err     error
	base    int64
}

// NewProducer starts a producer. With idempotence it obtains a producer id
// in the background; batches wait for it.
func (c *Client) NewProducer(cfg ProducerConfig) (*Producer, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c.mu.Lock()
	closed := c.mu.closed
	c.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	p := &Producer{
		c: c, cfg: cfg, idempotent: cfg.idempotent(),
		log:    c.log.With("component", "producer"),
		wake:   make(chan struct{}, 1),
		cbWake: make(chan struct{}, 1),
		cbStop: make(chan struct{}),
		cbDone: make(chan struct{}),
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.mu.pid = -1
	p.mu.parts = map[TopicPartition]*partState{}
	p.mu.topics = map[string]*topicState{}
	p.mu.refreshing = map[string]bool{}
	p.mu.spaceFreed = make(chan struct{})
	if p.idempotent {
		p.wg.Add(1)
		go p.initProducerID()
	}
	p.wg.Add(1)
	go p.dispatch()
	go p.callbacks()
	return p, nil
}

// Produce queues r for its partition and returns; cb (may be nil) is
// called once r is acknowledged or failed, with r's Partition and Offset
// set. Produce blocks while MaxBufferedBytes are buffered, until ctx is
// done. r must not be modified until cb runs: the producer keeps it, its
// key and value included, to hand it back to cb, so a batch in flight
// holds its records' bytes twice (the Records, and the encoding that a
// retry resends), both counted in MaxBufferedBytes. Callbacks run one at
// a time on one goroutine, and a record's bytes count until its callback
// has run: a callback must not block, and one that calls Produce while
// the buffer is full waits for space only its own return frees (give that
// Produce a ctx with a deadline), as in Kafka's Java client and franz-go.
func (p *Producer) Produce(ctx context.Context, r *Record, cb func(*Record, error)) error {
	size, n, err := p.checkRecord(ctx, r)
	if err != nil {
		return err
	}
	if r.Timestamp.IsZero() {
		r.Timestamp = time.Now()
	}
	held := int64(recordMemory(r, size))
	if err := p.reserve(ctx, held, int64(size)); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.usableLocked(); err != nil {
		p.mu.buffered -= held
		p.mu.encoded -= int64(size)
		p.spaceFreedLocked()
		return err
	}
	ts := p.topicLocked(r.Topic)
	part, keyless := p.partitionLocked(ts, r, size, n)
	ps := p.openBatchLocked(TopicPartition{r.Topic, part}, size, n)
	b := ps.open
	b.recs = append(b.recs, pendingRecord{rec: r, cb: cb})
	b.bytes += size // reserved by reserve
	b.held += held
	p.mu.records++
	switch {
	case p.cfg.Linger < 0:
		p.sealLocked(ps, n)
	case !p.cfg.LingerAlways && ps.idleLocked() && (!keyless || ts.sealed == 0):
		// Nothing in flight: send now. The sticky partition stays, so the
		// records that follow batch up behind this one.
		p.sealKeepStickyLocked(ps)
	}
	return nil
}

// checkRecord refuses a record Produce cannot take (no topic, too large,
// the producer closed or failed, a partition the topic does not have) and
// returns its estimated size and the topic's partition count.
func (p *Producer) checkRecord(ctx context.Context, r *Record) (size int, partitions int32, err error) {
	if r == nil || r.Topic == "" {
		return 0, 0, errors.New("client: produce: record without topic")
	}
	size = recordBytes(r)
	if size+batchOverheadBytes > p.cfg.BatchBytes {
		return 0, 0, fmt.Errorf("%w: %d bytes, batch bytes %d", ErrRecordTooLarge, size, p.cfg.BatchBytes)
	}
	if err := p.usable(); err != nil {
		return 0, 0, err
	}
	n, err := p.c.partitionCount(ctx, r.Topic)
	if err != nil {
		return 0, 0, err
	}
	if n == 0 {
		return 0, 0, fmt.Errorf("%w: topic %s has no partitions", ErrUnknownPartition, r.Topic)
	}
	if r.Partition >= n {
		return 0, 0, fmt.Errorf("%w: %s/%d (topic has %d)", ErrUnknownPartition, r.Topic, r.Partition, n)
	}
	return size, n, nil
}

// partitionLocked chooses r's partition among n: its own, its key's hash,
// or (keyless) the topic's sticky partition, which moves on when r does not
// fit the sticky partition's open batch.
// REQUIRES: p.mu held.
func (p *Producer) partitionLocked(ts *topicState, r *Record, size int, n int32) (part int32, keyless bool) {
	switch {
	case r.Partition >= 0:
		return r.Partition, false
	case r.Key != nil:
		return recordbatch.PartitionForKey(r.Key, n), false
	}
	if ts.sticky < 0 || ts.sticky >= n {
		ts.sticky = rand.Int32N(n)
	}
	// A record that does not fit the sticky partition's batch seals it and
	// goes to the next sticky partition, as in Kafka (else it would open a
	// batch of its own behind the full one).
	if sp := p.mu.parts[TopicPartition{r.Topic, ts.sticky}]; sp != nil && sp.open != nil && sp.open.bytes+size > p.cfg.BatchBytes {
		p.sealLocked(sp, n)
	}
	return ts.sticky, true
}

// openBatchLocked returns tp's state, made on first use, with an open
// batch that has room for size more bytes: a full one is sealed first (n
// is the topic's partition count, for sealLocked).
// REQUIRES: p.mu held.
func (p *Producer) openBatchLocked(tp TopicPartition, size int, n int32) *partState {
	ps := p.mu.parts[tp]
	if ps == nil {
		ps = &partState{tp: tp}
		p.mu.parts[tp] = ps
	}
	if ps.open != nil && ps.open.bytes+size > p.cfg.BatchBytes {
		p.sealLocked(ps, n)
	}
	if ps.open == nil {
		now := time.Now()
		b := &batch{tp: tp, bytes: batchOverheadBytes, deadline: now.Add(p.cfg.DeliveryTimeout), seq: -1, base: -1}
		b.recsBox = pendingRecords.Get().(*[]pendingRecord)
		b.recs = *b.recsBox
		// The header's room, beyond what the records reserve: at most a
		// header per partition over the budget.
		p.mu.encoded += batchOverheadBytes
		ps.open = b
		if p.cfg.Linger > 0 {
			b.lingerUntil = now.Add(p.cfg.Linger)
			if ps.linger == nil {
				ps.linger = time.AfterFunc(p.cfg.Linger, func() { p.lingerExpired(ps) })
			} else {
				ps.linger.Reset(p.cfg.Linger)
			}
		}
	}
	return ps
}

// topicLocked returns topic's state, made on first use.
// REQUIRES: p.mu held.
func (p *Producer) topicLocked(topic string) *topicState {
	ts := p.mu.topics[topic]
	if ts == nil {
		ts = &topicState{sticky: -1}
		p.mu.topics[topic] = ts
	}
	return ts
}

// idleLocked reports whether ps has nothing sealed, in flight or being
// retried.
// REQUIRES: p.mu held.
func (p *partState) idleLocked() bool {
	return p.inflight == 0 && len(p.batches) == 0 && !p.draining && !p.resetting && !p.needReset
}

// ProduceSync produces r and waits for its acknowledgement.
func (p *Producer) ProduceSync(ctx context.Context, r *Record) (*Record, error) {
	done := make(chan error, 1)
	if err := p.Produce(ctx, r, func(_ *Record, err error) { done <- err }); err != nil {
		return nil, err
	}
	select {
	case err := <-done:
		if err != nil {
			return nil, err
		}
		return r, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Flush sends every buffered record and waits until all callbacks have
// run (records produced concurrently with Flush included), or ctx is done.
func (p *Producer) Flush(ctx context.Context) error {
	p.mu.Lock()
	for _, ps := range p.mu.parts {
		if ps.open != nil {
			p.sealLocked(ps, -1)
		}
	}
	if p.mu.records == 0 {
		p.mu.Unlock()
		return nil
	}
	if p.mu.idle == nil {
		p.mu.idle = make(chan struct{})
	}
	idle := p.mu.idle
	p.mu.Unlock()
	p.signal()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close flushes (until ctx is done), then fails what is left with
// ErrClosed and stops. Produce after Close returns ErrClosed.
func (p *Producer) Close(ctx context.Context) error {
	p.mu.Lock()
	if p.mu.closed {
		p.mu.Unlock()
		<-p.cbDone
		return nil
	}
	p.mu.closed = true
	close(p.mu.spaceFreed) // wake blocked Produce calls: they see closed
	p.mu.spaceFreed = make(chan struct{})
	p.mu.Unlock()
	err := p.Flush(ctx)
	p.cancel()
	p.wg.Wait()
	p.mu.Lock()
	for _, ps := range p.mu.parts {
		if ps.open != nil {
			p.sealLocked(ps, -1)
		}
		for _, b := range ps.batches {
			if !b.done {
				b.done, b.err = true, ErrClosed
			}
		}
		p.completeLocked(ps)
	}
	p.mu.Unlock()
	close(p.cbStop)
	<-p.cbDone
	return err
}

// Stats returns the producer's counters.
func (p *Producer) Stats() ProducerStats {
	p.mu.Lock()
	buffered, records, encoded := p.mu.buffered, p.mu.records, p.mu.encoded
	p.mu.Unlock()
	return ProducerStats{
		RecordsDelivered: p.stats.delivered.Load(),
		RecordsFailed:    p.stats.failed.Load(),
		BatchesSent:      p.stats.batches.Load(),
		Retries:          p.stats.retries.Load(),
		Requests:         p.stats.requests.Load(),
		BufferedBytes:    buffered,
		BufferedRecords:  records,
		EncodedBytes:     encoded,
	}
}

func (p *Producer) usable() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.usableLocked()
}

// REQUIRES: p.mu held.
func (p *Producer) usableLocked() error {
	if p.mu.closed {
		return ErrClosed
	}
	return p.mu.fatal
}

// lingerExpired runs when ps's linger timer fires: it seals the open
// batch if its linger is over, or waits for the rest of it (the timer
// may have fired for a batch sealed since, while a new one was opened).
func (p *Producer) lingerExpired(ps *partState) {
	p.mu.Lock()
	if b := ps.open; b != nil {
		if wait := time.Until(b.lingerUntil); wait > 0 {
			ps.linger.Reset(wait)
		} else {
			p.sealLocked(ps, -1)
		}
	}
	p.mu.Unlock()
	p.signal()
}

// sealKeepStickyLocked queues ps's open batch for sending without moving
// the sticky partition.
// REQUIRES: p.mu held.
func (p *Producer) sealKeepStickyLocked(ps *partState) {
	b := ps.open
	ps.open = nil
	if ps.linger != nil {
		ps.linger.Stop()
	}
	ps.batches = append(ps.batches, b)
	p.mu.topics[ps.tp.Topic].sealed++
	p.signal()
}

// sealLocked closes ps's open batch and queues it for sending. n is the
// topic's partition count, or -1 when unknown (the sticky partition then
// moves on the next keyless record).
// REQUIRES: p.mu held.
func (p *Producer) sealLocked(ps *partState, n int32) {
	b := ps.open
	ps.open = nil
	if ps.linger != nil {
		ps.linger.Stop()
	}
	ps.batches = append(ps.batches, b)
	ts := p.mu.topics[ps.tp.Topic]
	ts.sealed++
	// Sticky partitioning (KIP-480): keyless records move to another
	// partition when the sticky one's batch is sealed.
	if s := ts.sticky; s == ps.tp.Partition {
		if n > 1 {
			next := rand.Int32N(n - 1)
			if next >= s {
				next++
			}
			ts.sticky = next
		} else if n < 0 {
			ts.sticky = -1
		}
	}
	p.signal()
}

func (p *Producer) signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}
