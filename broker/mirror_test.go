package broker

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/strata-log/strata/internal/testwait"
	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/proto/metadpb"
)

// testMirror is a mirror of assignments fed by the test, as sync feeds it
// from a listing and a watch.
type testMirror struct {
	*mirror
	rev int64
}

func newTestMirror() *testMirror {
	return &testMirror{mirror: newMirror(nil, assignmentsPrefix, slog.New(slog.DiscardHandler))}
}

func assignmentKV(t *testing.T, k tp, broker string, epoch int64) *metadpb.KeyValue {
	t.Helper()
	value, err := proto.Marshal(&brokerpb.Assignment{BrokerId: broker, Epoch: epoch})
	if err != nil {
		t.Fatal(err)
	}
	return &metadpb.KeyValue{Key: assignmentKey(k), Value: value}
}

func (m *testMirror) list(kvs ...*metadpb.KeyValue) {
	m.rev++
	m.mu.Lock()
	m.loadLocked(kvs, m.rev)
	m.mu.Unlock()
}

func (m *testMirror) put(kvs ...*metadpb.KeyValue) {
	var events []*metadpb.Event
	for _, kv := range kvs {
		m.rev++
		kv.ModRevision = m.rev
		events = append(events, &metadpb.Event{Type: metadpb.Event_PUT, Kv: kv})
	}
	m.mu.Lock()
	m.applyLocked(events, m.rev)
	m.mu.Unlock()
}

func (m *testMirror) del(keys ...string) {
	var events []*metadpb.Event
	for _, key := range keys {
		m.rev++
		events = append(events, &metadpb.Event{Type: metadpb.Event_DELETE, Kv: &metadpb.KeyValue{Key: key}})
	}
	m.mu.Lock()
	m.applyLocked(events, m.rev)
	m.mu.Unlock()
}

// A follower reads the keys changed since its cursor; a listing since, a
// cursor from before the journal's start, or the zero cursor read all.
func TestMirrorDelta(t *testing.T) {
	m := newTestMirror()
	a, b := tp{"t", 0}, tp{"t", 1}
	if _, _, all, _ := m.delta(mirrorCursor{}); !all {
		t.Fatal("the zero cursor before any listing: not all")
	}
	m.list(assignmentKV(t, a, "k1", 1))
	keys, cur, all, _ := m.delta(mirrorCursor{})
	if !all || keys != nil {
		t.Fatalf("zero cursor: %v, all=%v; want all", keys, all)
	}
	if keys, _, all, _ := m.delta(cur); all || len(keys) != 0 {
		t.Fatalf("nothing changed: %v, all=%v", keys, all)
	}
	m.put(assignmentKV(t, b, "k1", 1))
	m.put(assignmentKV(t, a, "k2", 2))
	m.del(assignmentKey(b))
	keys, next, all, _ := m.delta(cur)
	if want := []string{assignmentKey(b), assignmentKey(a), assignmentKey(b)}; all || !slices.Equal(keys, want) {
		t.Fatalf("delta: %v, all=%v; want %v", keys, all, want)
	}
	m.list(assignmentKV(t, a, "k2", 2))
	if _, _, all, _ := m.delta(next); !all {
		t.Fatal("a cursor of the previous listing: not all")
	}

	// The journal keeps maxMirrorJournal keys: a follower further behind
	// reads all, one that kept up reads its changes.
	_, behind, _, _ := m.delta(mirrorCursor{})
	for i := range maxMirrorJournal {
		m.put(assignmentKV(t, tp{"u", int32(i)}, "k1", 1))
	}
	_, caughtUp, _, _ := m.delta(mirrorCursor{})
	m.put(assignmentKV(t, tp{"u", 0}, "k2", 2))
	if _, _, all, _ := m.delta(behind); !all {
		t.Fatalf("a cursor %d changes behind: not all", maxMirrorJournal+1)
	}
	if keys, _, all, _ := m.delta(caughtUp); all || !slices.Equal(keys, []string{assignmentKey(tp{"u", 0})}) {
		t.Fatalf("a cursor that kept up: %v, all=%v", keys, all)
	}
	if n := len(m.journal); n > maxMirrorJournal {
		t.Fatalf("journal holds %d keys, more than %d", n, maxMirrorJournal)
	}
}

// A partitionMap of the assignments naming a broker stays what a full
// decode of the mirror gives, through puts, moves, deletes, a listing and
// a forced full read; an update touches the partitions that changed, not
// all.
func TestPartitionMapFollowsChanges(t *testing.T) {
	m := newTestMirror()
	mine := newPartitionMap(assignmentsPrefix, assignedHere("k1"))
	var kvs []*metadpb.KeyValue
	for p := range int32(6) {
		kvs = append(kvs, assignmentKV(t, tp{"t", p}, []string{"k1", "k2"}[p%2], 1))
	}
	m.list(kvs...)
	check := func(step string, wantTouched []tp, wantFull bool, touched map[tp]bool, full bool) {
		t.Helper()
		want := map[tp]int64{}
		for _, kv := range m.kvs {
			k, err := parseTP(strings.TrimPrefix(kv.Key, assignmentsPrefix))
			var a brokerpb.Assignment
			if err == nil && proto.Unmarshal(kv.Value, &a) == nil && a.BrokerId == "k1" {
				want[k] = a.Epoch
			}
		}
		if !maps.Equal(mine.vals, want) {
			t.Fatalf("%s: vals %v, want %v", step, mine.vals, want)
		}
		if full != wantFull {
			t.Fatalf("%s: full %v, want %v", step, full, wantFull)
		}
		got := slices.SortedFunc(maps.Keys(touched), compareTP)
		if wantTouched == nil { // a full read: every partition held
			wantTouched = slices.Collect(maps.Keys(want))
		}
		slices.SortFunc(wantTouched, compareTP)
		if !slices.Equal(got, wantTouched) {
			t.Fatalf("%s: touched %v, want %v", step, got, wantTouched)
		}
	}
	touched, full, _ := mine.update(m.mirror, false)
	check("first update", nil, true, touched, full)

	touched, full, _ = mine.update(m.mirror, false)
	check("nothing changed", []tp{}, false, touched, full)

	m.put(assignmentKV(t, tp{"t", 1}, "k1", 2))   // moved here
	m.put(assignmentKV(t, tp{"t", 0}, "k2", 2))   // moved away
	m.put(assignmentKV(t, tp{"t", 2}, "k1", 3))   // here at a new epoch
	m.put(assignmentKV(t, tp{"new", 0}, "k1", 1)) // created here
	m.put(&metadpb.KeyValue{Key: assignmentsPrefix + "no-partition", Value: []byte("x")})
	m.del(assignmentKey(tp{"t", 4}))
	touched, full, _ = mine.update(m.mirror, false)
	check("changes", []tp{{"t", 0}, {"t", 1}, {"t", 2}, {"t", 4}, {"new", 0}}, false, touched, full)

	m.list(assignmentKV(t, tp{"t", 5}, "k1", 9))
	touched, full, _ = mine.update(m.mirror, false)
	check("a listing", nil, true, touched, full)

	m.put(assignmentKV(t, tp{"t", 3}, "k1", 4))
	touched, full, _ = mine.update(m.mirror, true)
	check("a forced full read", nil, true, touched, full)
	for i := range 3 {
		m.put(assignmentKV(t, tp{"t", int32(i)}, fmt.Sprint("k", 1+i%2), 5))
	}
	touched, full, _ = mine.update(m.mirror, false)
	check("after the full read", []tp{{"t", 0}, {"t", 1}, {"t", 2}}, false, touched, full)
}

// await returns once the mirror holds a revision: at once for one it
// holds, when the watch delivers a later one, and when ctx ends for one
// that never comes.
func TestMirrorAwait(t *testing.T) {
	m := newTestMirror()
	k := tp{"t", 0}
	m.put(assignmentKV(t, k, "b1", 1))
	m.await(t.Context(), m.rev) // held: returns at once
	done := make(chan struct{})
	next := m.rev + 1
	go func() {
		defer close(done)
		m.await(t.Context(), next)
	}()
	select {
	case <-done:
		t.Fatal("await returned before the mirror held the revision")
	default:
	}
	m.put(assignmentKV(t, k, "b2", 2))
	testwait.Recv(t, 10*time.Second, "await after the watch delivered the revision", done)
	if got := m.get(assignmentKey(k)); got == nil || got.ModRevision != m.rev {
		t.Fatalf("after await the mirror holds %v", got)
	}
	ctx, cancel := context.WithCancel(t.Context())
	ended := make(chan struct{})
	never := m.rev + 10
	go func() {
		defer close(ended)
		m.await(ctx, never)
	}()
	cancel()
	testwait.Recv(t, 10*time.Second, "await when its context ends", ended)
}
