package ledger

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/strata-log/strata/internal/corruption"
	"github.com/strata-log/strata/proto/bookiepb"
	"github.com/strata-log/strata/proto/ledgerpb"
)

// Errors of Reader, besides ErrNoSuchLedger (OpenReader), ErrInvalid (bad
// arguments) and ErrLedgerClosed (WaitLAC on a closed ledger that has
// nothing more).
var (
	// ErrBeyondLAC: a read asked for an entry above the last add confirmed.
	// Such entries may never exist (recovery may close the ledger below
	// them), so they are not served. It matches ErrInvalid too.
	ErrBeyondLAC = fmt.Errorf("%w: entry beyond the last add confirmed", ErrInvalid)
	// ErrEntryUnreadable: no bookie of an entry's write set returned it
	// (each failed or said it has no such entry). The error joins every
	// bookie's answer.
	ErrEntryUnreadable = errors.New("ledger: no bookie of the write set returned the entry")
	// ErrEntryCorrupt: a bookie reported that its copy of an entry failed
	// its checksum (its BookieClient's read error matches ErrEntryCorrupt),
	// or the copy failed the ledger's digest. It is joined to
	// ErrEntryUnreadable when no other copy could be read; a good copy
	// elsewhere hides it.
	// Marked (internal/corruption): corruption.Is holds for it and for
	// every error that wraps it.
	ErrEntryCorrupt = corruption.Mark(errors.New("ledger: a bookie holds a corrupt copy of the entry"))
)

// Defaults of ReaderOptions.
const (
	DefaultSpeculativeDelay = 50 * time.Millisecond
	DefaultLACGrace         = 100 * time.Millisecond
	DefaultLongPollWait     = 5 * time.Second
	DefaultReadAheadBytes   = 4 << 20
	DefaultStreamStall      = time.Second
	DefaultReadParallelism  = 16
)

// Entry is one ledger entry.
type Entry struct {
	ID      int64
	Payload []byte
}

// ReaderOptions configures a Reader. Zero fields take defaults.
type ReaderOptions struct {
	// SpeculativeDelay is how long a read waits for one bookie before it
	// also asks the next bookie of the write set; the first good answer
	// wins. A failed or "no entry" answer moves on at once. Default 50ms.
	SpeculativeDelay time.Duration
	// LACGrace is how long LastAddConfirmed waits, after the first answer,
	// for the other bookies of the ensemble: each answer is a lower bound,
	// the highest wins. Default 100ms.
	LACGrace time.Duration
	// LongPollWait is the wait of one long-poll round of WaitLAC; between
	// rounds it re-reads the metadata (to notice CLOSED). Default 5s.
	LongPollWait time.Duration
	// ReadAheadBytes bounds one ReadEntries call of ReadRange. Default
	// 4 MiB.
	ReadAheadBytes int64
	// StreamStall: a ReadRange stream that delivers nothing for this long
	// (a hung bookie) is abandoned for single reads with failover.
	// Default 1s.
	StreamStall time.Duration
	// ReadParallelism bounds the entries Read fetches at once. Default 16.
	ReadParallelism int
	// Logger. Default: discard, or Env.Logger when set.
	Logger *slog.Logger
}

func (o ReaderOptions) withDefaults(env Env) ReaderOptions {
	if o.SpeculativeDelay <= 0 {
		o.SpeculativeDelay = DefaultSpeculativeDelay
	}
	if o.LACGrace <= 0 {
		o.LACGrace = DefaultLACGrace
	}
	if o.LongPollWait <= 0 {
		o.LongPollWait = DefaultLongPollWait
	}
	if o.ReadAheadBytes <= 0 {
		o.ReadAheadBytes = DefaultReadAheadBytes
	}
	if o.StreamStall <= 0 {
		o.StreamStall = DefaultStreamStall
	}
	if o.ReadParallelism <= 0 {
		o.ReadParallelism = DefaultReadParallelism
	}
	if o.Logger == nil {
		o.Logger = env.Logger
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// Validate reports the first problem with o.
func (o ReaderOptions) Validate() error {
	switch {
	case o.SpeculativeDelay < 0, o.LACGrace < 0, o.LongPollWait < 0, o.StreamStall < 0:
		return fmt.Errorf("%w: reader options: negative duration in %v", ErrInvalid, o)
	case o.ReadAheadBytes < 0, o.ReadParallelism < 0:
		return fmt.Errorf("%w: reader options: negative bound in %v", ErrInvalid, o)
	}
	return nil
}

func (o ReaderOptions) String() string {
	return fmt.Sprintf("speculative-delay=%v lac-grace=%v long-poll-wait=%v read-ahead-bytes=%d stream-stall=%v read-parallelism=%d",
		o.SpeculativeDelay, o.LACGrace, o.LongPollWait, o.ReadAheadBytes, o.StreamStall, o.ReadParallelism)
}

// Reader reads a ledger without fencing it, so a writer may go on
// appending: a tailing reader must never fence (that would kill the
// writer). It serves only entries up to the last add confirmed (LAC), which
// recovery can never truncate; readers of a closed ledger all see the same
// entries 0..last_entry_id. A Reader is safe for concurrent use; it starts
// no goroutine that outlives a call.
type Reader struct {
	env  Env
	id   uint64
	opts ReaderOptions
	log  *slog.Logger
	// dig checks and strips every entry's digest (digest.go); the key
	// never changes for a ledger.
	dig digester

	mu struct {
		sync.Mutex
		md      *ledgerpb.LedgerMetadata
		version int64 // md's version in the store
		// lac is the highest LAC learned; last_entry_id once CLOSED.
		lac int64
	}
}

// OpenReader opens ledger id for reading with default options. It fails
// with ErrNoSuchLedger when the ledger does not exist.
func OpenReader(ctx context.Context, env Env, id uint64) (*Reader, error) {
	return OpenReaderWith(ctx, env, id, ReaderOptions{})
}

// OpenReaderWith is OpenReader with options.
func OpenReaderWith(ctx context.Context, env Env, id uint64, opts ReaderOptions) (*Reader, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	md, version, err := env.Meta.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	return newReader(env, md, version, opts)
}

// ReaderFor opens a reader on metadata the caller already holds, such as
// the closed metadata Recover returns, without reading it from the store
// again. It is refreshed from the store like any reader's when a read
// needs it (an ensemble replaced by re-replication).
func ReaderFor(env Env, md *ledgerpb.LedgerMetadata, opts ReaderOptions) (*Reader, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	// Version 0: any version read from the store later is newer.
	return newReader(env, md, 0, opts)
}

func newReader(env Env, md *ledgerpb.LedgerMetadata, version int64, opts ReaderOptions) (*Reader, error) {
	if err := validateMetadata(md); err != nil {
		return nil, err
	}
	r := &Reader{env: env, id: md.Id, opts: opts.withDefaults(env), dig: newDigester(md)}
	r.log = r.opts.Logger.With("component", "ledger-reader", "ledger", md.Id)
	r.mu.lac = -1
	r.setMetadata(md, version)
	return r, nil
}

// setMetadata installs md unless the reader has a newer version already
// (concurrent refreshes may finish out of order), with the LAC it implies.
func (r *Reader) setMetadata(md *ledgerpb.LedgerMetadata, version int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mu.md != nil && version < r.mu.version {
		return
	}
	r.mu.md, r.mu.version = md, version
	if md.GetState() == ledgerpb.LedgerState_CLOSED {
		r.mu.lac = md.GetLastEntryId()
	}
}

// snapshot returns the current metadata (not to be modified) and LAC.
func (r *Reader) snapshot() (*ledgerpb.LedgerMetadata, int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mu.md, r.mu.lac
}

// advance raises the known LAC to lac (never above a closed ledger's end)
// and returns the known LAC.
func (r *Reader) advance(lac int64) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mu.md.GetState() != ledgerpb.LedgerState_CLOSED && lac > r.mu.lac {
		r.mu.lac = lac
	}
	return r.mu.lac
}

// refresh re-reads the metadata and returns the newest the reader knows.
func (r *Reader) refresh(ctx context.Context) (*ledgerpb.LedgerMetadata, error) {
	md, version, err := r.env.Meta.Get(ctx, r.id)
	if err != nil {
		return nil, err
	}
	if err := validateMetadata(md); err != nil {
		return nil, err
	}
	r.setMetadata(md, version)
	newest, _ := r.snapshot()
	return newest, nil
}

// Metadata returns a copy of the ledger's metadata as last read.
func (r *Reader) Metadata() *ledgerpb.LedgerMetadata {
	md, _ := r.snapshot()
	return proto.Clone(md).(*ledgerpb.LedgerMetadata)
}

// AdvanceLAC raises the LAC the reader knows to lac (never past a closed
// ledger's end). Only a caller that KNOWS lac is acknowledged may call
// it: the ledger's own writer side, e.g. a broker reading back the open
// segment it writes. It saves asking the bookies, whose piggybacked LAC
// lags one entry behind until the writer's explicit LAC.
func (r *Reader) AdvanceLAC(lac int64) { r.advance(lac) }

// LastAddConfirmed returns the ledger's LAC: last_entry_id when it is
// closed; otherwise the highest LAC the bookies of the last fragment
// report. Any one answer is a lower bound of the true LAC (bookies learn
// it from the writer, which only ever raises it), so it waits for the
// first answer, then at most LACGrace for the rest. It fails only when no
// bookie answers. It does not re-read the metadata: WaitLAC notices a
// close that happened after OpenReader.
func (r *Reader) LastAddConfirmed(ctx context.Context) (int64, error) {
	md, lac := r.snapshot()
	if md.GetState() == ledgerpb.LedgerState_CLOSED {
		return lac, nil
	}
	got, _, err := r.askLAC(ctx, lastEnsemble(md), &bookiepb.ReadLACRequest{LedgerId: r.id}, r.opts.LACGrace)
	if err != nil {
		return lac, err
	}
	return r.advance(got), nil
}

// askLAC sends req to every bookie at once and returns the highest LAC
// answered: after every bookie answered, or grace after the first answer,
// or at the first LAC above req.PreviousLac when req waits. It fails when
// no bookie answered; answered reports whether any did.
func (r *Reader) askLAC(ctx context.Context, bookies []string, req *bookiepb.ReadLACRequest, grace time.Duration) (lac int64, answered bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	type answer struct {
		bookie string
		resp   *bookiepb.ReadLACResponse
		err    error
	}
	answers := make(chan answer, len(bookies))
	for _, b := range bookies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := r.env.Bookies.ReadLAC(ctx, b, req)
			answers <- answer{b, resp, err}
		}()
	}
	var (
		graceC <-chan time.Time
		errs   []error
	)
	lac = -1
	for range bookies {
		select {
		case a := <-answers:
			if a.err != nil {
				errs = append(errs, a.err)
				continue
			}
			lac = max(lac, a.resp.GetLac())
			if !answered {
				answered = true
				t := time.NewTimer(grace)
				defer t.Stop()
				graceC = t.C
			}
			if req.WaitMs > 0 && lac > req.PreviousLac {
				return lac, true, nil
			}
		case <-graceC:
			return lac, true, nil
		case <-ctx.Done():
			if answered {
				return lac, true, nil
			}
			return -1, false, fmt.Errorf("ledger %d: read LAC: %w", r.id, ctx.Err())
		}
	}
	if !answered {
		return -1, false, fmt.Errorf("ledger %d: read LAC: no bookie answered: %w", r.id, errors.Join(errs...))
	}
	return lac, true, nil
}

// checkRange validates [first, last] and makes sure last is confirmed,
// asking the bookies once if the known LAC is lower.
func (r *Reader) checkRange(ctx context.Context, first, last int64) error {
	if first < 0 || last < first {
		return fmt.Errorf("%w: entries %d..%d of ledger %d", ErrInvalid, first, last, r.id)
	}
	_, lac := r.snapshot()
	if last <= lac {
		return nil
	}
	lac, err := r.LastAddConfirmed(ctx)
	if err != nil {
		return err
	}
	if last > lac {
		return fmt.Errorf("%w: entry %d of ledger %d, last add confirmed %d", ErrBeyondLAC, last, r.id, lac)
	}
	return nil
}

// Read returns entries first..last, all of which must be at most the LAC
// (else ErrBeyondLAC; LastAddConfirmed or WaitLAC tell how far to read).
// It reads up to ReadParallelism entries at once, each from its write set
// (see ReadEntry), and fails with the first entry that cannot be read.
func (r *Reader) Read(ctx context.Context, first, last int64) ([]Entry, error) {
	if err := r.checkRange(ctx, first, last); err != nil {
		return nil, err
	}
	return r.readMany(ctx, first, last)
}

// readMany reads first..last (already checked) in parallel.
func (r *Reader) readMany(ctx context.Context, first, last int64) ([]Entry, error) {
	n := last - first + 1
	out := make([]Entry, n)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		next     = first
		firstErr error
	)
	workers := int(min(n, int64(r.opts.ReadParallelism)))
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				e := next
				next++
				stop := firstErr != nil
				mu.Unlock()
				if stop || e > last {
					return
				}
				payload, err := r.readOne(ctx, e)
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
						cancel()
					}
					mu.Unlock()
					return
				}
				out[e-first] = Entry{ID: e, Payload: payload}
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	return out, nil
}

// ReadEntry reads one entry (at most the LAC, else ErrBeyondLAC).
func (r *Reader) ReadEntry(ctx context.Context, e int64) (Entry, error) {
	if err := r.checkRange(ctx, e, e); err != nil {
		return Entry{}, err
	}
	payload, err := r.readOne(ctx, e)
	if err != nil {
		return Entry{}, err
	}
	return Entry{ID: e, Payload: payload}, nil
}

// readOne reads confirmed entry e from its write set. If no bookie of the
// write set has it, the metadata is re-read once: a writer acknowledges an
// entry on a new fragment only after the fragment is in metad, so a reader
// with older metadata may have asked the wrong bookies.
func (r *Reader) readOne(ctx context.Context, e int64) ([]byte, error) {
	md, _ := r.snapshot()
	set := entryWriteSet(md, e)
	payload, err := r.readFrom(ctx, set, e)
	if err == nil || ctx.Err() != nil {
		return payload, err
	}
	md2, rerr := r.refresh(ctx)
	if rerr != nil || slices.Equal(entryWriteSet(md2, e), set) {
		return nil, err
	}
	return r.readFrom(ctx, entryWriteSet(md2, e), e)
}

// readFrom reads entry e from the bookies in order: the next bookie is
// asked when the previous one fails, says it has no such entry, or has not
// answered within SpeculativeDelay. The first good answer wins; the calls
// still running are canceled and waited for.
func (r *Reader) readFrom(ctx context.Context, bookies []string, e int64) ([]byte, error) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	type answer struct {
		bookie string
		resp   *bookiepb.ReadEntryResponse
		err    error
	}
	answers := make(chan answer, len(bookies))
	launched, running := 0, 0
	timer := time.NewTimer(r.opts.SpeculativeDelay)
	defer timer.Stop()
	launch := func() {
		b := bookies[launched]
		launched++
		running++
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := r.env.Bookies.ReadEntry(ctx, b, &bookiepb.ReadEntryRequest{LedgerId: r.id, EntryId: uint64(e)})
			answers <- answer{b, resp, err}
		}()
		timer.Reset(r.opts.SpeculativeDelay)
	}
	launch()
	var (
		errs    []error
		corrupt bool
	)
	for running > 0 {
		select {
		case a := <-answers:
			running--
			switch {
			case a.err != nil:
				errs = append(errs, a.err)
				corrupt = corrupt || corruption.Is(a.err)
			case a.resp.GetStatus() == bookiepb.ReadStatus_READ_NO_ENTRY:
				errs = append(errs, fmt.Errorf("bookie %s: no such entry", a.bookie))
			case a.resp.GetLedgerId() != r.id || a.resp.GetEntryId() != uint64(e):
				errs = append(errs, fmt.Errorf("bookie %s: answered with entry %d/%d", a.bookie, a.resp.GetLedgerId(), a.resp.GetEntryId()))
			default:
				payload, err := r.dig.open(e, a.resp.GetPayload())
				if err == nil {
					return payload, nil
				}
				r.digestMismatch(a.bookie, err)
				errs = append(errs, fmt.Errorf("bookie %s: %w", a.bookie, err))
				corrupt = true
			}
			if launched < len(bookies) {
				launch()
			}
		case <-timer.C:
			if launched < len(bookies) {
				launch()
			}
		case <-ctx.Done():
			return nil, fmt.Errorf("ledger: read entry %d/%d: %w", r.id, e, ctx.Err())
		}
	}
	kinds := []error{ErrEntryUnreadable}
	if corrupt {
		kinds = append(kinds, ErrEntryCorrupt)
	}
	return nil, &readError{ledger: r.id, entry: e, kinds: kinds, errs: errs}
}

// readError is the error of an entry no bookie returned.
type readError struct {
	ledger uint64
	entry  int64
	kinds  []error
	errs   []error
}

func (e *readError) Error() string {
	msg := fmt.Sprintf("ledger: read entry %d/%d: %v", e.ledger, e.entry, e.kinds[0])
	if len(e.kinds) > 1 {
		msg += " (a copy is corrupt)"
	}
	for _, err := range e.errs {
		msg += "; " + err.Error()
	}
	return msg
}

func (e *readError) Unwrap() []error { return append(slices.Clone(e.kinds), e.errs...) }

// ReadRange calls fn with entries first..last in order (all at most the
// LAC, else ErrBeyondLAC), stopping at fn's first error, which it returns.
// It is the catch-up read: where every bookie of a fragment holds every
// entry (ensemble size = write quorum) it streams runs of entries from one
// bookie with ReadEntries, ReadAheadBytes at a time, and falls back to
// single reads (with failover) for an entry the stream did not deliver;
// with striping it reads ReadParallelism entries at a time.
func (r *Reader) ReadRange(ctx context.Context, first, last int64, fn func(Entry) error) error {
	if err := r.checkRange(ctx, first, last); err != nil {
		return err
	}
	avoid := map[string]bool{} // bookies whose stream failed in this call
	for pos := first; pos <= last; {
		md, _ := r.snapshot()
		fi := fragmentIndex(md, pos)
		end := last
		if frags := md.GetFragments(); fi+1 < len(frags) {
			end = min(end, frags[fi+1].GetFirstEntryId()-1)
		}
		if md.GetEnsembleSize() != md.GetWriteQuorum() {
			// Striped: no bookie holds a run of entries.
			chunkEnd := min(end, pos+int64(r.opts.ReadParallelism)-1)
			entries, err := r.readMany(ctx, pos, chunkEnd)
			if err != nil {
				return err
			}
			for _, e := range entries {
				if err := fn(e); err != nil {
					return err
				}
			}
			pos = chunkEnd + 1
			continue
		}
		n, err := r.stream(ctx, entryWriteSet(md, pos), avoid, pos, end, fn)
		pos += n
		var fe fnError
		if errors.As(err, &fe) {
			return fe.err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if n > 0 {
			continue
		}
		payload, err := r.readOne(ctx, pos)
		if err != nil {
			return err
		}
		if err := fn(Entry{ID: pos, Payload: payload}); err != nil {
			return err
		}
		pos++
	}
	return nil
}

// fnError carries the error of ReadRange's fn through a stream.
type fnError struct{ err error }

func (e fnError) Error() string { return e.err.Error() }

// Errors that end a ReadRange stream early (the range goes on with
// single reads).
var (
	// errStreamGap: the stream skipped or repeated an entry.
	errStreamGap = errors.New("ledger: stream out of sequence")
	// errStreamStalled: the stream delivered nothing for StreamStall.
	errStreamStalled = errors.New("ledger: read stream stalled")
)

// stream delivers entries pos..end from the first bookie of set not in
// avoid, as far as the bookie streams them in sequence, and returns how
// many it delivered. A bookie whose stream fails joins avoid.
func (r *Reader) stream(ctx context.Context, set []string, avoid map[string]bool, pos, end int64, fn func(Entry) error) (int64, error) {
	bookie := ""
	for _, b := range set {
		if !avoid[b] {
			bookie = b
			break
		}
	}
	if bookie == "" {
		return 0, nil
	}
	// A watchdog cancels the stream when the bookie stops delivering; it
	// is paused while fn runs (a slow consumer is not a stalled bookie).
	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	watchdog := time.AfterFunc(r.opts.StreamStall, func() { cancel(errStreamStalled) })
	defer watchdog.Stop()
	var n int64
	req := &bookiepb.ReadEntriesRequest{LedgerId: r.id, FirstEntryId: uint64(pos), LastEntryId: uint64(end), MaxBytes: r.opts.ReadAheadBytes}
	err := r.env.Bookies.ReadEntries(sctx, bookie, req, func(resp *bookiepb.ReadEntryResponse) error {
		if !watchdog.Stop() {
			return errStreamStalled // it fired: the stream is being canceled
		}
		if resp.GetStatus() != bookiepb.ReadStatus_READ_OK || resp.GetLedgerId() != r.id || resp.GetEntryId() != uint64(pos+n) {
			return errStreamGap
		}
		payload, err := r.dig.open(pos+n, resp.GetPayload())
		if err != nil {
			r.digestMismatch(bookie, err)
			return err // the entry is read again from another bookie
		}
		if err := fn(Entry{ID: pos + n, Payload: payload}); err != nil {
			return fnError{err}
		}
		n++
		watchdog.Reset(r.opts.StreamStall)
		return nil
	})
	if err != nil && context.Cause(sctx) == errStreamStalled && ctx.Err() == nil {
		err = fmt.Errorf("bookie %s: %w (%v)", bookie, errStreamStalled, err)
	}
	var fe fnError
	if err != nil && !errors.As(err, &fe) {
		avoid[bookie] = true
		if n == 0 {
			r.log.Debug("read stream failed", "bookie", bookie, "entry", pos, "err", err)
		}
	}
	return n, err
}

// WaitLAC waits until the LAC is above previous and returns it. It
// long-polls the bookies of the last fragment (ReadLAC with a wait) and
// returns as soon as one reports a higher LAC; between rounds of
// LongPollWait it re-reads the metadata, so it notices when the ledger is
// closed (recovery may close it above every bookie's LAC). On a closed
// ledger whose last entry is at most previous it returns last_entry_id and
// an error matching ErrLedgerClosed: nothing more will come. It returns the
// known LAC and ctx's error when ctx ends first.
func (r *Reader) WaitLAC(ctx context.Context, previous int64) (int64, error) {
	const (
		minBackoff = 50 * time.Millisecond
		maxBackoff = time.Second
	)
	backoff := minBackoff
	for {
		md, lac := r.snapshot()
		if lac > previous {
			return lac, nil
		}
		if md.GetState() == ledgerpb.LedgerState_CLOSED {
			return lac, fmt.Errorf("%w: ledger %d ends at entry %d", ErrLedgerClosed, r.id, lac)
		}
		req := &bookiepb.ReadLACRequest{LedgerId: r.id, PreviousLac: previous, WaitMs: r.opts.LongPollWait.Milliseconds()}
		// A bookie that never answers must not hold the round forever.
		rctx, cancel := context.WithTimeout(ctx, r.opts.LongPollWait+r.opts.LongPollWait/2)
		start := time.Now()
		got, answered, err := r.askLAC(rctx, lastEnsemble(md), req, r.opts.LongPollWait)
		cancel()
		if answered && r.advance(got) > previous {
			continue
		}
		if ctx.Err() != nil {
			return lac, ctx.Err()
		}
		// No bookie answered, or they answered at once without waiting:
		// back off rather than spin on the bookies and metad.
		if err != nil || time.Since(start) < r.opts.LongPollWait/2 {
			r.log.Debug("long-poll LAC round ended early", "err", err, "retry_in", backoff)
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return lac, ctx.Err()
			case <-t.C:
			}
			backoff = min(2*backoff, maxBackoff)
		} else {
			backoff = minBackoff
		}
		if _, err := r.refresh(ctx); err != nil {
			if ctx.Err() != nil {
				return lac, ctx.Err()
			}
			r.log.Debug("re-read metadata", "err", err)
		}
	}
}

// digestMismatch reports a copy whose digest does not match (digest.go).
func (r *Reader) digestMismatch(bookie string, err error) {
	r.env.Metrics.digestMismatch()
	r.log.Warn("a bookie served an entry whose digest does not match; reading another copy", "bookie", bookie, "err", err)
}
