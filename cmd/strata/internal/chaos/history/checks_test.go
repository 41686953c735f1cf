package history

import (
	"strings"
	"testing"
)

var (
	a1 = acked("a", 1, 0)
	a2 = acked("a", 2, 1)
	a3 = acked("a", 3, 2)
	b1 = acked("b", 1, 3)
)

func TestLost(t *testing.T) {
	a4unknown, a4failed := unknown("a", 4), failed("a", 4)
	other := attemptOf("t", 1, "a", 1, OK, 0)
	cases := []checkCase{
		{name: "all in the final read", attempts: []Attempt{a1, a2, b1},
			reads: []Read{finalAcked(a1), finalAcked(a2), finalAcked(b1)}},
		{name: "read by a tail reader only", attempts: []Attempt{a1, a2},
			reads: []Read{finalAcked(a1), tail(a2, 1)}, want: 1},
		{name: "no final read at all", attempts: []Attempt{a1, a2, b1},
			reads: []Read{tail(a1, 0)}, want: 3},
		{name: "at a wrong offset is not lost", attempts: []Attempt{a1},
			reads: []Read{final(a1, 7)}},
		{name: "in another partition is lost", attempts: []Attempt{a1},
			reads: []Read{{Topic: "t", Partition: 1, Offset: 0, Key: []byte("a"), Value: a1.Value, Final: true}}, want: 1},
		{name: "with another key is lost", attempts: []Attempt{a2},
			reads: []Read{{Topic: "t", Partition: 0, Offset: 1, Key: []byte("x"), Value: a2.Value, Final: true}}, want: 1},
		{name: "failed and unknown may be absent", attempts: []Attempt{a1, a4unknown, failed("b", 1)},
			reads: []Read{finalAcked(a1)}},
		{name: "same key in two partitions", attempts: []Attempt{a1, other},
			reads: []Read{finalAcked(a1)}, want: 1},

		{name: "compacted: older values may be absent", compacted: []string{"t"},
			attempts: []Attempt{a1, a2, a3}, reads: []Read{finalAcked(a3)}},
		{name: "compacted: latest value absent, older present", compacted: []string{"t"},
			attempts: []Attempt{a1, a2, a3}, reads: []Read{finalAcked(a1), finalAcked(a2)}, want: 1},
		{name: "compacted: key absent", compacted: []string{"t"},
			attempts: []Attempt{a1, a2, b1}, reads: []Read{finalAcked(b1)}, want: 1},
		{name: "compacted: replaced by a later unknown", compacted: []string{"t"},
			attempts: []Attempt{a1, a2, a3, a4unknown}, reads: []Read{final(a4unknown, 3)}},
		{name: "compacted: a later failed value does not replace it", compacted: []string{"t"},
			attempts: []Attempt{a1, a2, a3, a4failed}, reads: []Read{final(a4failed, 3)}, want: 1},
		{name: "compacted: only a tail reader saw the latest", compacted: []string{"t"},
			attempts: []Attempt{a1, a2, a3}, reads: []Read{finalAcked(a2), tail(a3, 2)}, want: 1},
		{name: "compacted: latest read with another key", compacted: []string{"t"},
			attempts: []Attempt{a1, a2},
			reads: []Read{{Topic: "t", Partition: 0, Offset: 1, Key: []byte("x"), Value: a2.Value, Final: true},
				finalAcked(a1)},
			want: 1},
		{name: "compacted topic beside a plain one", compacted: []string{"c"},
			attempts: []Attempt{a1, a2, attemptOf("c", 0, "a", 1, OK, 0), attemptOf("c", 0, "a", 2, OK, 1)},
			reads:    []Read{finalAcked(a2), finalAcked(attemptOf("c", 0, "a", 2, OK, 1))}, want: 1},
	}
	runCheckCases(t, lost, cases)
}

func TestWrongOffsets(t *testing.T) {
	a4 := unknown("a", 4)
	cases := []checkCase{
		{name: "read where acknowledged", attempts: []Attempt{a1, a2},
			reads: []Read{finalAcked(a1), tail(a2, 1), finalAcked(a2)}},
		{name: "final read elsewhere", attempts: []Attempt{a1, a2},
			reads: []Read{finalAcked(a1), final(a2, 5)}, want: 1},
		{name: "tail read elsewhere", attempts: []Attempt{a1},
			reads: []Read{tail(a1, 3), finalAcked(a1)}, want: 1},
		{name: "counted once per record", attempts: []Attempt{a1, b1},
			reads: []Read{tail(a1, 3), final(a1, 4), readOf("m1", a1, 3), final(b1, 0)}, want: 2},
		{name: "unknown outcome has no offset to keep", attempts: []Attempt{a4},
			reads: []Read{final(a4, 17)}},
		{name: "in another partition is not this check's",
			attempts: []Attempt{a1},
			reads:    []Read{{Topic: "t", Partition: 3, Offset: 9, Key: []byte("a"), Value: a1.Value, Final: true}}},
	}
	runCheckCases(t, wrongOffsets, cases)
}

func TestDuplicates(t *testing.T) {
	a4 := unknown("a", 4)
	cases := []checkCase{
		{name: "one offset, many readers", attempts: []Attempt{a1},
			reads: []Read{tail(a1, 0), readOf("m1", a1, 0), finalAcked(a1), finalAcked(a1)}},
		{name: "two offsets in the final read", attempts: []Attempt{a1, a2},
			reads: []Read{finalAcked(a1), finalAcked(a2), final(a1, 2)}, want: 1},
		{name: "two offsets across readers", attempts: []Attempt{a1},
			reads: []Read{tail(a1, 0), final(a1, 1)}, want: 1},
		{name: "three offsets count once", attempts: []Attempt{a1},
			reads: []Read{final(a1, 0), final(a1, 1), final(a1, 2)}, want: 1},
		{name: "unknown outcome stored twice", attempts: []Attempt{a4},
			reads: []Read{final(a4, 0), final(a4, 1)}, want: 1},
		{name: "two records duplicated", attempts: []Attempt{a1, b1},
			reads: []Read{final(a1, 0), final(a1, 1), final(b1, 3), tail(b1, 4)}, want: 2},
		{name: "in another partition is not this check's", attempts: []Attempt{a1},
			reads: []Read{finalAcked(a1),
				{Topic: "t", Partition: 3, Offset: 9, Key: []byte("a"), Value: a1.Value, Final: true}}},
	}
	runCheckCases(t, duplicates, cases)
}

func TestConflicts(t *testing.T) {
	cases := []checkCase{
		{name: "one value per offset", attempts: []Attempt{a1, a2},
			reads: []Read{tail(a1, 0), finalAcked(a1), readOf("m1", a2, 1), finalAcked(a2)}},
		{name: "tail and final disagree", attempts: []Attempt{a1, a2},
			reads: []Read{tail(a1, 0), final(a2, 0)}, want: 1},
		{name: "three values at one offset count once", attempts: []Attempt{a1, a2, a3},
			reads: []Read{tail(a1, 0), final(a2, 0), readOf("m1", a3, 0)}, want: 1},
		{name: "an unknown value against a known one", attempts: []Attempt{a1},
			reads: []Read{finalAcked(a1), {Topic: "t", Offset: 0, Value: []byte("junk"), Reader: "tail"}}, want: 1},
		{name: "same offset in two partitions", attempts: []Attempt{a1, attemptOf("t", 1, "c", 1, OK, 0)},
			reads: []Read{finalAcked(a1), finalAcked(attemptOf("t", 1, "c", 1, OK, 0))}},
		{name: "same offset in two topics", attempts: []Attempt{a1, attemptOf("u", 0, "c", 1, OK, 0)},
			reads: []Read{finalAcked(a1), finalAcked(attemptOf("u", 0, "c", 1, OK, 0))}},
	}
	runCheckCases(t, conflicts, cases)
}

func TestCorrupt(t *testing.T) {
	cases := []checkCase{
		{name: "every record made in its place", attempts: []Attempt{a1, a2},
			reads: []Read{finalAcked(a1), tail(a2, 1), final(a2, 9)}},
		{name: "a value no attempt made", attempts: []Attempt{a1},
			reads: []Read{finalAcked(a1), {Topic: "t", Offset: 1, Key: []byte("a"), Value: []byte("a/1x"), Final: true}}, want: 1},
		{name: "seen by two readers counts once", attempts: []Attempt{a1},
			reads: []Read{
				{Topic: "t", Offset: 1, Key: []byte("a"), Value: []byte("zz"), Reader: "tail"},
				{Topic: "t", Offset: 1, Key: []byte("a"), Value: []byte("zz"), Reader: "final", Final: true}},
			want: 1},
		{name: "in another partition", attempts: []Attempt{a1},
			reads: []Read{{Topic: "t", Partition: 1, Offset: 0, Key: []byte("a"), Value: a1.Value}}, want: 1},
		{name: "in another topic", attempts: []Attempt{a1},
			reads: []Read{{Topic: "u", Offset: 0, Key: []byte("a"), Value: a1.Value}}, want: 1},
		{name: "with another key", attempts: []Attempt{a1},
			reads: []Read{{Topic: "t", Offset: 0, Key: []byte("b"), Value: a1.Value}}, want: 1},
	}
	runCheckCases(t, corrupt, cases)
}

func TestPhantoms(t *testing.T) {
	f2, f3, u4 := failed("a", 2), failed("a", 3), unknown("a", 4)
	cases := []checkCase{
		{name: "failed never read", attempts: []Attempt{a1, f2, u4},
			reads: []Read{finalAcked(a1), final(u4, 1)}},
		{name: "failed in the final read", attempts: []Attempt{a1, f2},
			reads: []Read{finalAcked(a1), final(f2, 1)}, want: 1},
		{name: "failed seen by a tail reader", attempts: []Attempt{a1, f2},
			reads: []Read{finalAcked(a1), tail(f2, 1)}, want: 1},
		{name: "counted once per attempt", attempts: []Attempt{f2, f3},
			reads: []Read{tail(f2, 0), final(f2, 0), final(f3, 1)}, want: 2},
		{name: "failed read in another partition", attempts: []Attempt{f2},
			reads: []Read{{Topic: "t", Partition: 4, Offset: 0, Key: []byte("a"), Value: f2.Value}}, want: 1},
	}
	runCheckCases(t, phantoms, cases)
}

func TestReorders(t *testing.T) {
	a4, a5 := acked("a", 4, 3), acked("a", 5, 4)
	b2 := acked("b", 2, 5)
	u6 := unknown("a", 6)
	cases := []checkCase{
		{name: "in seq order", attempts: []Attempt{a1, a2, a3},
			reads: []Read{final(a1, 0), final(a2, 1), final(a3, 2)}},
		{name: "gaps in seq are fine", attempts: []Attempt{a1, a3, u6},
			reads: []Read{final(a1, 0), final(a3, 1), final(u6, 2)}},
		{name: "two keys interleaved", attempts: []Attempt{a1, b1, a2, b2},
			reads: []Read{final(b2, 0), final(a1, 1), final(a2, 2)}},
		{name: "two swapped", attempts: []Attempt{a1, a2},
			reads: []Read{final(a2, 0), final(a1, 1)}, want: 1},
		{name: "read order does not matter, offsets do", attempts: []Attempt{a1, a2},
			reads: []Read{final(a1, 1), final(a2, 0)}, want: 1},
		{name: "each record after a later seq counts", attempts: []Attempt{a1, a2, a3, a4, a5},
			reads: []Read{final(a5, 0), final(a1, 1), final(a2, 2), final(a3, 3), final(a4, 4)}, want: 4},
		{name: "unknown-outcome records are ordered too", attempts: []Attempt{a1, u6},
			reads: []Read{final(u6, 0), final(a1, 1)}, want: 1},
		{name: "a duplicate's later copy is not reordered", attempts: []Attempt{a1, a2},
			reads: []Read{final(a1, 0), final(a2, 1), final(a1, 2)}},
		{name: "tail readers are not judged", attempts: []Attempt{a1, a2},
			reads: []Read{tail(a2, 0), tail(a1, 1), final(a1, 0), final(a2, 1)}},
		{name: "same key in two partitions is two keys",
			attempts: []Attempt{a2, attemptOf("t", 1, "a", 1, OK, 7)},
			reads:    []Read{final(a2, 0), final(attemptOf("t", 1, "a", 1, OK, 7), 7)}},
	}
	runCheckCases(t, reorders, cases)
}

func TestInvalidHistory(t *testing.T) {
	again := acked("a", 9, 4)
	again.Value = a1.Value
	for _, c := range []checkCase{
		{name: "unique values", attempts: []Attempt{a1, a2}},
		{name: "one value twice", attempts: []Attempt{a1, a2, again}, want: 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := c.recorder().snapshot()
			if h.invalid.count != c.want {
				t.Fatalf("invalid = %d, want %d: %v", h.invalid.count, c.want, h.invalid.examples)
			}
		})
	}
}

func TestExamplesAreCapped(t *testing.T) {
	c := checkCase{}
	for seq := range int64(25) {
		a := acked("a", seq+1, seq)
		c.attempts = append(c.attempts, a)
	}
	f := lost(c.recorder().snapshot())
	if f.count != 25 || len(f.examples) != maxExamples {
		t.Fatalf("count %d, %d examples; want 25, %d", f.count, len(f.examples), maxExamples)
	}
	if want := `t/0: "a/1" (key "a" seq 1 to t/0, ok at offset 0, +0.015s) is absent from the final read`; f.examples[0] != want {
		t.Fatalf("example:\n got %s\nwant %s", f.examples[0], want)
	}
	if !strings.Contains(f.examples[9], `"a/10"`) {
		t.Fatalf("tenth example is not the tenth record: %s", f.examples[9])
	}
}

func TestVanished(t *testing.T) {
	a4unknown := unknown("a", 4)
	cases := []checkCase{
		{name: "every read offset in the final read", attempts: []Attempt{a1, a2, a3},
			reads: []Read{tail(a1, 0), tail(a2, 1), finalAcked(a1), finalAcked(a2), finalAcked(a3)}},
		// The seed-13 shape: a record served at one offset, then stored
		// again after it; the final read holds only the second copy.
		{name: "served, then gone from below the final read's end", attempts: []Attempt{a1, a4unknown, a3},
			reads: []Read{tail(a4unknown, 1), finalAcked(a1), finalAcked(a3), final(a4unknown, 3)}, want: 1},
		{name: "two readers of one vanished offset count once", attempts: []Attempt{a1, a3, a4unknown},
			reads: []Read{tail(a4unknown, 1), readOf("other", a4unknown, 1), finalAcked(a1), finalAcked(a3)}, want: 1},
		{name: "beyond the final read's end is not judged", attempts: []Attempt{a1, a4unknown},
			reads: []Read{tail(a4unknown, 5), finalAcked(a1)}},
		{name: "below the final read's start", attempts: []Attempt{a1, a2},
			reads: []Read{tail(a1, 0), finalAcked(a2)}, want: 1},
		{name: "no final read is lost's, not this", attempts: []Attempt{a1},
			reads: []Read{tail(a1, 0)}},
		{name: "compacted topics may drop offsets", compacted: []string{"t"}, attempts: []Attempt{a1, a2},
			reads: []Read{tail(a1, 0), finalAcked(a2)}},
	}
	runCheckCases(t, vanished, cases)
}
