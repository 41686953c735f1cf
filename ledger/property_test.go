package ledger_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/ledger/ledgertest"
	"github.com/strata-log/strata/proto/bookiepb"
	"github.com/strata-log/strata/proto/ledgerpb"
)

// TestPropertyAckedEntriesSurviveRecovery runs a writer and up to two
// competing recoveries through random interleavings, all on this goroutine
// (manual bookies, manual scheduler, recoveries as state machines), so a
// seed replays exactly. Faults: adds delivered out of order across
// bookies, failed with or without being stored, bookies crashing and
// restarting (durable: they keep what they acknowledged), metadata
// unavailable, lost fence/read/add requests of the recoveries. Bookies are
// never forgetful here: with two forgetful bookies loss is allowed.
//
// Recovery requests are sent at random steps, lost (an error, no effect)
// or delayed (sent at a later step, like a late answer).
//
// Properties:
//   - every entry acknowledged to the writer is <= the recovered last
//     entry, has Qa copies in its write set (as the final metadata says)
//     and has the payload the writer appended (so it survives the loss of
//     any one bookie when Qa >= 2);
//   - every entry up to the recovered end is readable from its write set
//     with its payload, and the length matches;
//   - no copy of any entry anywhere differs from what the writer appended;
//   - concurrent recoveries agree on one last entry;
//   - after the recovery the old writer acknowledges nothing beyond it.
func TestPropertyAckedEntriesSurviveRecovery(t *testing.T) {
	runs := uint64(1000)
	if testing.Short() {
		runs = 100
	}
	if s := os.Getenv("LEDGER_PROPERTY_RUNS"); s != "" { // soak
		runs, _ = strconv.ParseUint(s, 10, 64)
	}
	first := uint64(0)
	if s := os.Getenv("LEDGER_PROPERTY_SEED"); s != "" { // replay one seed
		first, _ = strconv.ParseUint(s, 10, 64)
		runs = first + 1
	}
	for seed := first; seed < runs; seed++ {
		runLedgerProperty(t, seed)
		if t.Failed() {
			t.Fatalf("failed with seed %d", seed)
		}
	}
}

type propRecovery struct {
	r       *ledger.TestRecovery
	md      *ledgerpb.LedgerMetadata
	version int64
	ops     []ledger.RecoveryOp
	result  *ledgerpb.LedgerMetadata
	visited [][]byte // what RecoverVisit would hand its visit, by entry
	checked bool     // checkDoneRecoveries saw it done
	// proceeded: fencing was done and the recovery reads forward. It
	// proceeds at once: the entries below its start are sized in drain,
	// and with no false LAC (R10) they are all there.
	proceeded bool
	// delayed: requests on their way, sent (executed) at a later step:
	// a slow network, or a lost request that only times out later.
	delayed []ledger.RecoveryOp
}

type propRun struct {
	t        *testing.T
	seed     uint64
	rng      *rand.Rand
	c        *ledgertest.Cluster
	w        *ledger.Writer
	r        *wtRecorder
	q        [3]int
	addrs    []string
	payloads [][]byte // by entry id
	recs     []*propRecovery
	ctx      context.Context
}

func runLedgerProperty(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	n := 3 + rng.IntN(3)
	var configs [][3]int
	for _, q := range [][3]int{{3, 3, 2}, {3, 3, 2}, {3, 2, 2}, {3, 3, 1}, {3, 3, 3}, {4, 3, 2}, {5, 3, 2}, {4, 2, 1}} {
		if q[0] <= n {
			configs = append(configs, q)
		}
	}
	p := &propRun{t: t, seed: seed, rng: rng, c: ledgertest.NewCluster(n), q: configs[rng.IntN(len(configs))], ctx: wtCtx(t)}
	p.addrs = p.c.Bookies.Addrs()
	p.c.Bookies.SetManual(true)
	p.w = wtCreate(t, p.c, ledger.CreateOptions{EnsembleSize: p.q[0], WriteQuorum: p.q[1], AckQuorum: p.q[2]})
	p.r = newWTRecorder(t, p.c, p.w)

	for range 40 + rng.IntN(120) {
		p.step()
	}
	p.drain()
	p.check()
}

func (p *propRun) appendOne() {
	payload := fmt.Appendf(nil, "seed%d-entry%d", p.seed, len(p.payloads))
	if err := p.w.Append(p.ctx, payload, p.r.cb); err == nil {
		p.payloads = append(p.payloads, payload)
	}
}

// oldestTo is a matcher for the oldest add in flight to a random bookie
// (answers from one bookie come in the order it received the adds).
func (p *propRun) oldestTo() (func(ledgertest.InFlightAdd) bool, bool) {
	inflight := p.c.Bookies.InFlight()
	if len(inflight) == 0 {
		return nil, false
	}
	target := inflight[p.rng.IntN(len(inflight))].Bookie
	i := slices.IndexFunc(inflight, func(a ledgertest.InFlightAdd) bool { return a.Bookie == target })
	seq := inflight[i].Seq
	return func(a ledgertest.InFlightAdd) bool { return a.Seq == seq }, true
}

func (p *propRun) step() {
	c := p.c
	switch k := p.rng.IntN(100); {
	case k < 22:
		p.appendOne()
	case k < 45:
		if m, ok := p.oldestTo(); ok {
			c.Bookies.Deliver(m)
		}
	case k < 52:
		if m, ok := p.oldestTo(); ok {
			c.Bookies.Fail(m, p.rng.IntN(2) == 0)
		}
	case k < 56:
		c.Bookies.Crash(p.addrs[p.rng.IntN(len(p.addrs))])
	case k < 62:
		c.Bookies.Restart(p.addrs[p.rng.IntN(len(p.addrs))])
	case k < 70:
		c.Scheduler.Advance([]time.Duration{0, 50 * time.Millisecond, time.Second}[p.rng.IntN(3)])
	case k < 73:
		c.Meta.SetUnavailable(p.rng.IntN(2) == 0)
	case k < 76:
		if len(p.recs) < 2 {
			p.startRecovery()
		}
	default:
		p.stepRecovery()
	}
	p.checkDoneRecoveries()
}

// checkDoneRecoveries checks R5 the moment a recovery decides: every entry
// it recovered already has Qa copies in its write set, since the ledger may
// be closed (and a bookie lost) right after.
func (p *propRun) checkDoneRecoveries() {
	for i, rec := range p.recs {
		if rec.checked || !rec.r.Done() {
			continue
		}
		rec.checked = true
		last, start, _, err := rec.r.Result()
		if err != nil {
			continue
		}
		for e := start; e <= last; e++ {
			if n := wtCopies(p.c, rec.md, e); n < p.q[2] {
				p.t.Errorf("seed %d (%v): recovery %d decided with entry %d on %d bookies, want >= Qa",
					p.seed, p.q, i, e, n)
			}
		}
	}
}

func (p *propRun) startRecovery() {
	if _, err := p.c.Meta.List(p.ctx); err != nil {
		return // metadata unavailable: MarkInRecovery would wait
	}
	md, version, err := ledger.MarkInRecovery(p.ctx, p.c.Env(), p.w.ID())
	if err != nil {
		p.t.Errorf("MarkInRecovery: %v", err)
		return
	}
	if md.State == ledgerpb.LedgerState_CLOSED {
		return
	}
	r, err := ledger.NewTestRecovery(md)
	if err != nil {
		p.t.Fatal(err)
	}
	p.recs = append(p.recs, &propRecovery{r: r, md: md, version: version, ops: r.Begin()})
}

// stepRecovery sends one pending request of a random recovery, or loses it
// (answers with an error, without effect). Fence requests are lost often:
// a lost fence is how BookKeeper #2614 starts.
func (p *propRun) stepRecovery() {
	var active []*propRecovery
	for _, rec := range p.recs {
		if len(rec.ops)+len(rec.delayed) > 0 {
			active = append(active, rec)
		}
	}
	if len(active) == 0 {
		return
	}
	rec := active[p.rng.IntN(len(active))]
	if len(rec.delayed) > 0 && p.rng.IntN(4) == 0 {
		i := p.rng.IntN(len(rec.delayed))
		op := rec.delayed[i]
		rec.delayed = slices.Delete(rec.delayed, i, i+1)
		p.exec(rec, op, false)
		return
	}
	if len(rec.ops) == 0 {
		return
	}
	i := p.rng.IntN(len(rec.ops))
	op := rec.ops[i]
	rec.ops = slices.Delete(rec.ops, i, i+1)
	switch k := p.rng.IntN(100); {
	case k < 10, op.Kind == "fence" && k < 30:
		p.exec(rec, op, true) // lost: an error, no effect
	case k < 40:
		rec.delayed = append(rec.delayed, op)
	default:
		p.exec(rec, op, false)
	}
}

func (p *propRun) exec(rec *propRecovery, op ledger.RecoveryOp, lose bool) {
	lost := errors.New("lost request")
	id := p.w.ID()
	switch op.Kind {
	case "fence":
		if lose {
			rec.ops = append(rec.ops, rec.r.OnFence(op, nil, lost)...)
			return
		}
		resp, err := p.c.Bookies.Fence(p.ctx, op.Bookie, id)
		rec.ops = append(rec.ops, rec.r.OnFence(op, resp, err)...)
		if rec.r.FencingDone() && !rec.proceeded {
			rec.proceeded = true
			rec.ops = append(rec.ops, rec.r.Proceed()...)
		}
	case "read":
		if lose {
			rec.ops = append(rec.ops, rec.r.OnRead(op, nil, lost)...)
			return
		}
		resp, err := p.c.Bookies.ReadEntry(p.ctx, op.Bookie, &bookiepb.ReadEntryRequest{LedgerId: id, EntryId: uint64(op.Entry), Fence: op.Fence})
		rec.ops = append(rec.ops, rec.r.OnRead(op, resp, err)...)
	case "recovery-add":
		if lose {
			rec.ops = append(rec.ops, rec.r.OnAdd(op, nil, lost)...)
			return
		}
		p.c.Bookies.Add(op.Bookie, &bookiepb.AddRequest{LedgerId: id, EntryId: uint64(op.Entry), Lac: op.LAC,
			Payload: op.Payload, Recovery: true}, func(resp *bookiepb.AddResponse, err error) {
			rec.ops = append(rec.ops, rec.r.OnAdd(op, resp, err)...)
		})
	default:
		p.t.Fatalf("unknown op %+v", op)
	}
}

// drain heals everything, makes sure a recovery runs, and runs every
// pending request, delivery and timer until nothing moves; then it closes
// the recoveries in random order.
func (p *propRun) drain() {
	c := p.c
	c.Meta.SetUnavailable(false)
	for _, a := range p.addrs {
		c.Bookies.Restart(a)
	}
	if len(p.recs) == 0 {
		p.startRecovery()
	}
	settle := func() {
		for round := 0; ; round++ {
			if round > 10_000 {
				p.t.Fatalf("seed %d: does not settle", p.seed)
			}
			moved := false
			for _, rec := range p.recs {
				rec.ops = append(rec.ops, rec.delayed...)
				rec.delayed = nil
				for len(rec.ops) > 0 {
					op := rec.ops[0]
					rec.ops = rec.ops[1:]
					p.exec(rec, op, false)
					moved = true
				}
			}
			moved = c.Bookies.DeliverAll() > 0 || moved
			// Past the longest backoff, so every retry comes due.
			moved = c.Scheduler.Advance(2*ledger.DefaultMetadataRetryMax) > 0 || moved
			if !moved {
				return
			}
		}
	}
	settle()
	p.checkDoneRecoveries()
	for _, i := range p.rng.Perm(len(p.recs)) {
		rec := p.recs[i]
		if !rec.r.Done() {
			p.t.Fatalf("seed %d: recovery %d not done after the drain", p.seed, i)
		}
		last, start, length, err := rec.r.Result()
		if err != nil {
			p.t.Fatalf("seed %d: recovery %d: %v", p.seed, i, err)
		}
		visit := func(e ledger.Entry) error {
			if e.ID != int64(len(rec.visited)) {
				return fmt.Errorf("entry %d visited after %d entries", e.ID, len(rec.visited))
			}
			rec.visited = append(rec.visited, bytes.Clone(e.Payload))
			return nil
		}
		prefix, end, err := ledger.PrefixLength(p.ctx, c.Env(), rec.md, start, visit, nil)
		if err != nil || end != start {
			p.t.Fatalf("seed %d: PrefixLength: up to %d of %d: %v", p.seed, end, start, err)
		}
		rec.result, err = ledger.CloseRecovered(p.ctx, c.Env(), rec.md, rec.version, last, prefix+length)
		if err != nil {
			p.t.Fatalf("seed %d: CloseRecovered: %v", p.seed, err)
		}
		// The entries up to the end the first close wrote, whichever
		// recovery wrote it.
		if err := rec.r.VisitRecovered(p.ctx, c.Env(), rec.result, visit); err != nil {
			p.t.Fatalf("seed %d: recovery %d: VisitRecovered: %v", p.seed, i, err)
		}
	}
	// The old writer tries to go on.
	for range 3 {
		p.appendOne()
	}
	settle()
	if s := p.w.Stats(); s.PendingEntries > 0 {
		p.t.Fatalf("seed %d: writer still has %d pending entries: %+v", p.seed, s.PendingEntries, s)
	}
	if err := p.w.Close(p.ctx); err != nil && !errors.Is(err, ledger.ErrFenced) {
		p.t.Errorf("seed %d: old writer's Close: %v", p.seed, err)
	}
}

func (p *propRun) check() {
	t, c, id := p.t, p.c, p.w.ID()
	final := wtMetadata(t, c, id)
	if final.State != ledgerpb.LedgerState_CLOSED {
		t.Fatalf("seed %d: final state %v", p.seed, final.State)
	}
	last := final.LastEntryId
	for i, rec := range p.recs {
		if rec.result.LastEntryId != last || rec.result.Length != final.Length {
			t.Errorf("seed %d: recovery %d ended at %d (length %d); the ledger at %d (length %d)",
				p.seed, i, rec.result.LastEntryId, rec.result.Length, last, final.Length)
		}
		if int64(len(rec.visited)) != last+1 {
			t.Errorf("seed %d: recovery %d visited %d entries of a ledger ending at %d", p.seed, i, len(rec.visited), last)
		}
		for e, got := range rec.visited {
			if e >= len(p.payloads) || !bytes.Equal(got, p.payloads[e]) {
				t.Errorf("seed %d: recovery %d visited entry %d = %q, never appended as such", p.seed, i, e, got)
			}
		}
	}
	if got := p.r.maxAcked(); got > last {
		t.Errorf("seed %d (%v): entry %d acknowledged, recovered ledger ends at %d", p.seed, p.q, got, last)
	}
	if last >= int64(len(p.payloads)) {
		t.Fatalf("seed %d: ledger ends at %d, only %d entries appended", p.seed, last, len(p.payloads))
	}
	var length int64
	for e := int64(0); e <= last; e++ {
		length += int64(len(p.payloads[e]))
		have := 0
		for _, b := range ledger.EntryWriteSet(final, e) {
			if got, ok := c.Bookies.Stored(b, id, uint64(e)); ok && bytes.Equal(openStored(final, e, got), p.payloads[e]) {
				have++
			}
		}
		if have < p.q[2] {
			t.Errorf("seed %d (%v): entry %d has %d good copies in its write set %v, want >= Qa",
				p.seed, p.q, e, have, ledger.EntryWriteSet(final, e))
		}
	}
	if final.Length != length {
		t.Errorf("seed %d: length %d, want %d", p.seed, final.Length, length)
	}
	for _, b := range p.addrs {
		for _, e := range c.Bookies.StoredEntries(b, id) {
			stored, _ := c.Bookies.Stored(b, id, e)
			got := openStored(final, int64(e), stored)
			if e >= uint64(len(p.payloads)) || !bytes.Equal(got, p.payloads[e]) {
				t.Errorf("seed %d: %s holds entry %d = %q, never appended as such", p.seed, b, e, got)
			}
		}
	}
	if got := wtMetadata(t, c, id); got.LastEntryId != last || got.State != ledgerpb.LedgerState_CLOSED {
		t.Errorf("seed %d: metadata changed after recovery: %v", p.seed, got)
	}
}

// openStored is the payload of entry e as a bookie stores it, or nil when
// its digest does not match.
func openStored(md *ledgerpb.LedgerMetadata, e int64, stored []byte) []byte {
	payload, err := ledger.OpenEntry(md, e, stored)
	if err != nil {
		return nil
	}
	return payload
}
