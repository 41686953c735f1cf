package ledger_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/proto/bookiepb"
	"github.com/strata-log/strata/proto/ledgerpb"
)

// smDriver feeds the recovery machine scripted answers. Once fencing is
// done it proceeds at once (the entries below the start all there), unless
// hold is set: then the test probes and proceeds itself (R10).
type smDriver struct {
	t         *testing.T
	r         *ledger.TestRecovery
	ops       []ledger.RecoveryOp
	hold      bool
	proceeded bool
}

// fenced appends the ops of a fence answer, and proceeds once fencing is
// done unless d.hold.
func (d *smDriver) fenced(ops []ledger.RecoveryOp) {
	d.ops = append(d.ops, ops...)
	if d.r.FencingDone() && !d.proceeded && !d.hold {
		d.proceed()
	}
}

func (d *smDriver) proceed() {
	d.proceeded = true
	d.ops = append(d.ops, d.r.Proceed()...)
}

func newSMDriver(t *testing.T, e, qw, qa int32, frags ...*ledgerpb.Fragment) *smDriver {
	md := &ledgerpb.LedgerMetadata{Id: 7, EnsembleSize: e, WriteQuorum: qw, AckQuorum: qa,
		State: ledgerpb.LedgerState_IN_RECOVERY, LastEntryId: -1, Fragments: frags}
	r, err := ledger.NewTestRecovery(md)
	if err != nil {
		t.Fatal(err)
	}
	d := &smDriver{t: t, r: r}
	d.ops = r.Begin()
	return d
}

func smFrag(first int64, n int) *ledgerpb.Fragment {
	f := &ledgerpb.Fragment{FirstEntryId: first}
	for i := range n {
		f.Bookies = append(f.Bookies, wtAddr(i))
	}
	return f
}

// take removes the pending op (kind, bookie, entry) or fails.
func (d *smDriver) take(kind, bookie string, entry int64) ledger.RecoveryOp {
	d.t.Helper()
	i := slices.IndexFunc(d.ops, func(op ledger.RecoveryOp) bool {
		return op.Kind == kind && op.Bookie == bookie && (kind == "fence" || op.Entry == entry)
	})
	if i < 0 {
		d.t.Fatalf("no pending %s to %s for entry %d; pending: %s", kind, bookie, entry, d.pending())
	}
	op := d.ops[i]
	d.ops = slices.Delete(d.ops, i, i+1)
	return op
}

func (d *smDriver) fence(bookie string, lac int64, err error) {
	d.t.Helper()
	op := d.take("fence", bookie, 0)
	var resp *bookiepb.FenceResponse
	if err == nil {
		resp = &bookiepb.FenceResponse{Lac: lac, LastEntryId: lac}
	}
	d.fenced(d.r.OnFence(op, resp, err))
}

// read answers a read: "ok", "no" or "err".
func (d *smDriver) read(bookie string, entry int64, answer string) {
	d.t.Helper()
	op := d.take("read", bookie, entry)
	var resp *bookiepb.ReadEntryResponse
	var err error
	switch answer {
	case "ok":
		resp = &bookiepb.ReadEntryResponse{EntryId: uint64(entry), Payload: []byte(fmt.Sprint("p", entry))}
	case "no":
		resp = &bookiepb.ReadEntryResponse{EntryId: uint64(entry), Status: bookiepb.ReadStatus_READ_NO_ENTRY}
	default:
		err = errors.New("timeout")
	}
	d.ops = append(d.ops, d.r.OnRead(op, resp, err)...)
}

// fenceHolding answers a fence from a bookie that reports a LAC and the
// last entry it holds.
func (d *smDriver) fenceHolding(bookie string, lac, last int64) {
	d.t.Helper()
	op := d.take("fence", bookie, 0)
	d.fenced(d.r.OnFence(op, &bookiepb.FenceResponse{Lac: lac, LastEntryId: last}, nil))
}

// fenceComplete answers a fence from a bookie that is not in limbo: its
// last entry counts as a negative for every entry above it (R9).
func (d *smDriver) fenceComplete(bookie string, lac, last int64) {
	d.t.Helper()
	op := d.take("fence", bookie, 0)
	d.fenced(d.r.OnFence(op, &bookiepb.FenceResponse{Lac: lac, LastEntryId: last, Complete: true}, nil))
}

// add answers a recovery add: "ok", "conflict" or "err".
func (d *smDriver) add(bookie string, entry int64, answer string) {
	d.t.Helper()
	op := d.take("recovery-add", bookie, entry)
	var resp *bookiepb.AddResponse
	var err error
	switch answer {
	case "ok":
		resp = &bookiepb.AddResponse{EntryId: uint64(entry)}
	case "conflict":
		resp = &bookiepb.AddResponse{EntryId: uint64(entry), Status: bookiepb.AddStatus_ADD_ENTRY_CONFLICT}
	default:
		err = errors.New("timeout")
	}
	d.ops = append(d.ops, d.r.OnAdd(op, resp, err)...)
}

// addsOK answers ADD_OK to the recovery adds of entries on bookies.
func (d *smDriver) addsOK(entries []int64, bookies ...string) {
	d.t.Helper()
	for _, e := range entries {
		for _, b := range bookies {
			d.add(b, e, "ok")
		}
	}
}

func (d *smDriver) pending() string {
	var s []string
	for _, op := range d.ops {
		s = append(s, fmt.Sprintf("%s/%s/%d#%d", op.Kind, op.Bookie, op.Entry, op.Attempt))
	}
	return strings.Join(s, " ")
}

func (d *smDriver) has(kind, bookie string, entry int64) bool {
	return slices.ContainsFunc(d.ops, func(op ledger.RecoveryOp) bool {
		return op.Kind == kind && op.Bookie == bookie && op.Entry == entry
	})
}

func (d *smDriver) wantDone(last int64) {
	d.t.Helper()
	if !d.r.Done() {
		d.t.Fatalf("not done; pending: %s", d.pending())
	}
	got, _, _, err := d.r.Result()
	if err != nil || got != last {
		d.t.Fatalf("result last=%d err=%v, want last=%d", got, err, last)
	}
}

func (d *smDriver) wantNotDone() {
	d.t.Helper()
	if d.r.Done() {
		got, _, _, err := d.r.Result()
		d.t.Fatalf("done too early: last=%d err=%v", got, err)
	}
}

func TestRecoveryMachine(t *testing.T) {
	b0, b1, b2, b3 := wtAddr(0), wtAddr(1), wtAddr(2), wtAddr(3)

	t.Run("reads only once every write set is fenced, from max LAC+1", func(t *testing.T) {
		d := newSMDriver(t, 3, 3, 2, smFrag(0, 3))
		d.fence(b0, 4, nil)
		d.fence(b1, 0, errors.New("lost")) // retried, never "fenced"
		if !d.has("fence", b1, 0) || d.has("read", b0, 5) {
			t.Fatalf("after one fence and one lost fence: %s", d.pending())
		}
		d.fence(b2, 2, nil)
		for _, b := range []string{b0, b1, b2} {
			if !d.has("read", b, 5) || d.has("read", b, 4) {
				t.Fatalf("reads should start at max LAC+1 = 5 on every member: %s", d.pending())
			}
		}
	})
	t.Run("striped coverage needs Qw-Qa+1 per write set", func(t *testing.T) {
		d := newSMDriver(t, 4, 2, 2, smFrag(0, 4)) // write sets {0,1} {1,2} {2,3} {3,0}
		d.fence(b0, -1, nil)
		d.fence(b1, -1, nil)
		if d.has("read", b0, 0) {
			t.Fatal("write set {2,3} is not fenced yet")
		}
		d.fence(b3, -1, nil)
		if !d.has("read", b0, 0) || !d.has("read", b1, 0) {
			t.Fatalf("covered, reads expected: %s", d.pending())
		}
	})
	t.Run("errors are not absent", func(t *testing.T) {
		d := newSMDriver(t, 3, 3, 2, smFrag(0, 3))
		d.fence(b0, -1, nil)
		d.fence(b1, -1, nil)
		d.read(b0, 0, "no")
		d.read(b1, 0, "err")
		d.read(b1, 0, "err") // the retry fails too
		d.wantNotDone()
		d.read(b2, 0, "no") // second explicit negative
		d.wantDone(-1)
	})
	t.Run("a positive answer first makes it present", func(t *testing.T) {
		d := newSMDriver(t, 3, 3, 2, smFrag(0, 3))
		d.fence(b0, -1, nil)
		d.fence(b1, -1, nil)
		d.read(b2, 0, "ok")
		d.read(b0, 0, "no") // late: ignored
		d.read(b1, 0, "no")
		d.read(b0, 1, "no")
		d.read(b1, 1, "no")
		d.wantNotDone() // entry 0 is not rewritten yet
		d.add(b0, 0, "ok")
		d.add(b1, 0, "err") // retried
		d.wantNotDone()
		d.add(b2, 0, "ok")
		d.wantDone(0)
	})
	t.Run("negatives first make it absent; read-ahead beyond is ignored", func(t *testing.T) {
		d := newSMDriver(t, 3, 3, 2, smFrag(0, 3))
		d.fenceHolding(b0, -1, 1)
		d.fence(b1, -1, nil)
		d.read(b0, 1, "ok") // entry 1 present, but entry 0 decides first
		d.read(b0, 0, "no")
		d.read(b1, 0, "no")
		d.wantDone(-1)
		d.read(b2, 0, "ok") // too late
		d.wantDone(-1)
	})
	t.Run("reads run ahead only to one past the entries the fenced hold (R8)", func(t *testing.T) {
		d := newSMDriver(t, 3, 3, 2, smFrag(0, 3))
		d.fenceHolding(b0, -1, 0)
		d.fenceHolding(b1, -1, 0)
		for _, b := range []string{b0, b1, b2} {
			if !d.has("read", b, 0) || !d.has("read", b, 1) || d.has("read", b, 2) {
				t.Fatalf("want reads of entries 0 and 1 only: %s", d.pending())
			}
		}
		d.read(b0, 0, "ok")
		// Entry 1 is found although no fenced member reported it: taken
		// as usual, and the next entry is read, one at a time.
		d.read(b2, 1, "ok")
		if !d.has("read", b0, 2) || d.has("read", b0, 3) {
			t.Fatalf("want a read of entry 2 only beyond the held entries: %s", d.pending())
		}
		d.read(b0, 2, "no")
		d.read(b1, 2, "no")
		d.addsOK([]int64{0, 1}, b0, b1)
		d.wantDone(1)
	})
	t.Run("complete fences decide the entry past the end without reads (R9)", func(t *testing.T) {
		d := newSMDriver(t, 3, 3, 2, smFrag(0, 3))
		d.fenceComplete(b0, -1, 0)
		d.fenceComplete(b1, -1, 0)
		for _, b := range []string{b0, b1, b2} {
			if !d.has("read", b, 0) || d.has("read", b, 1) {
				t.Fatalf("want reads of entry 0 only: %s", d.pending())
			}
		}
		d.read(b1, 0, "ok")
		d.wantNotDone() // entry 0 is not rewritten yet
		d.add(b0, 0, "ok")
		d.add(b1, 0, "ok")
		d.wantDone(0)
	})
	t.Run("a fence that is not complete is no negative (R9)", func(t *testing.T) {
		d := newSMDriver(t, 3, 3, 2, smFrag(0, 3))
		d.fenceComplete(b0, -1, 0)
		d.fenceHolding(b1, -1, 0) // in limbo: it may have lost entry 1
		// Entry 1 has one negative (b0): it is read from the other two.
		if d.has("read", b0, 1) || !d.has("read", b1, 1) || !d.has("read", b2, 1) {
			t.Fatalf("want entry 1 read from b1 and b2 only: %s", d.pending())
		}
		d.read(b0, 0, "ok")
		d.read(b1, 1, "ok") // it had it after all
		// Entry 2: b0's fence is one negative, b1's read the second.
		if d.has("read", b0, 2) {
			t.Fatalf("entry 2 read from b0, whose complete fence said absent: %s", d.pending())
		}
		d.read(b1, 2, "no")
		d.addsOK([]int64{0, 1}, b0, b1)
		d.wantDone(1)
	})
	t.Run("Qa=1 needs every member to say absent", func(t *testing.T) {
		d := newSMDriver(t, 3, 3, 1, smFrag(0, 3))
		for _, b := range []string{b0, b1, b2} {
			d.fence(b, -1, nil)
		}
		d.read(b0, 0, "no")
		d.read(b1, 0, "no")
		d.wantNotDone()
		d.read(b2, 0, "no")
		d.wantDone(-1)
	})
	t.Run("a LAC counts only up to the entries its bookie holds (R4)", func(t *testing.T) {
		for _, tc := range []struct {
			name      string
			lac, last [3]int64 // per bookie
			start     int64
		}{
			{"honest", [3]int64{4, 3, 4}, [3]int64{5, 5, 4}, 5},
			{"one inflated explicit LAC", [3]int64{1_000_000_000, 3, 4}, [3]int64{5, 5, 5}, 6},
			{"inflated on a bookie holding nothing", [3]int64{1 << 40, -1, -1}, [3]int64{-1, -1, -1}, 0},
			{"a lagging bookie lowers nothing", [3]int64{7, 2, 7}, [3]int64{8, 3, 8}, 8},
		} {
			t.Run(tc.name, func(t *testing.T) {
				d := newSMDriver(t, 3, 3, 2, smFrag(0, 3))
				for i, b := range []string{b0, b1, b2} {
					d.fenceHolding(b, tc.lac[i], tc.last[i])
				}
				if !d.has("read", b0, tc.start) || d.has("read", b0, tc.start-1) {
					t.Fatalf("reads should start at %d: %s", tc.start, d.pending())
				}
			})
		}
	})
	t.Run("a conflicting copy stops recovery (R7)", func(t *testing.T) {
		d := newSMDriver(t, 3, 3, 2, smFrag(0, 3))
		d.fence(b0, -1, nil)
		d.fence(b1, -1, nil)
		d.read(b0, 0, "ok")
		d.add(b0, 0, "ok")
		d.add(b1, 0, "conflict")
		if !d.r.Done() {
			t.Fatalf("not done after a conflict; pending: %s", d.pending())
		}
		if _, _, _, err := d.r.Result(); !errors.Is(err, ledger.ErrEntryConflict) || !strings.Contains(err.Error(), b1) {
			t.Fatalf("result error %v, want ErrEntryConflict naming %s", err, b1)
		}
		if d.has("recovery-add", b1, 0) {
			t.Fatalf("a conflict is not retried: %s", d.pending())
		}
	})
	t.Run("starts at the last fragment", func(t *testing.T) {
		d := newSMDriver(t, 3, 3, 2, smFrag(0, 3), &ledgerpb.Fragment{FirstEntryId: 10, Bookies: []string{b0, b3, b2}})
		d.fence(b3, -1, nil) // the replacement knows no LAC
		d.fence(b2, -1, nil)
		if !d.has("read", b3, 10) || d.has("read", b3, 0) {
			t.Fatalf("reads should start at the last fragment's first entry: %s", d.pending())
		}
		d.read(b3, 10, "no")
		d.read(b2, 10, "no")
		d.wantDone(9)
	})
}

// TestRecoveryMachineDistrust: R10. A fenced bookie's LAC that names an
// entry no member holds is dropped once a probe decides that entry absent:
// reading starts after the highest LAC left, the entries in between are
// rewritten but not counted (the driver did) and never decided absent,
// and recovery adds carry the LAC left.
func TestRecoveryMachineDistrust(t *testing.T) {
	b0, b1, b2 := wtAddr(0), wtAddr(1), wtAddr(2)
	held := func(t *testing.T, frags ...*ledgerpb.Fragment) *smDriver {
		t.Helper()
		if len(frags) == 0 {
			frags = []*ledgerpb.Fragment{smFrag(0, 3)}
		}
		d := newSMDriver(t, 3, 3, 2, frags...)
		d.hold = true
		return d
	}
	probe := func(d *smDriver, e int64) {
		d.t.Helper()
		d.ops = append(d.ops, d.r.Probe(e)...)
	}
	wantProbed := func(d *smDriver, e int64, decided, found bool) {
		d.t.Helper()
		if gotDecided, gotFound := d.r.Probed(e); gotDecided != decided || gotFound != found {
			d.t.Fatalf("probe of %d: decided=%v found=%v, want %v %v; pending: %s", e, gotDecided, gotFound, decided, found, d.pending())
		}
	}

	t.Run("the machine waits for proceed after fencing", func(t *testing.T) {
		d := held(t)
		d.fenceHolding(b0, 20, 21)
		d.fenceHolding(b1, 4, 5)
		if !d.r.FencingDone() || len(d.ops) != 1 || d.ops[0].Kind != "fence" {
			t.Fatalf("want fencing done and only b2's fence pending: %s", d.pending())
		}
		if got := d.r.ReadStart(); got != 21 {
			t.Fatalf("read start %d, want 21 (max LAC + 1)", got)
		}
	})
	t.Run("a probe is decided like any entry (R3, R9)", func(t *testing.T) {
		for _, tc := range []struct {
			name            string
			answers         map[string]string // bookie: ok, no, err
			decided, found  bool
			completeFenceB1 bool
		}{
			{"two negatives: absent", map[string]string{b0: "no", b1: "no"}, true, false, false},
			{"one positive: found", map[string]string{b0: "no", b2: "ok"}, true, true, false},
			{"errors are not absent", map[string]string{b0: "no", b1: "err", b2: "err"}, false, false, false},
			{"a complete fence is a negative", map[string]string{b0: "no"}, true, false, true},
		} {
			t.Run(tc.name, func(t *testing.T) {
				d := held(t)
				d.fenceHolding(b0, 20, 21)
				if tc.completeFenceB1 {
					d.fenceComplete(b1, 4, 5)
				} else {
					d.fenceHolding(b1, 4, 5)
				}
				probe(d, 6)
				if tc.completeFenceB1 && d.has("read", b1, 6) {
					t.Fatalf("entry 6 read from b1, whose complete fence said absent: %s", d.pending())
				}
				for _, b := range []string{b0, b1, b2} {
					if a, ok := tc.answers[b]; ok {
						d.read(b, 6, a)
					}
				}
				wantProbed(d, 6, tc.decided, tc.found)
				if d.has("read", b0, 7) || d.has("recovery-add", b0, 6) {
					t.Fatalf("a probe reads nothing else and rewrites nothing: %s", d.pending())
				}
			})
		}
	})
	t.Run("a false LAC is dropped; the entries below the absent one are rewritten, not counted", func(t *testing.T) {
		d := held(t)
		d.fenceHolding(b0, 20, 21) // forged: entries 20 and 21 only, far past the writer's
		d.fenceHolding(b1, 4, 5)
		probe(d, 6)
		d.read(b0, 6, "no")
		d.read(b1, 6, "no")
		wantProbed(d, 6, true, false)
		if dropped := d.r.Distrust(6); len(dropped) != 1 || dropped[b0] != 20 {
			t.Fatalf("dropped %v, want b0's LAC 20", dropped)
		}
		if got := d.r.ReadStart(); got != 5 {
			t.Fatalf("read start %d after dropping b0's LAC, want 5", got)
		}
		d.proceed()
		if !d.has("read", b0, 5) || !d.has("read", b0, 6) || d.has("read", b0, 4) {
			t.Fatalf("want reads of entries 5 and 6: %s", d.pending())
		}
		// Entry 5 is known present: negatives are asked again, not counted.
		d.read(b0, 5, "no")
		d.read(b2, 5, "no")
		if !d.has("read", b0, 5) || !d.has("read", b2, 5) {
			t.Fatalf("a known entry's negatives are asked again: %s", d.pending())
		}
		d.wantNotDone()
		d.read(b1, 5, "ok")
		for _, op := range d.ops {
			if op.Kind == "recovery-add" && op.LAC != 4 {
				t.Fatalf("recovery add %+v carries LAC %d, want the LAC left, 4", op, op.LAC)
			}
		}
		d.read(b0, 6, "no")
		d.read(b1, 6, "no")
		d.addsOK([]int64{5}, b0, b2)
		d.wantDone(5)
		if _, start, length, _ := d.r.Result(); start != 6 || length != 0 {
			t.Fatalf("counted from %d, %d bytes; want from 6 (the driver counted 0..5), 0 bytes", start, length)
		}
	})
	t.Run("an entry found past the probed one is taken", func(t *testing.T) {
		d := held(t)
		d.fenceHolding(b0, 20, 21)
		d.fenceHolding(b1, 4, 5)
		probe(d, 6)
		d.read(b0, 6, "no")
		d.read(b1, 6, "no")
		d.r.Distrust(6)
		d.proceed()
		d.read(b1, 5, "ok")
		d.read(b2, 6, "ok") // the old writer's add reached the unfenced b2 meanwhile
		d.read(b0, 7, "no")
		d.read(b1, 7, "no")
		d.addsOK([]int64{5, 6}, b0, b1)
		d.wantDone(6)
		if _, start, length, _ := d.r.Result(); start != 6 || length != int64(len("p6")) {
			t.Fatalf("counted from %d, %d bytes; want entry 6 only", start, length)
		}
	})
	t.Run("every LAC false: reading starts at the last fragment", func(t *testing.T) {
		d := held(t, smFrag(0, 3), &ledgerpb.Fragment{FirstEntryId: 10, Bookies: []string{b0, b1, b2}})
		d.fenceHolding(b0, 30, 31)
		d.fenceHolding(b1, 31, 31)
		if got := d.r.ReadStart(); got != 32 {
			t.Fatalf("read start %d, want 32", got)
		}
		probe(d, 12)
		d.read(b1, 12, "no")
		d.read(b2, 12, "no")
		if dropped := d.r.Distrust(12); len(dropped) != 2 {
			t.Fatalf("dropped %v, want both LACs", dropped)
		}
		if got := d.r.ReadStart(); got != 10 {
			t.Fatalf("read start %d, want the last fragment's first entry 10", got)
		}
		d.proceed()
		d.read(b0, 10, "ok")
		d.read(b0, 11, "ok")
		d.read(b0, 12, "no")
		d.read(b1, 12, "no")
		for _, op := range d.ops {
			if op.Kind == "recovery-add" && op.LAC != 9 {
				t.Fatalf("recovery add %+v carries LAC %d, want 9", op, op.LAC)
			}
		}
		d.addsOK([]int64{10, 11}, b1, b2)
		d.wantDone(11)
	})
}
