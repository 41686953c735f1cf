package ledgertest

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/proto/bookiepb"
	"github.com/strata-log/strata/proto/ledgerpb"
)

func TestManualScheduler(t *testing.T) {
	s := NewManualScheduler()
	var got []string
	s.AfterFunc(2*time.Second, func() { got = append(got, "2s") })
	stop := s.AfterFunc(time.Second, func() { got = append(got, "stopped") })
	s.AfterFunc(time.Second, func() {
		got = append(got, "1s")
		s.AfterFunc(0, func() { got = append(got, "1s+0") })
	})
	if !stop() || stop() {
		t.Fatal("stop should succeed once")
	}
	if n := s.Advance(1500 * time.Millisecond); n != 2 {
		t.Fatalf("ran %d, want 2", n)
	}
	s.Advance(time.Second)
	if want := []string{"1s", "1s+0", "2s"}; !slices.Equal(got, want) {
		t.Fatalf("ran %v, want %v", got, want)
	}
	if s.Pending() != 0 {
		t.Fatal("timers left")
	}
}

func TestFakeMetadataCompareAndSet(t *testing.T) {
	ctx := context.Background()
	m := NewFakeMetadata()
	md := &ledgerpb.LedgerMetadata{LastEntryId: -1}
	id, v, err := m.Create(ctx, md)
	if err != nil || id != 1 || md.Id != 1 || v != 1 {
		t.Fatalf("Create: %d %d %v", id, v, err)
	}
	if _, err := m.Update(ctx, md, 7); !errors.Is(err, ledger.ErrMetadataConflict) {
		t.Fatalf("stale update: %v", err)
	}
	m.LoseAnswers(1)
	md.LastEntryId = 3
	if _, err := m.Update(ctx, md, 1); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("lost answer: %v", err)
	}
	if got, v, _ := m.Get(ctx, id); got.LastEntryId != 3 || v != 2 {
		t.Fatalf("the update should have applied: %v v%d", got, v)
	}
	m.SetUnavailable(true)
	if _, _, err := m.Get(ctx, id); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("unavailable Get: %v", err)
	}
	m.SetUnavailable(false)
	if _, _, err := m.Get(ctx, 9); !errors.Is(err, ledger.ErrNoSuchLedger) {
		t.Fatalf("missing ledger: %v", err)
	}
}

func TestFakeBookies(t *testing.T) {
	ctx := context.Background()
	f := NewFakeBookies("a", "b")
	f.SetManual(true)
	var answers []string
	add := func(bookie string, entry uint64, recovery bool) {
		f.Add(bookie, &bookiepb.AddRequest{LedgerId: 1, EntryId: entry, Payload: []byte{byte(entry)}, Recovery: recovery},
			func(r *bookiepb.AddResponse, err error) {
				if err != nil {
					answers = append(answers, bookie+":err")
					return
				}
				answers = append(answers, bookie+":"+r.Status.String())
			})
	}
	add("a", 0, false)
	add("b", 0, false)
	add("a", 1, false)
	if n := len(f.InFlight()); n != 3 || len(answers) != 0 {
		t.Fatalf("manual mode: %d in flight, answers %v", n, answers)
	}
	f.Deliver(ToEntry("a", 0))
	if _, err := f.Fence(ctx, "a", 1); err != nil {
		t.Fatal(err)
	}
	f.Deliver(To("a"))    // entry 1 arrives after the fence
	add("a", 1, true)     // a recovery add is allowed
	f.Fail(To("b"), true) // stored, answer lost
	f.Deliver(nil)        // the recovery add
	if want := []string{"a:ADD_OK", "a:ADD_FENCED", "b:err", "a:ADD_OK"}; !slices.Equal(answers, want) {
		t.Fatalf("answers %v, want %v", answers, want)
	}
	if _, ok := f.Stored("b", 1, 0); !ok {
		t.Fatal("Fail(stored) did not store")
	}

	r, err := f.ReadEntry(ctx, "b", &bookiepb.ReadEntryRequest{LedgerId: 1, EntryId: 5, Fence: true})
	if err != nil || r.Status != bookiepb.ReadStatus_READ_NO_ENTRY || !f.Fenced("b", 1) {
		t.Fatalf("fencing read of a missing entry: %v %v fenced=%v", r, err, f.Fenced("b", 1))
	}
	f.Wipe("a")
	if got := f.StoredEntries("a", 1); len(got) != 0 || f.Fenced("a", 1) {
		t.Fatalf("wiped bookie still has %v", got)
	}
	add("a", 2, false)
	f.Crash("a")
	if want := "a:err"; answers[len(answers)-1] != want {
		t.Fatalf("crash should fail the add in flight: %v", answers)
	}
	if _, err := f.Fence(ctx, "a", 1); !errors.Is(err, ErrBookieDown) {
		t.Fatalf("Fence on a crashed bookie: %v", err)
	}
	f.Restart("a")
	f.Blackhole("a", RPCFence)
	cctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	if _, err := f.Fence(cctx, "a", 1); !errors.Is(err, context.DeadlineExceeded) || f.Fenced("a", 1) {
		t.Fatalf("blackholed Fence: %v, fenced=%v", err, f.Fenced("a", 1))
	}
}
