package kv

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestWatchScript applies a scripted sequence and checks the watch history
// seen through different prefixes, starting points and page sizes against
// golden output.
func TestWatchScript(t *testing.T) {
	a := newApplier(t, Options{})
	a.must(grant(9, 1000))
	a.must(ops(put("t/a", "1"), put("u/a", "1")))             // rev 1
	a.must(ops(put("t/b", "1")))                              // rev 2
	a.must(ops(del("nothing")))                               // no revision
	a.must(txn(cmps("t/a", 7), put("t/a", "x")))              // fails: no revision
	a.must(ops(put("t/a", "2"), del("t/b"), put("u/b", "1"))) // rev 3
	a.must(member("n1", "c", "a"))                            // no revision
	a.must(ops(putL("t/c", "1", 9), putL("u/c", "1", 9)))     // rev 4
	a.must(ops(put("u/a", "2")))                              // rev 5
	a.must(revoke(9))                                         // rev 6
	a.must(ops(delPrefix("t/")))                              // rev 7

	tests := []struct {
		prefix string
		from   int64
		max    int
		want   string
	}{
		{"", 1, 0, `
rev 1: PUT t/a=1 v1 PUT u/a=1 v1
rev 2: PUT t/b=1 v1
rev 3: PUT t/a=2 v2 DELETE t/b PUT u/b=1 v1
rev 4: PUT t/c=1 v1 PUT u/c=1 v1
rev 5: PUT u/a=2 v2
rev 6: DELETE t/c DELETE u/c
rev 7: DELETE t/a
`},
		{"t/", 1, 0, `
rev 1: PUT t/a=1 v1
rev 2: PUT t/b=1 v1
rev 3: PUT t/a=2 v2 DELETE t/b
rev 4: PUT t/c=1 v1
rev 6: DELETE t/c
rev 7: DELETE t/a
`},
		{"u/", 3, 0, `
rev 3: PUT u/b=1 v1
rev 4: PUT u/c=1 v1
rev 5: PUT u/a=2 v2
rev 6: DELETE u/c
`},
		{"u/a", 2, 0, `
rev 5: PUT u/a=2 v2
`},
		// maxRevisions counts responses, not revisions scanned.
		{"t/", 4, 2, `
rev 4: PUT t/c=1 v1
rev 6: DELETE t/c
`},
		{"", 2, 1, `
rev 2: PUT t/b=1 v1
`},
		{"", 7, 5, `
rev 7: DELETE t/a
`},
		{"", 8, 0, ``},
		{"", 100, 0, ``},
		{"v/", 1, 0, ``},
	}
	for _, tt := range tests {
		resps, current, err := a.s.Events(tt.prefix, tt.from, tt.max)
		if err != nil {
			t.Fatalf("Events(%q, %d, %d): %v", tt.prefix, tt.from, tt.max, err)
		}
		if current != 7 {
			t.Errorf("Events(%q, %d, %d): current %d, want 7", tt.prefix, tt.from, tt.max, current)
		}
		want := strings.TrimPrefix(tt.want, "\n")
		if got := dumpEvents(resps); got != want {
			t.Errorf("Events(%q, %d, %d):\n%swant:\n%s", tt.prefix, tt.from, tt.max, got, want)
		}
	}

	// A watcher that pages with maxRevisions 1 and resumes from
	// Revision+1 sees exactly what a single call sees.
	all, _, _ := a.s.Events("", 1, 0)
	var paged strings.Builder
	for from := int64(1); ; {
		resps, _, err := a.s.Events("", from, 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(resps) == 0 {
			break
		}
		paged.WriteString(dumpEvents(resps))
		from = resps[len(resps)-1].Revision + 1
	}
	if paged.String() != dumpEvents(all) {
		t.Errorf("paged watch:\n%s\nsingle call:\n%s", paged.String(), dumpEvents(all))
	}

	// Appending to a returned response must not reach the history.
	all[0].Events = append(all[0].Events, all[1].Events...)
	again, _, _ := a.s.Events("", 1, 1)
	if len(again[0].Events) != 2 {
		t.Fatalf("caller's append changed the history: %v", again[0])
	}
}

func TestEventsFreshStore(t *testing.T) {
	s := New(Options{})
	resps, current, err := s.Events("", 1, 0)
	if err != nil || len(resps) != 0 || current != 0 {
		t.Fatalf("Events on a fresh store = %v, %d, %v", resps, current, err)
	}
	_, _, err = s.Events("", 0, 0)
	var ce *CompactedError
	if !errors.As(err, &ce) || ce.CompactRevision != 0 {
		t.Fatalf("Events from 0 = %v, want CompactedError at 0", err)
	}
}

func TestHistoryCompaction(t *testing.T) {
	a := newApplier(t, Options{HistoryRevisions: 3})
	for i := 1; i <= 5; i++ {
		a.must(ops(put(fmt.Sprintf("k%d", i), "v")))
		// Ops that do not change anything take no history room.
		a.must(ops(del("absent")))
	}
	checkInvariants(t, a.s)
	if got := a.s.CompactRevision(); got != 2 {
		t.Fatalf("compact revision %d, want 2", got)
	}
	for _, from := range []int64{-1, 0, 1, 2} {
		_, current, err := a.s.Events("", from, 0)
		var ce *CompactedError
		if !errors.As(err, &ce) || ce.CompactRevision != 2 || !errors.Is(err, ErrCompacted) {
			t.Fatalf("Events from %d: %v, want *CompactedError{2}", from, err)
		}
		if current != 5 {
			t.Fatalf("Events from %d: current %d, want 5", from, current)
		}
		if !strings.Contains(err.Error(), "2") || !strings.HasPrefix(err.Error(), "metad: compacted") {
			t.Fatalf("error text %q", err)
		}
	}
	resps, _, err := a.s.Events("", 3, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := dumpEvents(resps), "rev 3: PUT k3=v v1\nrev 4: PUT k4=v v1\nrev 5: PUT k5=v v1\n"; got != want {
		t.Fatalf("events:\n%swant:\n%s", got, want)
	}

	// A whole lap of the ring later, compaction still tracks the oldest
	// dropped revision.
	for i := 6; i <= 12; i++ {
		a.must(ops(put("k", fmt.Sprint(i))))
	}
	if got := a.s.CompactRevision(); got != 9 {
		t.Fatalf("compact revision %d, want 9", got)
	}
	resps, _, _ = a.s.Events("", 10, 0)
	if got, want := dumpEvents(resps), "rev 10: PUT k=10 v5\nrev 11: PUT k=11 v6\nrev 12: PUT k=12 v7\n"; got != want {
		t.Fatalf("events:\n%swant:\n%s", got, want)
	}
	checkInvariants(t, a.s)
}

func TestOptions(t *testing.T) {
	if err := (Options{HistoryRevisions: -1}).Validate(); err == nil {
		t.Fatal("negative HistoryRevisions accepted")
	}
	if err := (Options{}).Validate(); err != nil {
		t.Fatal(err)
	}
	if s := New(Options{}); s.opts.HistoryRevisions != DefaultHistoryRevisions {
		t.Fatalf("default HistoryRevisions %d", s.opts.HistoryRevisions)
	}
	if got := (Options{HistoryRevisions: 5}).String(); !strings.Contains(got, "5") {
		t.Fatalf("String() = %q", got)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("New accepted invalid options")
		}
	}()
	New(Options{HistoryRevisions: -1})
}
