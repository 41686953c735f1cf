package partlog

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/strata-log/strata/proto/brokerpb"
)

// markGarbage is an edit that queues one garbage object named key.
func markGarbage(key string) func(Snapshot) (*brokerpb.PartitionLog, error) {
	return func(s Snapshot) (*brokerpb.PartitionLog, error) {
		next := s.Edit()
		next.Garbage = append(next.Garbage, &brokerpb.GarbageObject{ObjectKey: key})
		return next, nil
	}
}

// P11, P12: a swap from a snapshot the list moved past (a roll came
// first) writes nothing and says so (ErrListMoved), leaving the log
// healthy; one from the current snapshot is one CAS; neither modifies a
// snapshot taken before.
func TestSwapOnlyFromTheCurrentList(t *testing.T) {
	f := NewFixture(t)
	cfg := f.Config(1)
	cfg.SegmentAge = time.Minute
	l := f.Open(cfg)
	AppendN(t, l, 2)
	old := l.Snapshot()
	kept := proto.Clone(old.List)
	RollByAge(t, f, l) // the list moves
	next, _ := markGarbage("a")(old)
	if sent, err := l.Swap(Ctx(t), old, next); !errors.Is(err, ErrListMoved) || sent || l.Err() != nil {
		t.Fatalf("swap from a moved list: sent %v, %v (log: %v), want ErrListMoved", sent, err, l.Err())
	}
	if got := l.Describe(); len(got.Garbage) != 0 || !got.Segments[len(got.Segments)-1].Closed {
		t.Fatalf("a refused swap changed the list: %v", got)
	}
	cur := l.Snapshot()
	next, _ = markGarbage("b")(cur)
	if sent, err := l.Swap(Ctx(t), cur, next); err != nil || !sent {
		t.Fatalf("swap from the current list: sent %v, %v", sent, err)
	}
	stored, version, err := ReadPartitionLog(Ctx(t), f.Store, cfg.Topic, cfg.Partition)
	if err != nil || version != cur.Version+1 || len(stored.Garbage) != 1 || stored.Garbage[0].ObjectKey != "b" {
		t.Fatalf("stored after the swap: %v at version %d (snapshot at %d), %v", stored, version, cur.Version, err)
	}
	if !proto.Equal(old.List, kept) || len(cur.List.Garbage) != 0 {
		t.Fatal("a roll or a swap modified a snapshot's list")
	}
}

// P12: Update holds the list still from its snapshot to its swap, so on a
// partition that rolls at every append its change is still made, decided
// over the list it replaces, and the rolls are kept. (Passes retrying on
// a moved list once gave up after a few moves and reported success
// without writing: a tiering commit was lost that way.) An edit with
// nothing to change writes nothing.
func TestUpdateOnARollingPartition(t *testing.T) {
	f := NewFixture(t)
	cfg := f.Config(1)
	cfg.SegmentBytes = 1 << 14 // every batch below rolls the one before
	l := f.Open(cfg)
	stop := make(chan struct{})
	appended := make(chan int)
	go func() {
		n := 0
		defer func() { appended <- n }()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := l.Append(Ctx(t), Batch(t, 1, string(make([]byte, 10<<10))), AcksQuorum); err != nil {
				t.Errorf("append %d: %v", i, err)
				return
			}
			n++
		}
	}()
	const updates = 40
	for i := range updates {
		key := fmt.Sprint("u", i)
		sent, err := Update(Ctx(t), l, func(s Snapshot) (*brokerpb.PartitionLog, error) {
			if v := l.Snapshot().Version; v != s.Version {
				t.Errorf("the list moved under an edit: %d -> %d", s.Version, v)
			}
			return markGarbage(key)(s)
		})
		if err != nil || !sent {
			t.Fatalf("update %d: sent %v, %v", i, sent, err)
		}
	}
	close(stop)
	rolled := <-appended
	stored, _, err := ReadPartitionLog(Ctx(t), f.Store, cfg.Topic, cfg.Partition)
	if err != nil || len(stored.Garbage) != updates {
		t.Fatalf("stored: %d of %d updates' changes, %v", len(stored.GetGarbage()), updates, err)
	}
	if len(stored.Segments) < rolled/2 {
		t.Fatalf("%d segments after %d appends that each rolled", len(stored.Segments), rolled)
	}
	before := l.Snapshot().Version
	sent, err := Update(Ctx(t), l, func(Snapshot) (*brokerpb.PartitionLog, error) { return nil, ErrNoChange })
	if err != nil || sent || l.Snapshot().Version != before {
		t.Fatalf("an edit with nothing to change: sent %v, %v, version %d -> %d", sent, err, before, l.Snapshot().Version)
	}
}

// P12 with P3: a swap whose CAS finds another owner's write fails the log
// with ErrConflict (sent: the CAS reached the store).
func TestSwapLostCASFailsTheLog(t *testing.T) {
	f := NewFixture(t)
	cfg := f.Config(1)
	l := f.Open(cfg)
	AppendN(t, l, 1)
	snap := l.Snapshot()
	stored, version, err := ReadPartitionLog(Ctx(t), f.Store, cfg.Topic, cfg.Partition)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := casPartitionLog(Ctx(t), f.Store, cfg.Topic, cfg.Partition, stored, version); err != nil {
		t.Fatal(err) // another owner's write
	}
	next, _ := markGarbage("a")(snap)
	if sent, err := l.Swap(Ctx(t), snap, next); !errors.Is(err, ErrConflict) || !sent {
		t.Fatalf("swap after another owner wrote: sent %v, %v; want ErrConflict", sent, err)
	}
	select {
	case <-l.Failed():
	default:
		t.Fatal("the log did not fail on a lost CAS")
	}
}
