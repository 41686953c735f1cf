package ledger

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/strata-log/strata/proto/bookiepb"
	"github.com/strata-log/strata/proto/ledgerpb"
)

// Writer is the one writer of a ledger it created. It pipelines appends
// (many entries in flight) and acknowledges them in entry order.
//
// Invariants (DESIGN.md §3; reference/protocols.md §1):
//
//   - W1 Dense ids: entry ids are 0, 1, 2, ... in Append call order.
//   - W2 Quorum and order: entry e is acknowledged once Qa bookies of its
//     write set have answered ADD_OK (fsynced) and every lower entry is
//     acknowledged. The LAC is the highest such entry; it is piggybacked on
//     every add, so readers never see past it.
//   - W3 Durable write sets only (BookKeeper #1591): an entry is
//     acknowledged only from bookies of its write set as recorded in the
//     DURABLE metadata, and while an ensemble change is being written, no
//     entry whose write set includes a replacement is acknowledged. A
//     recovery reads the durable metadata: an acknowledgement that counted a
//     bookie the metadata does not record could be lost.
//   - W4 Ensemble changes start at LAC+1 (BookKeeper's newEnsembleStartEntry),
//     so every entry below a fragment's start was acknowledged before the
//     fragment existed, and recovery can start reading at the last
//     fragment's first entry.
//   - W5 Fencing: ADD_FENCED from any bookie, or metadata that is no longer
//     OPEN, stops the writer: no acknowledgement after that; every pending
//     entry fails with ErrFenced (unknown outcome: recovery may include it).
//   - W6 Unknown outcomes: every write failure the caller sees means
//     "unknown", never "not written".
//   - W7 Repairs below the last fragment: the writer owns the state and its
//     last fragment; the replicator (ledger/replication) may swap bookies
//     in the fragments before it while the ledger is OPEN, after copying
//     their entries to the replacement (they are fixed: every entry below
//     the last fragment's start was acknowledged before it existed, W4).
//     When a compare-and-set of the writer (an ensemble change, Close)
//     conflicts, it re-reads; if the stored metadata is OPEN and equals
//     the writer's (or its pending change's) except for bookies of those
//     earlier fragments (swapsBelowLast), the writer adopts the stored
//     metadata as durable and retries on top of it at the stored version.
//     Any other change still fails the writer (W5 when not OPEN). Pending
//     entries all lie in the last fragment (W4), and the LAC goes to and
//     is read from the last ensemble only, so adopting a swap changes no
//     write set the writer still sends to or acknowledges from.
//
// Concurrency: one mutex (w.mu). BookieClient callbacks arrive on any
// goroutine. Bookie sends and user callbacks are queued under the lock and
// run outside it by whichever goroutine holds the flushing role (flush), so
// adds reach each bookie in call order and callbacks run in entry order.
// Background work (metadata updates, replacements, explicit LAC) runs
// through the Scheduler; Close stops it and waits for it.
type Writer struct {
	env   Env
	opts  CreateOptions
	id    uint64
	log   *slog.Logger
	sched Scheduler
	// dig tags every entry before it is sent (digest.go).
	dig digester

	// bgCtx bounds background I/O; Close cancels it.
	bgCtx    context.Context
	bgCancel context.CancelFunc
	// bg runs the background work's scheduled functions; Close stops it
	// and waits for what started.
	bg *timerSet

	mu struct {
		sync.Mutex
		// md is the DURABLE metadata (what a recovery would read) and
		// version its version in the store.
		md      *ledgerpb.LedgerMetadata
		version int64
		// change is the ensemble change being written, nil when none.
		change *ensembleChange
		// unresolved is the metadata of a change failLocked dropped
		// before learning whether it applied: Close may find it stored
		// and close on top of it (W7).
		unresolved *ledgerpb.LedgerMetadata
		// failed: members of the current ensemble that failed an add and
		// were neither replaced nor taken back. Nothing is sent to them.
		failed map[string]bool
		// quarantined: bookies that failed an add. They are not chosen as
		// replacements until the next timed retry, so two dead bookies
		// that are still registered cannot make the writer alternate
		// between them in a loop of ensemble changes.
		quarantined map[string]bool

		entries       []*entry // unacknowledged, in id order
		nextID        int64
		lac           int64
		length        int64 // payload bytes of entries 0..lac
		inFlightBytes int64

		// err is terminal: it wraps ErrFenced, ErrWriterFailed or
		// ErrLedgerClosed. No acknowledgement after it is set.
		err      error
		closing  bool // Close was called: no more appends
		closed   bool // Close finished
		closeErr error
		stopped  bool // Close stopped the background work
		// changed is closed by notifyLocked; nil until someone waits
		// (changedLocked).
		changed chan struct{}
		// stalled is closed while the writer is stalled (Stalled):
		// isStalled, and a fresh channel once it is not.
		stalled      chan struct{}
		isStalled    bool
		outbox       []addSend
		deliveries   []delivery
		flushing     bool
		flushed      chan struct{} // closed when a flush ends, if someone waits
		workQueued   bool
		working      bool
		replaceDue   bool // a replacement attempt should run
		rejoinOK     bool // ...and may take a failed member back
		replaceTimer bool // a replacement retry is scheduled
		backoff      time.Duration
		activity     uint64 // bumped by appends and acknowledgements
		lacTimer     bool
		lacDue       bool
		sentLAC      int64 // last explicit LAC written

		// spareOutbox and spareDeliveries: the lists the last flush
		// emptied, for the next appends to fill.
		spareOutbox     []addSend
		spareDeliveries []delivery

		underReplicated int64
		ensembleChanges int64

		// levels: entries whose AppendAcks level callback has not run
		// yet (acknowledged or not).
		levels ackLevels
	}
}

// entry is an appended entry. After it is acknowledged it leaves
// w.mu.entries, but answers from its remaining sends still update its
// replication accounting.
type entry struct {
	id int64
	// payload and tag (nil without digests): the bookies store payload
	// followed by tag, sent without joining them. tag is in tagBuf.
	payload []byte
	tag     []byte
	cb      func(int64, error)
	sent    bookieSet // bookies with an add in flight or answered OK
	oks     bookieSet // bookies that answered ADD_OK
	acked   bool
	under   bool // counted as under-replicated
	// level and levelCB: AppendAcks's second callback, pending while
	// levelCB is non-nil (writer_acks.go).
	level   AckLevel
	levelCB func(int64, error)
	// The entry's own memory for its tag and for the first members of
	// sent and oks: an append allocates the entry and nothing else.
	tagBuf          [DigestSize]byte
	sentBuf, oksBuf [4]string
}

// newEntry returns entry id of payload, tagged by dig.
func newEntry(dig digester, id int64, payload []byte, cb func(int64, error), level AckLevel, levelCB func(int64, error)) (*entry, error) {
	e := &entry{id: id, payload: payload, cb: cb, level: level, levelCB: levelCB}
	e.sent, e.oks = e.sentBuf[:0], e.oksBuf[:0]
	var err error
	if e.tag, err = dig.appendTag(e.tagBuf[:0], id, payload); err != nil {
		return nil, err
	}
	return e, nil
}

// bookieSet is a set of bookies: an entry's write set and the bookies
// that replaced its members, a handful. A slice searched in order is
// cheaper than a map for so few, and starts in the entry's own memory.
type bookieSet []string

func (s bookieSet) has(bookie string) bool { return slices.Contains(s, bookie) }

func (s *bookieSet) add(bookie string) {
	if !s.has(bookie) {
		*s = append(*s, bookie)
	}
}

func (s *bookieSet) remove(bookie string) {
	*s = slices.DeleteFunc(*s, func(b string) bool { return b == bookie })
}

type addSend struct {
	e      *entry
	bookie string
	req    *bookiepb.AddRequest
}

type delivery struct {
	cb  func(int64, error)
	id  int64
	err error
}

// WriterStats is a snapshot of a writer's state, for metrics.
type WriterStats struct {
	LastAddConfirmed int64
	PendingEntries   int
	InFlightBytes    int64
	// UnderReplicatedEntries counts acknowledged entries that the writer
	// knows reached fewer than Qw bookies of their write set (a member was
	// down with no spare to replace it). They need re-replication.
	UnderReplicatedEntries int64
	// FailedBookies counts current ensemble members that failed and are
	// neither replaced nor back: new entries get fewer than Qw copies.
	FailedBookies   int
	EnsembleChanges int64
}

// Create creates a ledger on E writable bookies chosen from env.Registry
// (metadata OPEN, one fragment at entry 0, last_entry_id -1) and returns
// its writer. Errors: ErrInvalid, ErrNotEnoughBookies, or the registry's
// or metadata store's error, wrapped.
func Create(ctx context.Context, env Env, opts CreateOptions) (*Writer, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	if env.Meta == nil || env.Bookies == nil || env.Registry == nil {
		return nil, fmt.Errorf("%w: Env needs Meta, Bookies and Registry", ErrInvalid)
	}
	infos, err := env.Registry.Writable(ctx)
	if err != nil {
		return nil, fmt.Errorf("ledger: listing writable bookies: %w", err)
	}
	ensemble, err := env.Placement.ChooseEnsemble(infos, opts.EnsembleSize, nil)
	if err != nil {
		return nil, fmt.Errorf("ledger: creating a ledger: %w", err)
	}
	key, err := newDigestKey()
	if err != nil {
		return nil, err
	}
	md := &ledgerpb.LedgerMetadata{
		DigestKey:    key,
		DigestType:   opts.Digest,
		EnsembleSize: int32(opts.EnsembleSize),
		WriteQuorum:  int32(opts.WriteQuorum),
		AckQuorum:    int32(opts.AckQuorum),
		State:        ledgerpb.LedgerState_OPEN,
		LastEntryId:  -1,
		Fragments:    []*ledgerpb.Fragment{{FirstEntryId: 0, Bookies: ensemble}},
		CreatedAtMs:  now(env).UnixMilli(),
		Properties:   opts.Properties,
	}
	id, version, err := env.Meta.Create(ctx, md)
	if err != nil {
		return nil, fmt.Errorf("ledger: creating ledger metadata: %w", err)
	}
	md = proto.Clone(md).(*ledgerpb.LedgerMetadata)
	md.Id = id
	return newWriter(env, opts, md, version), nil
}

func newWriter(env Env, opts CreateOptions, md *ledgerpb.LedgerMetadata, version int64) *Writer {
	w := &Writer{env: env, opts: opts, id: md.Id, sched: opts.Scheduler, dig: newDigester(md)}
	w.log = logger(env).With("ledger", md.Id)
	w.bgCtx, w.bgCancel = context.WithCancel(context.Background())
	w.mu.md = md
	w.mu.version = version
	w.mu.failed = make(map[string]bool)
	w.mu.quarantined = make(map[string]bool)
	w.mu.lac = -1
	w.mu.sentLAC = -1
	w.mu.stalled = make(chan struct{})
	w.bg = newTimerSet(opts.Scheduler)
	w.mu.levels = ackLevels{
		ledgerID: md.Id,
		waiters:  make(map[int64]*entry),
		deliver:  func(d delivery) { w.mu.deliveries = append(w.mu.deliveries, d) },
		drained: func() {
			if w.mu.closing {
				w.notifyLocked() // Close waits for the last one
			}
		},
	}
	w.log.Info("ledger created", "ensemble", md.Fragments[0].Bookies,
		"E", md.EnsembleSize, "Qw", md.WriteQuorum, "Qa", md.AckQuorum)
	return w
}

func logger(env Env) *slog.Logger {
	if env.Logger != nil {
		return env.Logger
	}
	return slog.New(slog.DiscardHandler)
}

func now(env Env) time.Time {
	if env.Now != nil {
		return env.Now()
	}
	return time.Now()
}

// ID is the ledger id.
func (w *Writer) ID() uint64 { return w.id }

// Metadata returns a copy of the ledger's durable metadata as the writer
// knows it.
func (w *Writer) Metadata() *ledgerpb.LedgerMetadata {
	w.mu.Lock()
	defer w.mu.Unlock()
	return proto.Clone(w.mu.md).(*ledgerpb.LedgerMetadata)
}

// Closing reports whether Close has been called: the writer takes no
// more appends and is waiting for its entries or has closed.
func (w *Writer) Closing() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.mu.closing
}

// LastAddConfirmed is the highest acknowledged entry id, -1 for none.
func (w *Writer) LastAddConfirmed() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.mu.lac
}

// Stats returns a snapshot for metrics.
func (w *Writer) Stats() WriterStats {
	w.mu.Lock()
	defer w.mu.Unlock()
	return WriterStats{
		LastAddConfirmed:       w.mu.lac,
		PendingEntries:         len(w.mu.entries),
		InFlightBytes:          w.mu.inFlightBytes,
		UnderReplicatedEntries: w.mu.underReplicated,
		FailedBookies:          len(w.mu.failed),
		EnsembleChanges:        w.mu.ensembleChanges,
	}
}

// UnderReplicated reports whether the writer is writing, or has
// acknowledged, entries with fewer than Qw copies (DESIGN §3: with no spare
// bookie the writer goes on while Qa can be met, and counts it).
func (w *Writer) UnderReplicated() bool {
	s := w.Stats()
	return s.UnderReplicatedEntries > 0 || s.FailedBookies > 0
}

// CanAcknowledge reports whether the write set of the next entry (in the
// ensemble change being written, if one is) has at least Qa members that
// have not failed an add: whether an entry appended now can be
// acknowledged without waiting for a failed bookie to come back. It is
// false while the members that failed (down, or read-only with a full
// disk) could not be replaced for lack of spare writable bookies; the
// writer takes them back once the registry lists them writable again.
func (w *Writer) CanAcknowledge() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.canAcknowledgeLocked()
}

// canAcknowledgeLocked is CanAcknowledge.
// REQUIRES: w.mu held.
func (w *Writer) canAcknowledgeLocked() bool {
	live := 0
	var buf writeSetBuf
	for _, b := range w.appendSendWriteSetLocked(buf[:0], w.mu.nextID) {
		if !w.mu.failed[b] {
			live++
		}
	}
	return live >= int(w.mu.md.AckQuorum)
}

// Stalled returns a channel that is closed once the writer is stalled: it
// cannot acknowledge (CanAcknowledge is false) and its attempt to replace
// the failed members found no spare bookie, so the entries it holds wait
// for those bookies to come back (it retries every
// ReplacementRetryInterval). A failure the writer can still repair (an
// ensemble change to a spare) does not stall it. The channel stays closed
// until the writer can acknowledge again; Stalled then returns a new, open
// one. Their owner can answer the appends waiting on a stalled writer
// early: their outcome is unknown (the writer writes them if the bookies
// come back).
func (w *Writer) Stalled() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.mu.stalled
}

// updateStalledLocked stalls the writer when it cannot acknowledge and
// mayStall (a replacement attempt found no spare), and unstalls it once it
// can acknowledge again.
// REQUIRES: w.mu held.
func (w *Writer) updateStalledLocked(mayStall bool) {
	can := w.canAcknowledgeLocked()
	switch {
	case !w.mu.isStalled && !can && mayStall:
		w.mu.isStalled = true
		close(w.mu.stalled)
		w.log.Warn("writer stalled: fewer bookies of the write set than the ack quorum take writes, and no spare; entries wait for them",
			"failed", slices.Sorted(maps.Keys(w.mu.failed)), "pending", len(w.mu.entries))
	case w.mu.isStalled && can:
		w.mu.isStalled = false
		w.mu.stalled = make(chan struct{})
		w.log.Info("writer no longer stalled")
	}
}

// Append appends payload as the next entry and returns at once; cb (may be
// nil) is called exactly once, in entry order, with the entry id and nil
// when the entry is acknowledged, or with an error (unknown outcome: see
// ErrFenced, ErrWriterFailed, ErrLedgerClosed). Append itself fails with
// the writer's terminal error, ErrLedgerClosed after Close, or ctx's error
// while it waits for in-flight bytes to drain (back-pressure).
//
// The writer keeps payload (it may resend it to a replacement bookie): the
// caller must not modify it afterwards. cb runs on an arbitrary goroutine
// and must not block; in particular it must not call AppendSync or Close.
func (w *Writer) Append(ctx context.Context, payload []byte, cb func(entryID int64, err error)) error {
	return w.append(ctx, payload, cb, AckQuorum, nil)
}

// append is Append with an optional level callback (AppendAcks).
func (w *Writer) append(ctx context.Context, payload []byte, cb func(int64, error), level AckLevel, levelCB func(int64, error)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	size := int64(len(payload))
	if w.dig.key != nil {
		size += DigestSize
	}
	w.mu.Lock()
	for {
		if err := w.appendErrLocked(); err != nil {
			w.mu.Unlock()
			return err
		}
		if w.mu.inFlightBytes == 0 || w.mu.inFlightBytes+size <= w.opts.MaxInFlightBytes {
			break
		}
		changed := w.changedLocked()
		w.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
		w.mu.Lock()
	}
	e, err := newEntry(w.dig, w.mu.nextID, payload, cb, level, levelCB)
	if err != nil {
		w.mu.Unlock()
		return err
	}
	if levelCB != nil {
		w.mu.levels.add(e)
	}
	w.mu.nextID++
	w.mu.entries = append(w.mu.entries, e)
	w.mu.inFlightBytes += size
	w.mu.activity++
	w.sendLocked(e)
	w.mu.Unlock()
	w.flush()
	return nil
}

// AppendSync appends payload and waits for its acknowledgement. If ctx ends
// first it returns ctx's error and the outcome is unknown.
func (w *Writer) AppendSync(ctx context.Context, payload []byte) (int64, error) {
	type result struct {
		id  int64
		err error
	}
	done := make(chan result, 1)
	if err := w.Append(ctx, payload, func(id int64, err error) { done <- result{id, err} }); err != nil {
		return -1, err
	}
	select {
	case r := <-done:
		return r.id, r.err
	case <-ctx.Done():
		return -1, fmt.Errorf("ledger %d: waiting for an acknowledgement (outcome unknown): %w", w.id, ctx.Err())
	}
}

// appendErrLocked is why Append must refuse, or nil.
// REQUIRES: w.mu held.
func (w *Writer) appendErrLocked() error {
	if w.mu.err != nil {
		return w.mu.err
	}
	if w.mu.closing {
		return fmt.Errorf("%w: ledger %d", ErrLedgerClosed, w.id)
	}
	return nil
}

// appendSendWriteSetLocked appends to dst where entryID is sent: the
// pending ensemble for entries at or after an ensemble change's start,
// else the durable one.
// REQUIRES: w.mu held.
func (w *Writer) appendSendWriteSetLocked(dst []string, entryID int64) []string {
	if c := w.mu.change; c != nil && entryID >= c.start {
		return appendWriteSet(dst, c.ensemble, entryID, int(w.mu.md.WriteQuorum))
	}
	return appendEntryWriteSet(dst, w.mu.md, entryID)
}

// currentEnsembleLocked is the ensemble new entries go to.
// REQUIRES: w.mu held.
func (w *Writer) currentEnsembleLocked() []string {
	if c := w.mu.change; c != nil {
		return c.ensemble
	}
	return lastEnsemble(w.mu.md)
}

// sendLocked queues adds of e to the members of its write set that neither
// have it nor failed. Idempotent: resends after an ensemble change or a
// rejoin call it again. The adds queued by one call share their request
// (BookieClient.Add does not modify it): they carry the same LAC.
// REQUIRES: w.mu held.
func (w *Writer) sendLocked(e *entry) {
	var buf writeSetBuf
	var req *bookiepb.AddRequest
	for _, b := range w.appendSendWriteSetLocked(buf[:0], e.id) {
		if w.mu.failed[b] || e.sent.has(b) {
			continue
		}
		e.sent.add(b)
		if req == nil {
			req = &bookiepb.AddRequest{LedgerId: w.id, EntryId: uint64(e.id), Lac: w.mu.lac, Payload: e.payload, PayloadTail: e.tag}
		}
		w.mu.outbox = append(w.mu.outbox, addSend{e: e, bookie: b, req: req})
	}
}

// resendLocked sends every pending entry to the members of its (possibly
// new) write set that do not have it.
// REQUIRES: w.mu held.
func (w *Writer) resendLocked() {
	for _, e := range w.mu.entries {
		w.sendLocked(e)
	}
}

// flush sends queued adds and delivers queued callbacks, outside the lock,
// in queue order. One goroutine at a time does it; a flush that finds
// another in progress returns at once and the one in progress picks its
// work up. This makes re-entrant calls safe: a BookieClient that answers
// inside Add, or a user callback that appends.
func (w *Writer) flush() {
	w.mu.Lock()
	if w.mu.flushing {
		w.mu.Unlock()
		return
	}
	w.mu.flushing = true
	for len(w.mu.outbox) > 0 || len(w.mu.deliveries) > 0 {
		sends, deliveries := w.mu.outbox, w.mu.deliveries
		w.mu.outbox, w.mu.deliveries = w.mu.spareOutbox, w.mu.spareDeliveries
		w.mu.spareOutbox, w.mu.spareDeliveries = nil, nil
		w.mu.Unlock()
		for _, d := range deliveries {
			d.cb(d.id, d.err)
		}
		for _, s := range sends {
			w.env.Bookies.Add(s.bookie, s.req, func(resp *bookiepb.AddResponse, err error) {
				w.onAddResponse(s.e, s.bookie, resp, err)
			})
		}
		w.mu.Lock()
		w.mu.spareOutbox, w.mu.spareDeliveries = spare(sends), spare(deliveries)
	}
	w.mu.flushing = false
	if w.mu.flushed != nil {
		close(w.mu.flushed)
		w.mu.flushed = nil
	}
	w.mu.Unlock()
}

// maxSpare bounds the capacity of a list flush keeps for reuse, so that
// one burst (a resend of every pending entry) does not pin a large one.
const maxSpare = 4096

// spare returns list emptied for reuse, or nil if it is too large to keep.
func spare[T any](list []T) []T {
	if cap(list) > maxSpare {
		return nil
	}
	clear(list) // drop the references to entries and callbacks
	return list[:0]
}

// waitFlushed flushes and waits until every queued send and callback has
// been handed over, including by a flush running on another goroutine.
func (w *Writer) waitFlushed() {
	w.flush()
	w.mu.Lock()
	for w.mu.flushing {
		if w.mu.flushed == nil {
			w.mu.flushed = make(chan struct{})
		}
		flushed := w.mu.flushed
		w.mu.Unlock()
		<-flushed
		w.flush() // pick up anything queued after that flush ended
		w.mu.Lock()
	}
	w.mu.Unlock()
}

func (w *Writer) onAddResponse(e *entry, bookie string, resp *bookiepb.AddResponse, err error) {
	w.mu.Lock()
	w.handleAddLocked(e, bookie, resp, err)
	w.mu.Unlock()
	w.flush()
}

// handleAddLocked applies one bookie's answer to an add.
// REQUIRES: w.mu held.
func (w *Writer) handleAddLocked(e *entry, bookie string, resp *bookiepb.AddResponse, err error) {
	status := bookiepb.AddStatus_ADD_FAILED
	msg := ""
	switch {
	case err != nil:
		msg = err.Error()
	case resp == nil:
		msg = "empty answer"
	default:
		status, msg = resp.Status, resp.Message
	}
	if status == bookiepb.AddStatus_ADD_OK {
		e.oks.add(bookie)
		if w.mu.err == nil {
			w.ackLocked()
			w.mu.levels.check(e, w.mu.md, w.mu.change)
		}
		return
	}
	e.sent.remove(bookie)
	var buf writeSetBuf
	if e.acked && slices.Contains(appendEntryWriteSet(buf[:0], w.mu.md, e.id), bookie) {
		w.markUnderReplicatedLocked(e)
		if w.mu.err == nil {
			w.mu.levels.check(e, w.mu.md, w.mu.change)
		}
	}
	if w.mu.err != nil {
		return
	}
	switch status {
	case bookiepb.AddStatus_ADD_FENCED:
		// W5: a recovery fenced the ledger on this bookie.
		w.failLocked(fmt.Errorf("%w: ledger %d: bookie %s refused entry %d", ErrFenced, w.id, bookie, e.id))
	case bookiepb.AddStatus_ADD_INVALID:
		// Entry ids are dense: an entry no bookie accepts cannot be skipped.
		w.failLocked(fmt.Errorf("%w: ledger %d: bookie %s rejected entry %d: %w: %s",
			ErrWriterFailed, w.id, bookie, e.id, ErrInvalid, msg))
	default: // transport error, timeout, ADD_FAILED, ADD_READ_ONLY, ADD_ENTRY_CONFLICT
		// ADD_ENTRY_CONFLICT: the bookie holds other bytes for this entry
		// of our own ledger: someone else wrote into it first. Replacing
		// the bookie keeps later entries off it; the foreign copy of this
		// entry stays in its write set if the entry is acknowledged before
		// the change (readers cannot tell copies apart without per-entry
		// digests: docs/security.md).
		if w.bookieFailedLocked(bookie) {
			w.log.Warn("add failed; replacing the bookie", "bookie", bookie, "entry", e.id, "status", status, "err", msg)
		} else {
			// The same bookie failing the adds it had in flight (a stalled
			// disk times out thousands at once): one warning is enough.
			w.log.Debug("add failed", "bookie", bookie, "entry", e.id, "status", status, "err", msg)
		}
	}
}

// bookieFailedLocked marks a member of the current ensemble failed and
// asks the background work to replace it, reporting whether it was not
// failed before. Errors from bookies that are no longer in the ensemble
// (already replaced) change nothing.
// REQUIRES: w.mu held.
func (w *Writer) bookieFailedLocked(bookie string) bool {
	w.mu.quarantined[bookie] = true
	if w.mu.failed[bookie] || !slices.Contains(w.currentEnsembleLocked(), bookie) {
		return false
	}
	w.mu.failed[bookie] = true
	w.mu.replaceDue = true
	w.kickLocked()
	return true
}

// ackableLocked reports whether e has Qa acknowledgements that count.
// W3: only bookies of e's write set in the durable metadata count, and
// while an ensemble change is in flight an entry at or after its start
// whose write set changes waits for the change to be durable.
// REQUIRES: w.mu held.
func (w *Writer) ackableLocked(e *entry) bool {
	var buf, next writeSetBuf
	ws := appendEntryWriteSet(buf[:0], w.mu.md, e.id)
	if c := w.mu.change; c != nil && e.id >= c.start &&
		!slices.Equal(ws, appendWriteSet(next[:0], c.ensemble, e.id, int(w.mu.md.WriteQuorum))) {
		return false
	}
	n := 0
	for _, b := range ws {
		if e.oks.has(b) {
			n++
		}
	}
	return n >= int(w.mu.md.AckQuorum)
}

// ackLocked acknowledges, in order, every pending entry that can be (W2).
// REQUIRES: w.mu held, w.mu.err nil.
func (w *Writer) ackLocked() {
	advanced := false
	for len(w.mu.entries) > 0 {
		e := w.mu.entries[0]
		if !w.ackableLocked(e) {
			break
		}
		w.mu.entries[0] = nil
		w.mu.entries = w.mu.entries[1:]
		e.acked = true
		w.mu.lac = e.id
		w.mu.length += int64(len(e.payload))
		w.mu.inFlightBytes -= int64(len(e.payload) + len(e.tag))
		var buf writeSetBuf
		for _, b := range appendEntryWriteSet(buf[:0], w.mu.md, e.id) {
			if !e.sent.has(b) { // a failed member never got it
				w.markUnderReplicatedLocked(e)
				break
			}
		}
		if e.cb != nil {
			w.mu.deliveries = append(w.mu.deliveries, delivery{cb: e.cb, id: e.id})
		}
		w.mu.levels.check(e, w.mu.md, w.mu.change)
		advanced = true
	}
	if advanced {
		w.mu.activity++
		w.notifyLocked()
		w.scheduleLACLocked()
	}
}

// REQUIRES: w.mu held.
func (w *Writer) markUnderReplicatedLocked(e *entry) {
	if !e.under {
		e.under = true
		w.mu.underReplicated++
	}
}

// failLocked makes err terminal: every pending entry fails with it, in
// order, and nothing is acknowledged afterwards.
// REQUIRES: w.mu held.
func (w *Writer) failLocked(err error) {
	if w.mu.err != nil {
		return
	}
	w.mu.err = err
	w.log.Warn("writer stopped", "err", err, "lac", w.mu.lac, "pending", len(w.mu.entries))
	for _, e := range w.mu.entries {
		if e.cb != nil {
			w.mu.deliveries = append(w.mu.deliveries, delivery{cb: e.cb, id: e.id, err: err})
		}
	}
	w.mu.entries = nil
	w.mu.inFlightBytes = 0
	if w.mu.change != nil {
		w.mu.unresolved = w.mu.change.md
	}
	w.mu.change = nil
	w.mu.levels.failAll(err)
	w.notifyLocked()
}

// notifyLocked wakes everything waiting on a channel of changedLocked.
// REQUIRES: w.mu held.
func (w *Writer) notifyLocked() {
	if w.mu.changed != nil {
		close(w.mu.changed)
		w.mu.changed = nil
	}
}

// changedLocked returns a channel that the next notifyLocked closes. It
// is made when someone waits: a writer acknowledging entries with nobody
// waiting makes none.
// REQUIRES: w.mu held.
func (w *Writer) changedLocked() <-chan struct{} {
	if w.mu.changed == nil {
		w.mu.changed = make(chan struct{})
	}
	return w.mu.changed
}

// kickLocked schedules a run of the background work.
// REQUIRES: w.mu held.
func (w *Writer) kickLocked() {
	if w.mu.workQueued || w.mu.stopped {
		return
	}
	w.mu.workQueued = true
	w.bg.after(0, w.work)
}
