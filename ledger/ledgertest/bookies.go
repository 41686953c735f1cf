package ledgertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/proto/bookiepb"
)

// Errors the fake bookies answer with. Callers of ledger.BookieClient must
// treat every one of them as an unknown outcome.
var (
	// ErrBookieDown: the bookie is crashed (or unknown).
	ErrBookieDown = errors.New("ledgertest: bookie down")
	// ErrTimeout: the test failed or dropped an add in flight.
	ErrTimeout = errors.New("ledgertest: add timed out")
)

// RPC names a synchronous call kind, for Blackhole.
type RPC int

// Call kinds that can be blackholed.
const (
	RPCFence RPC = iota + 1
	RPCReadEntry
	RPCReadEntries
	RPCReadLAC
	RPCWriteLAC
)

// InFlightAdd describes an add waiting in manual mode.
type InFlightAdd struct {
	Seq      uint64 // send order, across bookies
	Bookie   string
	LedgerID uint64
	EntryID  uint64
	LAC      int64
	Recovery bool
	Payload  []byte
}

// FakeBookies is an in-memory ledger.BookieClient. The zero value is not
// usable; call NewFakeBookies. Safe for concurrent use. Callbacks are never
// called with the fake's lock held.
type FakeBookies struct {
	mu      sync.Mutex
	manual  bool
	bookies map[string]*fakeBookie
	queue   []*queuedAdd
	nextSeq uint64
	changed chan struct{} // closed and replaced on every state change
	// verify vouches for an add's entry (storage.Options.Verify); nil
	// vouches for every entry.
	verify func(ledgerID, entryID uint64, entry []byte) bool
}

var _ ledger.BookieClient = (*FakeBookies)(nil)

type fakeBookie struct {
	down      bool
	blackhole map[RPC]bool
	ledgers   map[uint64]*fakeLedger
}

type fakeLedger struct {
	entries map[uint64]fakeEntry
	fenced  bool
	lac     int64
	last    int64 // highest entry id held, -1 for none
	// verified: the highest entry id whose add was vouched for, -1 for
	// none (H2).
	verified int64
}

type fakeEntry struct {
	payload []byte
	lac     int64
}

type queuedAdd struct {
	InFlightAdd
	cb func(*bookiepb.AddResponse, error)
}

// NewFakeBookies returns bookies at addrs, in auto mode: every add is
// processed and answered inside Add.
func NewFakeBookies(addrs ...string) *FakeBookies {
	f := &FakeBookies{bookies: make(map[string]*fakeBookie), changed: make(chan struct{})}
	for _, a := range addrs {
		f.AddBookie(a)
	}
	return f
}

// AddBookie adds an empty bookie (no-op if it exists).
func (f *FakeBookies) AddBookie(addr string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.bookies[addr] == nil {
		f.bookies[addr] = &fakeBookie{blackhole: make(map[RPC]bool), ledgers: make(map[uint64]*fakeLedger)}
	}
}

// SetManual switches manual mode: adds wait in flight until Deliver, Fail
// or Crash. Switching it off does not deliver what is in flight.
func (f *FakeBookies) SetManual(on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.manual = on
}

// Crash stops a bookie: the adds in flight to it fail with ErrBookieDown
// (not stored), new calls fail at once. What it acknowledged stays (it is
// durable).
func (f *FakeBookies) Crash(addr string) {
	f.mu.Lock()
	b := f.bookies[addr]
	if b == nil {
		f.mu.Unlock()
		return
	}
	b.down = true
	var failed []*queuedAdd
	f.queue = slices.DeleteFunc(f.queue, func(q *queuedAdd) bool {
		if q.Bookie == addr {
			failed = append(failed, q)
			return true
		}
		return false
	})
	f.notifyLocked()
	f.mu.Unlock()
	for _, q := range failed {
		q.cb(nil, fmt.Errorf("%w: %s", ErrBookieDown, addr))
	}
}

// Restart brings a crashed bookie back with its data.
func (f *FakeBookies) Restart(addr string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if b := f.bookies[addr]; b != nil {
		b.down = false
		f.notifyLocked()
	}
}

// Down reports whether addr is crashed.
func (f *FakeBookies) Down(addr string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	b := f.bookies[addr]
	return b == nil || b.down
}

// Wipe makes a bookie forget everything (entries, fences, LACs): a bookie
// whose disk was lost and that wrongly answers "no such entry" for data it
// acknowledged. The real bookie refuses to start in that state (cookies).
func (f *FakeBookies) Wipe(addr string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if b := f.bookies[addr]; b != nil {
		b.ledgers = make(map[uint64]*fakeLedger)
		f.notifyLocked()
	}
}

// Blackhole makes calls of the given kinds to addr block until their
// context ends, without effect (a lost request). No kinds: heal all.
func (f *FakeBookies) Blackhole(addr string, rpcs ...RPC) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b := f.bookies[addr]
	if b == nil {
		return
	}
	if len(rpcs) == 0 {
		clear(b.blackhole)
		return
	}
	for _, r := range rpcs {
		b.blackhole[r] = true
	}
}

// InFlight lists the adds waiting in manual mode, in send order.
func (f *FakeBookies) InFlight() []InFlightAdd {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]InFlightAdd, len(f.queue))
	for i, q := range f.queue {
		out[i] = q.InFlightAdd
	}
	return out
}

// Deliver delivers, in send order, the adds in flight now that match (nil:
// all): each reaches its bookie, which stores it (or refuses it: fenced)
// and answers. It returns how many it delivered. Adds sent by the
// callbacks are left in flight.
func (f *FakeBookies) Deliver(match func(InFlightAdd) bool) int {
	return f.settle(match, func(q *queuedAdd) (*bookiepb.AddResponse, error) {
		return f.process(q.Bookie, q.InFlightAdd)
	})
}

// DeliverAll delivers until nothing is in flight, including adds sent by
// the callbacks, and returns how many it delivered.
func (f *FakeBookies) DeliverAll() int {
	total := 0
	for {
		n := f.Deliver(nil)
		if n == 0 {
			return total
		}
		total += n
		if total > 1_000_000 {
			panic("ledgertest: DeliverAll does not converge")
		}
	}
}

// Fail answers the matching adds in flight with ErrTimeout. With stored
// set the bookie stores them first (the answer was lost, not the add):
// either way the sender cannot know.
func (f *FakeBookies) Fail(match func(InFlightAdd) bool, stored bool) int {
	return f.settle(match, func(q *queuedAdd) (*bookiepb.AddResponse, error) {
		if stored {
			f.process(q.Bookie, q.InFlightAdd)
		}
		return nil, fmt.Errorf("%w: %s entry %d", ErrTimeout, q.Bookie, q.EntryID)
	})
}

// To matches adds to one bookie; Entry matches one entry of any bookie.
func To(addr string) func(InFlightAdd) bool {
	return func(a InFlightAdd) bool { return a.Bookie == addr }
}

// Entry matches adds of one entry.
func Entry(entryID uint64) func(InFlightAdd) bool {
	return func(a InFlightAdd) bool { return a.EntryID == entryID }
}

// ToEntry matches the add of one entry to one bookie.
func ToEntry(addr string, entryID uint64) func(InFlightAdd) bool {
	return func(a InFlightAdd) bool { return a.Bookie == addr && a.EntryID == entryID }
}

func (f *FakeBookies) settle(match func(InFlightAdd) bool, answer func(*queuedAdd) (*bookiepb.AddResponse, error)) int {
	f.mu.Lock()
	limit := f.nextSeq
	f.mu.Unlock()
	n := 0
	for {
		f.mu.Lock()
		i := slices.IndexFunc(f.queue, func(q *queuedAdd) bool {
			return q.Seq < limit && (match == nil || match(q.InFlightAdd))
		})
		if i < 0 {
			f.mu.Unlock()
			return n
		}
		q := f.queue[i]
		f.queue = slices.Delete(f.queue, i, i+1)
		f.mu.Unlock()
		resp, err := answer(q)
		q.cb(resp, err)
		n++
	}
}

// SetVerifier makes the bookies check each add's entry with verify, as a
// real bookie checks its digest (storage.Options.Verify): a LAC is kept
// only up to the highest entry it vouched for (H2). nil vouches for every
// entry. NewCluster sets one that checks the ledger's digest.
func (f *FakeBookies) SetVerifier(verify func(ledgerID, entryID uint64, entry []byte) bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.verify = verify
}

// process is the bookie's side of an add.
func (f *FakeBookies) process(addr string, a InFlightAdd) (*bookiepb.AddResponse, error) {
	f.mu.Lock()
	verify := f.verify
	f.mu.Unlock()
	verified := verify == nil || verify(a.LedgerID, a.EntryID, a.Payload)
	f.mu.Lock()
	defer f.mu.Unlock()
	b := f.bookies[addr]
	if b == nil || b.down {
		return nil, fmt.Errorf("%w: %s", ErrBookieDown, addr)
	}
	resp := &bookiepb.AddResponse{LedgerId: a.LedgerID, EntryId: a.EntryID}
	l := b.ledger(a.LedgerID)
	if l.fenced && !a.Recovery {
		resp.Status = bookiepb.AddStatus_ADD_FENCED
		return resp, nil
	}
	// The real bookie's rules (ledger/storage/doc.go): a stored entry
	// keeps its bytes (C2), and a LAC never passes the entries held nor
	// the entry it came with (H1), nor the entries vouched for (H2).
	if old, ok := l.entries[a.EntryID]; ok && !bytes.Equal(old.payload, a.Payload) {
		resp.Status = bookiepb.AddStatus_ADD_ENTRY_CONFLICT
		return resp, nil
	}
	l.last = max(l.last, int64(a.EntryID))
	if verified {
		l.verified = max(l.verified, int64(a.EntryID))
	}
	lac := max(min(a.LAC, int64(a.EntryID)-1, l.verified), -1)
	l.entries[a.EntryID] = fakeEntry{payload: slices.Clone(a.Payload), lac: lac}
	l.lac = max(l.lac, lac)
	f.notifyLocked()
	return resp, nil
}

func (b *fakeBookie) ledger(id uint64) *fakeLedger {
	l := b.ledgers[id]
	if l == nil {
		l = &fakeLedger{entries: make(map[uint64]fakeEntry), lac: -1, last: -1, verified: -1}
		b.ledgers[id] = l
	}
	return l
}

func (l *fakeLedger) lastEntry() int64 { return l.last }

// REQUIRES: f.mu held.
func (f *FakeBookies) notifyLocked() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// Add implements ledger.BookieClient.
func (f *FakeBookies) Add(bookie string, req *bookiepb.AddRequest, cb func(*bookiepb.AddResponse, error)) {
	a := InFlightAdd{Bookie: bookie, LedgerID: req.LedgerId, EntryID: req.EntryId, LAC: req.Lac,
		Recovery: req.Recovery, Payload: slices.Clone(req.Entry())}
	f.mu.Lock()
	a.Seq = f.nextSeq
	f.nextSeq++
	b := f.bookies[bookie]
	if b == nil || b.down {
		f.mu.Unlock()
		cb(nil, fmt.Errorf("%w: %s", ErrBookieDown, bookie))
		return
	}
	if f.manual {
		f.queue = append(f.queue, &queuedAdd{InFlightAdd: a, cb: cb})
		f.mu.Unlock()
		return
	}
	f.mu.Unlock()
	resp, err := f.process(bookie, a)
	if resp != nil {
		resp.RequestId = req.RequestId
	}
	cb(resp, err)
}

// call checks a synchronous call: an error if the bookie is down, a block
// until ctx ends if the call kind is blackholed. REQUIRES: f.mu held; it
// may release and re-take it.
func (f *FakeBookies) callLocked(ctx context.Context, addr string, rpc RPC) (*fakeBookie, error) {
	b := f.bookies[addr]
	if b == nil || b.down {
		return nil, fmt.Errorf("%w: %s", ErrBookieDown, addr)
	}
	if b.blackhole[rpc] {
		f.mu.Unlock()
		<-ctx.Done()
		f.mu.Lock()
		return nil, ctx.Err()
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return b, nil
}

// ReadEntry implements ledger.BookieClient: with req.Fence the ledger is
// fenced before the answer.
func (f *FakeBookies) ReadEntry(ctx context.Context, bookie string, req *bookiepb.ReadEntryRequest) (*bookiepb.ReadEntryResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, err := f.callLocked(ctx, bookie, RPCReadEntry)
	if err != nil {
		return nil, err
	}
	l := b.ledger(req.LedgerId)
	if req.Fence && !l.fenced {
		l.fenced = true
		f.notifyLocked()
	}
	resp := &bookiepb.ReadEntryResponse{LedgerId: req.LedgerId, EntryId: req.EntryId, KnownLac: l.lac}
	if e, ok := l.entries[req.EntryId]; ok {
		resp.Payload, resp.Lac = slices.Clone(e.payload), e.lac
	} else {
		resp.Status = bookiepb.ReadStatus_READ_NO_ENTRY
	}
	return resp, nil
}

// ReadEntries implements ledger.BookieClient: entries first..last in order,
// stopping at max_bytes (at least one entry) or at the first one missing.
func (f *FakeBookies) ReadEntries(ctx context.Context, bookie string, req *bookiepb.ReadEntriesRequest, fn func(*bookiepb.ReadEntryResponse) error) error {
	if req.LastEntryId < req.FirstEntryId {
		return fmt.Errorf("ledgertest: last entry %d before first %d", req.LastEntryId, req.FirstEntryId)
	}
	maxBytes := req.MaxBytes
	if maxBytes <= 0 {
		maxBytes = 4 << 20
	}
	f.mu.Lock()
	b, err := f.callLocked(ctx, bookie, RPCReadEntries)
	if err != nil {
		f.mu.Unlock()
		return err
	}
	l := b.ledger(req.LedgerId)
	var out []*bookiepb.ReadEntryResponse
	var bytes int64
	for e := req.FirstEntryId; e <= req.LastEntryId; e++ {
		ent, ok := l.entries[e]
		if !ok || (len(out) > 0 && bytes+int64(len(ent.payload)) > maxBytes) {
			break
		}
		bytes += int64(len(ent.payload))
		out = append(out, &bookiepb.ReadEntryResponse{LedgerId: req.LedgerId, EntryId: e,
			Lac: ent.lac, Payload: slices.Clone(ent.payload), KnownLac: l.lac})
	}
	f.mu.Unlock()
	for _, r := range out {
		if err := fn(r); err != nil {
			return err
		}
	}
	return nil
}

// ReadLAC implements ledger.BookieClient, with long-poll (wait_ms, real
// time, bounded by ctx).
func (f *FakeBookies) ReadLAC(ctx context.Context, bookie string, req *bookiepb.ReadLACRequest) (*bookiepb.ReadLACResponse, error) {
	var deadline <-chan time.Time
	if req.WaitMs > 0 {
		t := time.NewTimer(time.Duration(req.WaitMs) * time.Millisecond)
		defer t.Stop()
		deadline = t.C
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for {
		b, err := f.callLocked(ctx, bookie, RPCReadLAC)
		if err != nil {
			return nil, err
		}
		l := b.ledgers[req.LedgerId]
		resp := &bookiepb.ReadLACResponse{Lac: -1, LastEntryId: -1}
		if l != nil {
			resp = &bookiepb.ReadLACResponse{Lac: l.lac, LastEntryId: l.lastEntry(), Fenced: l.fenced}
		}
		if deadline == nil || resp.Lac > req.PreviousLac {
			return resp, nil
		}
		changed := f.changed
		f.mu.Unlock()
		select {
		case <-changed:
			f.mu.Lock()
		case <-deadline:
			f.mu.Lock()
			deadline = nil
		case <-ctx.Done():
			f.mu.Lock()
			return nil, ctx.Err()
		}
	}
}

// Fence implements ledger.BookieClient.
func (f *FakeBookies) Fence(ctx context.Context, bookie string, ledgerID uint64) (*bookiepb.FenceResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, err := f.callLocked(ctx, bookie, RPCFence)
	if err != nil {
		return nil, err
	}
	l := b.ledger(ledgerID)
	l.fenced = true
	f.notifyLocked()
	return &bookiepb.FenceResponse{Lac: l.lac, LastEntryId: l.lastEntry(), Complete: true}, nil
}

// WriteLAC implements ledger.BookieClient.
func (f *FakeBookies) WriteLAC(ctx context.Context, bookie string, ledgerID uint64, lac int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, err := f.callLocked(ctx, bookie, RPCWriteLAC)
	if err != nil {
		return err
	}
	l := b.ledger(ledgerID)
	// H1, H2, as the real bookie, which reads an entry it holds but did
	// not vouch for back to check it.
	if e, ok := l.entries[uint64(max(lac, 0))]; ok && lac > l.verified && (f.verify == nil || f.verify(ledgerID, uint64(lac), e.payload)) {
		l.verified = lac
	}
	l.lac = max(l.lac, min(lac, l.last, l.verified))
	f.notifyLocked()
	return nil
}

// DeleteLedger implements ledger.BookieClient.
func (f *FakeBookies) DeleteLedger(ctx context.Context, bookie string, ledgerID uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	b := f.bookies[bookie]
	if b == nil || b.down {
		return fmt.Errorf("%w: %s", ErrBookieDown, bookie)
	}
	delete(b.ledgers, ledgerID)
	f.notifyLocked()
	return ctx.Err()
}

// Stored returns the payload addr holds for an entry, whether or not the
// bookie is down (inspection, not a call).
func (f *FakeBookies) Stored(addr string, ledgerID, entryID uint64) ([]byte, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b := f.bookies[addr]
	if b == nil || b.ledgers[ledgerID] == nil {
		return nil, false
	}
	e, ok := b.ledgers[ledgerID].entries[entryID]
	return slices.Clone(e.payload), ok
}

// StoredEntries lists the entry ids addr holds for a ledger, in order.
func (f *FakeBookies) StoredEntries(addr string, ledgerID uint64) []uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	b := f.bookies[addr]
	if b == nil || b.ledgers[ledgerID] == nil {
		return nil
	}
	var out []uint64
	for e := range b.ledgers[ledgerID].entries {
		out = append(out, e)
	}
	slices.Sort(out)
	return out
}

// Fenced reports whether addr has fenced the ledger.
func (f *FakeBookies) Fenced(addr string, ledgerID uint64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	b := f.bookies[addr]
	return b != nil && b.ledgers[ledgerID] != nil && b.ledgers[ledgerID].fenced
}

// LAC is the LAC addr knows for the ledger (-1 for none).
func (f *FakeBookies) LAC(addr string, ledgerID uint64) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	b := f.bookies[addr]
	if b == nil || b.ledgers[ledgerID] == nil {
		return -1
	}
	return b.ledgers[ledgerID].lac
}

// ForceLAC sets addr's LAC for a ledger to lac as is, bypassing the rule
// that a LAC never passes the entries held: what a bookie written before
// that rule may still report (inspection and setup, not a call).
func (f *FakeBookies) ForceLAC(addr string, ledgerID uint64, lac int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if b := f.bookies[addr]; b != nil {
		b.ledger(ledgerID).lac = lac
		f.notifyLocked()
	}
}

// ForceStored replaces what addr holds for an entry with payload,
// bypassing the rule that a stored entry keeps its bytes: a damaged disk,
// or a copy someone else wrote first (setup, not a call).
func (f *FakeBookies) ForceStored(addr string, ledgerID, entryID uint64, payload []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if b := f.bookies[addr]; b != nil {
		l := b.ledger(ledgerID)
		l.entries[entryID] = fakeEntry{payload: slices.Clone(payload), lac: l.lac}
		l.last = max(l.last, int64(entryID))
		f.notifyLocked()
	}
}

// Forget makes addr lose one entry of a ledger without noticing: what a
// bookie whose disk lost data answers (setup, not a call).
func (f *FakeBookies) Forget(addr string, ledgerID, entryID uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if b := f.bookies[addr]; b != nil {
		delete(b.ledger(ledgerID).entries, entryID)
		f.notifyLocked()
	}
}

// Addrs lists the bookies, sorted.
func (f *FakeBookies) Addrs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for a := range f.bookies {
		out = append(out, a)
	}
	slices.Sort(out)
	return out
}
