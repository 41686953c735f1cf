package ledger_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/strata-log/strata/internal/corruption"
	"github.com/strata-log/strata/internal/testwait"
	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/proto/bookiepb"
	"github.com/strata-log/strata/proto/ledgerpb"
)

// rtBookie is one in-memory bookie of the reader tests.
type rtBookie struct {
	entries map[int64][]byte
	lac     int64
	down    bool
	delay   time.Duration
	corrupt map[int64]bool
	reads   int // ReadEntry calls
	streams int // ReadEntries calls
	lacs    int // ReadLAC calls
}

// rtBookies is a minimal in-memory BookieClient for one ledger, with
// scripted faults: down bookies, slow bookies, missing and corrupt entries.
type rtBookies struct {
	mu      sync.Mutex
	bookies map[string]*rtBookie
	changed chan struct{} // closed and replaced when a LAC moves
}

func newRTBookies(addrs ...string) *rtBookies {
	b := &rtBookies{bookies: map[string]*rtBookie{}, changed: make(chan struct{})}
	for _, a := range addrs {
		b.bookies[a] = &rtBookie{entries: map[int64][]byte{}, lac: -1, corrupt: map[int64]bool{}}
	}
	return b
}

func (b *rtBookies) with(addr string, f func(*rtBookie)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	f(b.bookies[addr])
	close(b.changed)
	b.changed = make(chan struct{})
}

// put stores entries first..last (payloadOf) on the write sets md routes
// them to, and sets every bookie's LAC to lac.
func (b *rtBookies) put(md *ledgerpb.LedgerMetadata, first, last, lac int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for e := first; e <= last; e++ {
		for _, addr := range writeSetOf(md, e) {
			b.bookies[addr].entries[e] = payloadOf(e)
		}
	}
	for _, bk := range b.bookies {
		bk.lac = max(bk.lac, lac)
	}
	close(b.changed)
	b.changed = make(chan struct{})
}

func writeSetOf(md *ledgerpb.LedgerMetadata, e int64) []string {
	frags := md.Fragments
	f := frags[0]
	for _, g := range frags {
		if g.FirstEntryId <= e {
			f = g
		}
	}
	out := []string{}
	for i := int64(0); i < int64(md.WriteQuorum); i++ {
		out = append(out, f.Bookies[(e+i)%int64(len(f.Bookies))])
	}
	return out
}

func payloadOf(e int64) []byte { return []byte(fmt.Sprintf("entry-%d", e)) }

// enter returns the bookie after its delay, or an error if it is down.
func (b *rtBookies) enter(ctx context.Context, addr string, count func(*rtBookie)) (*rtBookie, error) {
	b.mu.Lock()
	bk := b.bookies[addr]
	count(bk)
	down, delay := bk.down, bk.delay
	b.mu.Unlock()
	if down {
		return nil, status.Error(codes.Unavailable, "bookie "+addr+" is down")
	}
	if delay > 0 {
		t := time.NewTimer(delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	return bk, nil
}

func (b *rtBookies) Add(string, *bookiepb.AddRequest, func(*bookiepb.AddResponse, error)) {
	panic("readers do not add")
}

func (b *rtBookies) ReadEntry(ctx context.Context, addr string, req *bookiepb.ReadEntryRequest) (*bookiepb.ReadEntryResponse, error) {
	bk, err := b.enter(ctx, addr, func(bk *rtBookie) { bk.reads++ })
	if err != nil {
		return nil, err
	}
	if req.Fence {
		panic("a reader fenced")
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	e := int64(req.EntryId)
	if bk.corrupt[e] {
		return nil, fmt.Errorf("%w: %w", ledger.ErrEntryCorrupt, status.Error(codes.DataLoss, "corrupt"))
	}
	p, ok := bk.entries[e]
	if !ok {
		return &bookiepb.ReadEntryResponse{Status: bookiepb.ReadStatus_READ_NO_ENTRY, LedgerId: req.LedgerId, EntryId: req.EntryId}, nil
	}
	return &bookiepb.ReadEntryResponse{LedgerId: req.LedgerId, EntryId: req.EntryId, Payload: p, KnownLac: bk.lac}, nil
}

// ReadEntries streams like a bookie: in order, stopping silently at a
// missing entry once one was sent, NotFound when the first is missing.
func (b *rtBookies) ReadEntries(ctx context.Context, addr string, req *bookiepb.ReadEntriesRequest, fn func(*bookiepb.ReadEntryResponse) error) error {
	bk, err := b.enter(ctx, addr, func(bk *rtBookie) { bk.streams++ })
	if err != nil {
		return err
	}
	var size int64
	for e := int64(req.FirstEntryId); e <= int64(req.LastEntryId); e++ {
		b.mu.Lock()
		p, ok := bk.entries[e]
		corrupt := bk.corrupt[e]
		b.mu.Unlock()
		switch {
		case corrupt:
			return fmt.Errorf("%w: %w", ledger.ErrEntryCorrupt, status.Error(codes.DataLoss, "corrupt"))
		case !ok && e == int64(req.FirstEntryId):
			return status.Error(codes.NotFound, "no entry")
		case !ok:
			return nil
		}
		if size > 0 && size+int64(len(p)) > req.MaxBytes {
			return nil
		}
		size += int64(len(p))
		if err := fn(&bookiepb.ReadEntryResponse{LedgerId: req.LedgerId, EntryId: uint64(e), Payload: p}); err != nil {
			return err
		}
	}
	return nil
}

func (b *rtBookies) ReadLAC(ctx context.Context, addr string, req *bookiepb.ReadLACRequest) (*bookiepb.ReadLACResponse, error) {
	bk, err := b.enter(ctx, addr, func(bk *rtBookie) { bk.lacs++ })
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(time.Duration(req.WaitMs) * time.Millisecond)
	for {
		b.mu.Lock()
		lac, changed := bk.lac, b.changed
		b.mu.Unlock()
		if req.WaitMs == 0 || lac > req.PreviousLac || !time.Now().Before(deadline) {
			return &bookiepb.ReadLACResponse{Lac: lac, LastEntryId: lac}, nil
		}
		t := time.NewTimer(time.Until(deadline))
		select {
		case <-changed:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		t.Stop()
	}
}

func (b *rtBookies) Fence(context.Context, string, uint64) (*bookiepb.FenceResponse, error) {
	panic("a reader fenced")
}

func (b *rtBookies) WriteLAC(context.Context, string, uint64, int64) error {
	panic("readers do not write")
}

func (b *rtBookies) DeleteLedger(context.Context, string, uint64) error {
	panic("readers do not delete")
}

// rtMeta is a minimal in-memory MetadataStore.
type rtMeta struct {
	mu       sync.Mutex
	mds      map[uint64]*ledgerpb.LedgerMetadata
	versions map[uint64]int64
}

func (m *rtMeta) set(md *ledgerpb.LedgerMetadata) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.mds[md.Id] = proto.Clone(md).(*ledgerpb.LedgerMetadata)
	m.versions[md.Id]++
}

func (m *rtMeta) Create(context.Context, *ledgerpb.LedgerMetadata) (uint64, int64, error) {
	panic("not used")
}

func (m *rtMeta) Get(_ context.Context, id uint64) (*ledgerpb.LedgerMetadata, int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	md, ok := m.mds[id]
	if !ok {
		return nil, 0, fmt.Errorf("%w: %d", ledger.ErrNoSuchLedger, id)
	}
	return proto.Clone(md).(*ledgerpb.LedgerMetadata), m.versions[id], nil
}

func (m *rtMeta) Update(context.Context, *ledgerpb.LedgerMetadata, int64) (int64, error) {
	panic("not used")
}

func (m *rtMeta) Delete(context.Context, uint64) error { panic("not used") }

func (m *rtMeta) List(context.Context) ([]uint64, error) { panic("not used") }

const rtLedger = 42

func rtMetadata(e, qw, qa int32, state ledgerpb.LedgerState, last int64, frags ...*ledgerpb.Fragment) *ledgerpb.LedgerMetadata {
	return &ledgerpb.LedgerMetadata{Id: rtLedger, EnsembleSize: e, WriteQuorum: qw, AckQuorum: qa, State: state, LastEntryId: last, Fragments: frags}
}

func frag(first int64, bookies ...string) *ledgerpb.Fragment {
	return &ledgerpb.Fragment{FirstEntryId: first, Bookies: bookies}
}

func rtEnv(md *ledgerpb.LedgerMetadata, bookies *rtBookies) (ledger.Env, *rtMeta) {
	meta := &rtMeta{mds: map[uint64]*ledgerpb.LedgerMetadata{}, versions: map[uint64]int64{}}
	meta.set(md)
	return ledger.Env{Meta: meta, Bookies: bookies}, meta
}

func rtOpen(t *testing.T, env ledger.Env, opts ledger.ReaderOptions) *ledger.Reader {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := ledger.OpenReaderWith(ctx, env, rtLedger, opts)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func checkEntries(t *testing.T, entries []ledger.Entry, first, last int64) {
	t.Helper()
	if int64(len(entries)) != last-first+1 {
		t.Fatalf("%d entries, want %d..%d", len(entries), first, last)
	}
	for i, e := range entries {
		if e.ID != first+int64(i) || !bytes.Equal(e.Payload, payloadOf(e.ID)) {
			t.Fatalf("entry %d: id %d payload %q", first+int64(i), e.ID, e.Payload)
		}
	}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestReaderClosedLedger(t *testing.T) {
	verifyNoLeaks(t)
	ctx := testCtx(t)
	md := rtMetadata(3, 3, 2, ledgerpb.LedgerState_CLOSED, 9, frag(0, "a", "b", "c"))
	bk := newRTBookies("a", "b", "c")
	// Entries beyond the close point exist on the bookies (written, never
	// confirmed): a reader must not see them.
	bk.put(md, 0, 12, 12)
	env, _ := rtEnv(md, bk)
	r := rtOpen(t, env, ledger.ReaderOptions{})
	lac, err := r.LastAddConfirmed(ctx)
	if err != nil || lac != 9 {
		t.Fatalf("LAC %d, %v; want 9", lac, err)
	}
	entries, err := r.Read(ctx, 0, 9)
	if err != nil {
		t.Fatal(err)
	}
	checkEntries(t, entries, 0, 9)
	if _, err := r.Read(ctx, 5, 10); !errors.Is(err, ledger.ErrBeyondLAC) || !errors.Is(err, ledger.ErrInvalid) {
		t.Fatalf("read beyond the end: %v", err)
	}
	if _, err := r.Read(ctx, 3, 2); !errors.Is(err, ledger.ErrInvalid) {
		t.Fatalf("read 3..2: %v", err)
	}
	var got []ledger.Entry
	if err := r.ReadRange(ctx, 2, 9, func(e ledger.Entry) error { got = append(got, e); return nil }); err != nil {
		t.Fatal(err)
	}
	checkEntries(t, got, 2, 9)
	if lac, err := r.WaitLAC(ctx, 9); !errors.Is(err, ledger.ErrLedgerClosed) || lac != 9 {
		t.Fatalf("WaitLAC at the end of a closed ledger: %d, %v", lac, err)
	}
	if lac, err := r.WaitLAC(ctx, 3); err != nil || lac != 9 {
		t.Fatalf("WaitLAC(3): %d, %v", lac, err)
	}
	if m := r.Metadata(); m.LastEntryId != 9 || m.State != ledgerpb.LedgerState_CLOSED {
		t.Fatalf("metadata %v", m)
	}
}

// TestReaderFor: a reader opened on metadata the caller holds reads with
// it, and refreshes it from the store when its bookies cannot serve (here
// the held copy names an ensemble that re-replication replaced).
func TestReaderFor(t *testing.T) {
	verifyNoLeaks(t)
	ctx := testCtx(t)
	md := rtMetadata(3, 3, 2, ledgerpb.LedgerState_CLOSED, 4, frag(0, "a", "b", "c"))
	bk := newRTBookies("a", "b", "c", "x", "y", "z")
	bk.put(md, 0, 4, 4)
	env, _ := rtEnv(md, bk)
	held := proto.Clone(md).(*ledgerpb.LedgerMetadata)
	held.Fragments = []*ledgerpb.Fragment{frag(0, "x", "y", "z")} // they hold nothing
	r, err := ledger.ReaderFor(env, held, ledger.ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Metadata().Fragments[0].Bookies; !slices.Equal(got, []string{"x", "y", "z"}) {
		t.Fatalf("reader starts from %v, want the held metadata's ensemble", got)
	}
	entries, err := r.Read(ctx, 0, 4)
	if err != nil {
		t.Fatal(err)
	}
	checkEntries(t, entries, 0, 4)
	if got := r.Metadata().Fragments[0].Bookies; !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("reader did not refresh its metadata: %v", got)
	}
	if _, err := ledger.ReaderFor(env, &ledgerpb.LedgerMetadata{Id: 1}, ledger.ReaderOptions{}); !errors.Is(err, ledger.ErrInvalid) {
		t.Fatalf("invalid metadata: %v", err)
	}
}

func TestReaderEmptyClosedLedger(t *testing.T) {
	ctx := testCtx(t)
	md := rtMetadata(3, 3, 2, ledgerpb.LedgerState_CLOSED, -1, frag(0, "a", "b", "c"))
	env, _ := rtEnv(md, newRTBookies("a", "b", "c"))
	r := rtOpen(t, env, ledger.ReaderOptions{})
	if lac, err := r.LastAddConfirmed(ctx); lac != -1 || err != nil {
		t.Fatalf("LAC %d, %v", lac, err)
	}
	if _, err := r.Read(ctx, 0, 0); !errors.Is(err, ledger.ErrBeyondLAC) {
		t.Fatalf("read: %v", err)
	}
}

func TestOpenReaderErrors(t *testing.T) {
	ctx := testCtx(t)
	md := rtMetadata(3, 3, 2, ledgerpb.LedgerState_OPEN, -1, frag(0, "a", "b", "c"))
	env, meta := rtEnv(md, newRTBookies("a", "b", "c"))
	if _, err := ledger.OpenReader(ctx, env, 7); !errors.Is(err, ledger.ErrNoSuchLedger) {
		t.Fatalf("open missing ledger: %v", err)
	}
	for _, bad := range []*ledgerpb.LedgerMetadata{
		rtMetadata(3, 4, 2, ledgerpb.LedgerState_OPEN, -1, frag(0, "a", "b", "c")),
		rtMetadata(3, 3, 0, ledgerpb.LedgerState_OPEN, -1, frag(0, "a", "b", "c")),
		rtMetadata(3, 3, 2, ledgerpb.LedgerState_OPEN, -1),
		rtMetadata(3, 3, 2, ledgerpb.LedgerState_OPEN, -1, frag(1, "a", "b", "c")),
		rtMetadata(3, 3, 2, ledgerpb.LedgerState_OPEN, -1, frag(0, "a", "b")),
	} {
		meta.set(bad)
		if _, err := ledger.OpenReader(ctx, env, rtLedger); !errors.Is(err, ledger.ErrInvalid) {
			t.Errorf("open %v: %v", bad, err)
		}
	}
	if err := (ledger.ReaderOptions{SpeculativeDelay: -1}).Validate(); !errors.Is(err, ledger.ErrInvalid) {
		t.Fatal(err)
	}
}

func TestReaderFailover(t *testing.T) {
	verifyNoLeaks(t)
	ctx := testCtx(t)
	md := rtMetadata(3, 3, 2, ledgerpb.LedgerState_CLOSED, 29, frag(0, "a", "b", "c"))
	bk := newRTBookies("a", "b", "c")
	bk.put(md, 0, 29, 29)
	bk.with("a", func(b *rtBookie) { b.down = true })
	bk.with("b", func(b *rtBookie) {
		for e := int64(0); e < 30; e += 2 {
			delete(b.entries, e) // b lost the even entries: "no entry"
		}
	})
	bk.with("c", func(b *rtBookie) { b.corrupt[7] = true; b.corrupt[8] = true })
	env, _ := rtEnv(md, bk)
	r := rtOpen(t, env, ledger.ReaderOptions{SpeculativeDelay: time.Hour})
	// Entry 7: a down, b has it, c corrupt: read. Entry 8: a down, b has no
	// entry, c corrupt: unreadable and corrupt. Entry 6: only c has it.
	if e, err := r.ReadEntry(ctx, 7); err != nil || !bytes.Equal(e.Payload, payloadOf(7)) {
		t.Fatalf("entry 7: %v, %v", e, err)
	}
	if e, err := r.ReadEntry(ctx, 6); err != nil || !bytes.Equal(e.Payload, payloadOf(6)) {
		t.Fatalf("entry 6: %v, %v", e, err)
	}
	_, err := r.ReadEntry(ctx, 8)
	if !errors.Is(err, ledger.ErrEntryUnreadable) || !errors.Is(err, ledger.ErrEntryCorrupt) || !corruption.Is(err) {
		t.Fatalf("entry 8: %v, want unreadable and corrupt, marked as corruption", err)
	}
	if _, err := r.Read(ctx, 0, 29); !errors.Is(err, ledger.ErrEntryUnreadable) {
		t.Fatalf("read with entry 8 unreadable: %v", err)
	}
	bk.with("c", func(b *rtBookie) { b.corrupt = map[int64]bool{} })
	entries, err := r.Read(ctx, 0, 29)
	if err != nil {
		t.Fatal(err)
	}
	checkEntries(t, entries, 0, 29)
	// ReadRange: a is down (its stream fails), b's stream stops at its
	// gaps, c fills them.
	var got []ledger.Entry
	if err := r.ReadRange(ctx, 0, 29, func(e ledger.Entry) error { got = append(got, e); return nil }); err != nil {
		t.Fatal(err)
	}
	checkEntries(t, got, 0, 29)
}

// TestReaderSpeculativeRead: a slow bookie does not hold a read up.
func TestReaderSpeculativeRead(t *testing.T) {
	verifyNoLeaks(t)
	ctx := testCtx(t)
	md := rtMetadata(3, 3, 2, ledgerpb.LedgerState_CLOSED, 2, frag(0, "a", "b", "c"))
	bk := newRTBookies("a", "b", "c")
	bk.put(md, 0, 2, 2)
	bk.with("a", func(b *rtBookie) { b.delay = time.Hour })
	env, _ := rtEnv(md, bk)
	r := rtOpen(t, env, ledger.ReaderOptions{SpeculativeDelay: 10 * time.Millisecond})
	start := time.Now()
	// Entry 0's write set starts at a.
	if e, err := r.ReadEntry(ctx, 0); err != nil || !bytes.Equal(e.Payload, payloadOf(0)) {
		t.Fatalf("entry 0: %v, %v", e, err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("read took %v", took)
	}
	bk.mu.Lock()
	reads := bk.bookies["a"].reads + bk.bookies["b"].reads
	bk.mu.Unlock()
	if reads != 2 {
		t.Fatalf("%d reads at a and b, want 2", reads)
	}
}

func TestReaderLACOfOpenLedger(t *testing.T) {
	verifyNoLeaks(t)
	ctx := testCtx(t)
	md := rtMetadata(3, 3, 2, ledgerpb.LedgerState_OPEN, -1, frag(0, "a", "b", "c"))
	bk := newRTBookies("a", "b", "c")
	bk.put(md, 0, 9, -1)
	bk.with("a", func(b *rtBookie) { b.lac = 5 })
	bk.with("b", func(b *rtBookie) { b.lac = 8; b.delay = time.Hour }) // too slow to count
	bk.with("c", func(b *rtBookie) { b.lac = 7 })
	env, _ := rtEnv(md, bk)
	// b never answers within the grace; a and c must, also on a loaded
	// machine, so the grace is long (each question waits it out once).
	r := rtOpen(t, env, ledger.ReaderOptions{LACGrace: time.Second})
	lac, err := r.LastAddConfirmed(ctx)
	if err != nil || lac != 7 {
		t.Fatalf("LAC %d, %v; want 7", lac, err)
	}
	entries, err := r.Read(ctx, 0, 7)
	if err != nil {
		t.Fatal(err)
	}
	checkEntries(t, entries, 0, 7)
	// 8 and 9 are stored but not (known to be) confirmed.
	if _, err := r.Read(ctx, 0, 8); !errors.Is(err, ledger.ErrBeyondLAC) {
		t.Fatalf("read 0..8: %v", err)
	}
	// The LAC never goes down, even if the bookies that answer know less.
	bk.with("c", func(b *rtBookie) { b.down = true })
	if lac, err := r.LastAddConfirmed(ctx); err != nil || lac != 7 {
		t.Fatalf("LAC %d, %v; want 7", lac, err)
	}
	// Read asks again when the range is beyond what it knows.
	bk.with("a", func(b *rtBookie) { b.lac = 9 })
	entries, err = r.Read(ctx, 8, 9)
	if err != nil {
		t.Fatal(err)
	}
	checkEntries(t, entries, 8, 9)
	// No bookie answers: an error.
	bk.with("a", func(b *rtBookie) { b.down = true })
	bk.with("b", func(b *rtBookie) { b.down = true })
	if _, err := r.LastAddConfirmed(ctx); err == nil {
		t.Fatal("LAC with every bookie down")
	}
}

func TestReaderWaitLAC(t *testing.T) {
	verifyNoLeaks(t)
	ctx := testCtx(t)
	md := rtMetadata(3, 3, 2, ledgerpb.LedgerState_OPEN, -1, frag(0, "a", "b", "c"))
	bk := newRTBookies("a", "b", "c")
	env, meta := rtEnv(md, bk)
	r := rtOpen(t, env, ledger.ReaderOptions{LongPollWait: time.Minute})
	type result struct {
		lac int64
		err error
	}
	wait := func(previous int64) chan result {
		ch := make(chan result, 1)
		go func() {
			lac, err := r.WaitLAC(ctx, previous)
			ch <- result{lac, err}
		}()
		return ch
	}
	// The LAC advances on one bookie: WaitLAC returns at once, long
	// before its long-poll round ends.
	ch := wait(-1)
	bk.put(md, 0, 4, -1)
	bk.with("b", func(b *rtBookie) { b.lac = 3 })
	if res := <-ch; res.err != nil || res.lac != 3 {
		t.Fatalf("WaitLAC(-1) = %d, %v", res.lac, res.err)
	}
	// The known LAC is already above previous: no wait.
	if lac, err := r.WaitLAC(ctx, 1); err != nil || lac != 3 {
		t.Fatalf("WaitLAC(1) = %d, %v", lac, err)
	}
	// ctx ends first.
	short, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	if lac, err := r.WaitLAC(short, 3); !errors.Is(err, context.DeadlineExceeded) || lac != 3 {
		t.Fatalf("WaitLAC with a short ctx = %d, %v", lac, err)
	}
	cancel()

	// Recovery closes the ledger at 4, above every bookie's LAC: a reader
	// with short long-poll rounds notices through the metadata.
	r2 := rtOpen(t, env, ledger.ReaderOptions{LongPollWait: 20 * time.Millisecond})
	closed := proto.Clone(md).(*ledgerpb.LedgerMetadata)
	closed.State, closed.LastEntryId = ledgerpb.LedgerState_CLOSED, 4
	meta.set(closed)
	if lac, err := r2.WaitLAC(ctx, 3); err != nil || lac != 4 {
		t.Fatalf("WaitLAC(3) across the close = %d, %v", lac, err)
	}
	entries, err := r2.Read(ctx, 0, 4)
	if err != nil {
		t.Fatal(err)
	}
	checkEntries(t, entries, 0, 4)
	if _, err := r2.WaitLAC(ctx, 4); !errors.Is(err, ledger.ErrLedgerClosed) {
		t.Fatalf("WaitLAC(4) on the closed ledger: %v", err)
	}
}

// TestReaderWaitLACBookiesDown: with no bookie answering, WaitLAC backs
// off and still notices the close.
func TestReaderWaitLACBookiesDown(t *testing.T) {
	verifyNoLeaks(t)
	ctx := testCtx(t)
	md := rtMetadata(3, 3, 2, ledgerpb.LedgerState_OPEN, -1, frag(0, "a", "b", "c"))
	bk := newRTBookies("a", "b", "c")
	for _, a := range []string{"a", "b", "c"} {
		bk.with(a, func(b *rtBookie) { b.down = true })
	}
	env, meta := rtEnv(md, bk)
	r := rtOpen(t, env, ledger.ReaderOptions{LongPollWait: 20 * time.Millisecond})
	lacCalls := func() int {
		bk.mu.Lock()
		defer bk.mu.Unlock()
		return bk.bookies["a"].lacs
	}
	before := lacCalls()
	start := time.Now()
	done := make(chan error, 1)
	go func() {
		_, err := r.WaitLAC(ctx, -1)
		done <- err
	}()
	// Three failed rounds: with the backoff (50 ms, then 100 ms) the third
	// comes at least 150 ms after the first; a slow machine only makes it
	// later. Without a backoff it would come at once.
	testwait.Until(t, 10*time.Second, "three failed ReadLAC rounds", func() bool { return lacCalls()-before >= 3 })
	if elapsed := time.Since(start); elapsed < 150*time.Millisecond {
		t.Fatalf("three ReadLAC rounds within %v: no backoff", elapsed)
	}
	closed := proto.Clone(md).(*ledgerpb.LedgerMetadata)
	closed.State, closed.LastEntryId = ledgerpb.LedgerState_CLOSED, -1
	meta.set(closed)
	if err := testwait.Recv(t, 10*time.Second, "WaitLAC to notice the close", done); !errors.Is(err, ledger.ErrLedgerClosed) {
		t.Fatalf("WaitLAC = %v", err)
	}
}

// TestReaderEnsembleChange: entries on a fragment the reader's metadata
// does not know yet are found after it re-reads the metadata.
func TestReaderEnsembleChange(t *testing.T) {
	verifyNoLeaks(t)
	ctx := testCtx(t)
	md := rtMetadata(3, 3, 2, ledgerpb.LedgerState_OPEN, -1, frag(0, "a", "b", "c"))
	bk := newRTBookies("a", "b", "c", "d", "e", "f")
	bk.put(md, 0, 4, 4)
	env, meta := rtEnv(md, bk)
	// Every fake bookie answers, so the LAC question ends when all have:
	// a long grace only keeps a loaded machine from ending it before "a"
	// (the one that knows LAC 9) answered.
	r := rtOpen(t, env, ledger.ReaderOptions{LACGrace: time.Minute})
	// The writer moves to a whole new ensemble at entry 5 (two changes).
	md2 := proto.Clone(md).(*ledgerpb.LedgerMetadata)
	md2.Fragments = append(md2.Fragments, frag(5, "d", "e", "f"))
	meta.set(md2)
	bk.put(md2, 5, 9, -1)
	bk.with("a", func(b *rtBookie) { b.lac = 9 }) // a learned it before leaving
	entries, err := r.Read(ctx, 0, 9)
	if err != nil {
		t.Fatal(err)
	}
	checkEntries(t, entries, 0, 9)
	if n := len(r.Metadata().Fragments); n != 2 {
		t.Fatalf("reader knows %d fragments, want 2", n)
	}
}

// TestReaderStriped: E > Qw spreads entries; Read and ReadRange route each
// entry to its own write set.
func TestReaderStriped(t *testing.T) {
	verifyNoLeaks(t)
	ctx := testCtx(t)
	md := rtMetadata(5, 2, 2, ledgerpb.LedgerState_CLOSED, 99, frag(0, "a", "b", "c", "d", "e"), frag(50, "a", "b", "f", "d", "e"))
	bk := newRTBookies("a", "b", "c", "d", "e", "f")
	bk.put(md, 0, 99, 99)
	env, _ := rtEnv(md, bk)
	r := rtOpen(t, env, ledger.ReaderOptions{ReadParallelism: 7})
	entries, err := r.Read(ctx, 0, 99)
	if err != nil {
		t.Fatal(err)
	}
	checkEntries(t, entries, 0, 99)
	var got []ledger.Entry
	if err := r.ReadRange(ctx, 0, 99, func(e ledger.Entry) error { got = append(got, e); return nil }); err != nil {
		t.Fatal(err)
	}
	checkEntries(t, got, 0, 99)
	bk.mu.Lock()
	defer bk.mu.Unlock()
	for addr, b := range bk.bookies {
		if b.streams != 0 {
			t.Errorf("bookie %s streamed a striped ledger", addr)
		}
	}
}

// TestReaderReadRangeStreams: without striping ReadRange streams runs of
// entries, read-ahead bytes at a time, and stops at fn's error.
func TestReaderReadRangeStreams(t *testing.T) {
	verifyNoLeaks(t)
	ctx := testCtx(t)
	md := rtMetadata(3, 3, 2, ledgerpb.LedgerState_CLOSED, 999, frag(0, "a", "b", "c"), frag(600, "a", "b", "d"))
	bk := newRTBookies("a", "b", "c", "d")
	bk.put(md, 0, 999, 999)
	env, _ := rtEnv(md, bk)
	r := rtOpen(t, env, ledger.ReaderOptions{ReadAheadBytes: 1000})
	var got []ledger.Entry
	if err := r.ReadRange(ctx, 0, 999, func(e ledger.Entry) error { got = append(got, e); return nil }); err != nil {
		t.Fatal(err)
	}
	checkEntries(t, got, 0, 999)
	bk.mu.Lock()
	streams, reads := 0, 0
	for _, b := range bk.bookies {
		streams += b.streams
		reads += b.reads
	}
	bk.mu.Unlock()
	// About 9 bytes an entry, 1000 bytes a call: ~10 calls, plus one at
	// the fragment boundary.
	if reads != 0 || streams < 9 || streams > 20 {
		t.Fatalf("%d streams and %d single reads for 1000 entries", streams, reads)
	}
	stop := errors.New("stop")
	n := 0
	err := r.ReadRange(ctx, 0, 999, func(ledger.Entry) error {
		n++
		if n == 150 {
			return stop
		}
		return nil
	})
	if err != stop || n != 150 {
		t.Fatalf("ReadRange stopped after %d with %v", n, err)
	}
}

// TestReaderReadRangeStalledBookie: a bookie that hangs mid-read does not
// hold ReadRange up beyond StreamStall.
func TestReaderReadRangeStalledBookie(t *testing.T) {
	verifyNoLeaks(t)
	ctx := testCtx(t)
	md := rtMetadata(3, 3, 2, ledgerpb.LedgerState_CLOSED, 99, frag(0, "a", "b", "c"))
	bk := newRTBookies("a", "b", "c")
	bk.put(md, 0, 99, 99)
	bk.with("a", func(b *rtBookie) { b.delay = time.Hour }) // accepts calls, never answers
	env, _ := rtEnv(md, bk)
	r := rtOpen(t, env, ledger.ReaderOptions{StreamStall: 20 * time.Millisecond, SpeculativeDelay: 5 * time.Millisecond})
	var got []ledger.Entry
	if err := r.ReadRange(ctx, 0, 99, func(e ledger.Entry) error { got = append(got, e); return nil }); err != nil {
		t.Fatal(err)
	}
	checkEntries(t, got, 0, 99)
	bk.mu.Lock()
	defer bk.mu.Unlock()
	if bk.bookies["a"].streams != 1 || bk.bookies["b"].streams+bk.bookies["c"].streams == 0 {
		t.Fatalf("streams: a %d, b %d, c %d", bk.bookies["a"].streams, bk.bookies["b"].streams, bk.bookies["c"].streams)
	}
}
