package kv

import (
	"fmt"
	"sync"
	"testing"

	"github.com/strata-log/strata/proto/metadpb"
	"google.golang.org/protobuf/proto"
)

// populate gives a store keys with and without leases, deleted keys,
// members and a compacted history.
func populate(a *applier) {
	a.must(grant(7, 1000))
	a.must(grant(0, 2000)) // id 2
	for i := range 20 {
		a.must(ops(put(fmt.Sprintf("k/%02d", i%7), fmt.Sprint(i)), putL(fmt.Sprintf("l/%d", i%3), "x", 7)))
	}
	a.must(ops(putL("l2/a", "y", 2), del("k/03"), delPrefix("k/05")))
	a.must(member("n1", "c1", "a1"))
	a.must(member("n0", "c0", ""))
}

func TestSnapshotRestoreRoundTrip(t *testing.T) {
	a := newApplier(t, Options{HistoryRevisions: 8})
	populate(a)
	snap := a.s.Snapshot()
	if snap.CompactRevision == 0 || len(snap.History) != 8 || len(snap.Leases) != 2 || len(snap.Members) != 2 {
		t.Fatalf("populate did not exercise everything: %v", snap)
	}

	b := &applier{t: t, s: New(Options{HistoryRevisions: 8}), index: a.index}
	b.s.Restore(snap, a.index)
	if !proto.Equal(snap, b.s.Snapshot()) {
		t.Fatalf("restored snapshot differs:\n%v\n%v", snap, b.s.Snapshot())
	}
	if b.s.AppliedIndex() != a.index || b.s.Revision() != a.s.Revision() ||
		b.s.CompactRevision() != a.s.CompactRevision() || b.s.KeyCount() != a.s.KeyCount() {
		t.Fatal("restored store reports different counters")
	}
	checkInvariants(t, b.s)

	// The snapshot is a deep copy: scribbling on it changes neither store.
	before := b.s.Snapshot()
	snap.Kvs[0].Value[0] = '!'
	snap.Kvs[0].Version = 99
	snap.History[0].Events[0].Kv.Key = "scribbled"
	snap.Members[0].ClientAddress = "scribbled"
	if !proto.Equal(before, a.s.Snapshot()) || !proto.Equal(before, b.s.Snapshot()) {
		t.Fatal("changing a snapshot changed a store")
	}

	// Both stores answer further commands identically, including leases
	// whose keys were derived from the kvs, and the history.
	more := []*metadpb.Command{
		revoke(7),
		ops(put("k/00", "new"), delPrefix("k/")),
		grant(0, 10), // id is the log index: must match on both
		ops(putL("z", "1", 2)),
		revoke(2),
		txn(cmps("l2/a", 1), put("l2/a", "x")),
		member("n1", "", ""),
	}
	for i, cmd := range more {
		ra, ea := a.apply(cmd)
		rb, eb := b.apply(cmd)
		if (ea == nil) != (eb == nil) || (ra == nil) != (rb == nil) || (ra != nil && !proto.Equal(ra, rb)) {
			t.Fatalf("command %d: original %v, %v; restored %v, %v", i, ra, ea, rb, eb)
		}
		ha, _, erra := a.s.Events("", a.s.CompactRevision()+1, 0)
		hb, _, errb := b.s.Events("", b.s.CompactRevision()+1, 0)
		if erra != nil || errb != nil || dumpEvents(ha) != dumpEvents(hb) {
			t.Fatalf("command %d: histories differ:\n%s\n%s", i, dumpEvents(ha), dumpEvents(hb))
		}
	}
	if !proto.Equal(a.s.Snapshot(), b.s.Snapshot()) {
		t.Fatal("stores diverged after the same commands")
	}
	checkInvariants(t, b.s)
}

func TestRestoreReplacesEverything(t *testing.T) {
	a := newApplier(t, Options{})
	populate(a)
	changed := a.s.Changed()
	a.s.Restore(nil, 500)
	select {
	case <-changed:
	default:
		t.Fatal("Restore did not fire Changed")
	}
	if !proto.Equal(a.s.Snapshot(), &metadpb.Snapshot{}) || a.s.AppliedIndex() != 500 {
		t.Fatalf("Restore(nil) left %v at index %d", a.s.Snapshot(), a.s.AppliedIndex())
	}
	if len(a.s.Leases()) != 0 || len(a.s.Members()) != 0 || a.s.KeyCount() != 0 {
		t.Fatal("Restore(nil) left leases, members or keys")
	}
	checkInvariants(t, a.s)
}

// TestRestoreTrimsHistory restores a snapshot into a store that keeps less
// history, and one whose history does not reach back to its compact
// revision; Events must never skip a revision silently.
func TestRestoreTrimsHistory(t *testing.T) {
	a := newApplier(t, Options{})
	for i := range 10 {
		a.must(ops(put("k", fmt.Sprint(i))))
	}
	small := New(Options{HistoryRevisions: 4})
	small.Restore(a.s.Snapshot(), a.index)
	if got := small.CompactRevision(); got != 6 {
		t.Fatalf("compact revision %d, want 6", got)
	}
	checkInvariants(t, small)

	snap := a.s.Snapshot()
	snap.History = snap.History[5:] // revisions 6..10, compact still 0
	gappy := New(Options{})
	gappy.Restore(snap, a.index)
	if got := gappy.CompactRevision(); got != 5 {
		t.Fatalf("compact revision %d, want 5", got)
	}
	checkInvariants(t, gappy)

	snap.History = nil
	empty := New(Options{})
	empty.Restore(snap, a.index)
	if got := empty.CompactRevision(); got != 10 {
		t.Fatalf("compact revision %d, want 10", got)
	}
	checkInvariants(t, empty)
}

func TestChanged(t *testing.T) {
	a := newApplier(t, Options{})
	tests := []struct {
		name string
		cmd  *metadpb.Command
		want bool
	}{
		{"put", ops(put("a", "1")), true},
		{"txn that changes nothing", ops(del("absent")), false},
		{"empty txn", ops(), false},
		{"failed compare", txn(cmps("a", 9), put("a", "2")), false},
		{"invalid", ops(put("", "1")), false},
		{"lease grant", grant(5, 100), true},
		{"lease revoke without keys", revoke(5), true},
		{"member", member("n", "c", "a"), true},
		{"same member again", member("n", "c", "a"), false},
		{"delete", ops(del("a")), true},
	}
	for _, tt := range tests {
		ch := a.s.Changed()
		a.apply(tt.cmd)
		select {
		case <-ch:
			if !tt.want {
				t.Errorf("%s: Changed fired", tt.name)
			}
		default:
			if tt.want {
				t.Errorf("%s: Changed did not fire", tt.name)
			}
		}
		if next := a.s.Changed(); tt.want && next == ch {
			t.Errorf("%s: Changed returned the fired channel", tt.name)
		}
	}
}

// TestConcurrentReaders runs readers and watchers against the apply loop;
// under -race it checks the locking, and each watcher checks it sees every
// revision exactly once, in order.
func TestConcurrentReaders(t *testing.T) {
	const revisions = 400
	a := newApplier(t, Options{HistoryRevisions: revisions})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			next := int64(1)
			for next <= revisions {
				ch := a.s.Changed()
				resps, _, err := a.s.Events("", next, 7)
				if err != nil {
					t.Errorf("watcher %d: %v", w, err)
					return
				}
				for _, r := range resps {
					if r.Revision != next {
						t.Errorf("watcher %d: got revision %d, want %d", w, r.Revision, next)
						return
					}
					next++
				}
				if len(resps) == 0 {
					<-ch
				}
				a.s.Get("k/1")
				a.s.List("k/", "", 10, false)
				a.s.Snapshot()
				a.s.Leases()
				a.s.Members()
			}
		}()
	}
	for i := range revisions {
		a.must(ops(put(fmt.Sprintf("k/%d", i%50), "v")))
	}
	wg.Wait()
}
