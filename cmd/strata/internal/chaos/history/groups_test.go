package history

import (
	"strings"
	"testing"
)

func TestGroupOverlaps(t *testing.T) {
	d := func(group, member string, generation int64, partition int32, offset int64) Delivery {
		return Delivery{Group: group, Member: member, Generation: generation, Topic: "t", Partition: partition, Offset: offset}
	}
	for _, c := range []struct {
		name       string
		deliveries []Delivery
		want       int
	}{
		{name: "one member per partition and generation",
			deliveries: []Delivery{d("g", "m1", 1, 0, 0), d("g", "m1", 1, 0, 1), d("g", "m2", 1, 1, 0)}},
		{name: "handed over in a new generation",
			deliveries: []Delivery{d("g", "m1", 1, 0, 0), d("g", "m2", 2, 0, 1)}},
		{name: "two members in one generation",
			deliveries: []Delivery{d("g", "m1", 1, 0, 0), d("g", "m1", 1, 0, 1), d("g", "m2", 1, 0, 1)}, want: 1},
		{name: "three members count once",
			deliveries: []Delivery{d("g", "m1", 3, 0, 0), d("g", "m2", 3, 0, 0), d("g", "m3", 3, 0, 0)}, want: 1},
		{name: "two partitions overlapping",
			deliveries: []Delivery{d("g", "m1", 1, 0, 0), d("g", "m2", 1, 0, 0), d("g", "m1", 1, 1, 0), d("g", "m2", 1, 1, 0)}, want: 2},
		{name: "two groups are independent",
			deliveries: []Delivery{d("g", "m1", 1, 0, 0), d("h", "m2", 1, 0, 0)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec := newRecorderAt(origin)
			for _, x := range c.deliveries {
				rec.RecordDelivery(x)
			}
			f := groupOverlaps(rec.snapshot())
			if f.count != c.want || len(f.examples) != c.want {
				t.Fatalf("count = %d (%d examples), want %d:\n%s", f.count, len(f.examples), c.want, strings.Join(f.examples, "\n"))
			}
		})
	}

	rec := newRecorderAt(origin)
	for _, x := range []Delivery{d("g", "m2", 1, 0, 5), d("g", "m1", 1, 0, 3), d("g", "m1", 1, 0, 9)} {
		rec.RecordDelivery(x)
	}
	f := groupOverlaps(rec.snapshot())
	want := `group "g" generation 1: t/0 delivered to m1 (2 records, offsets 3..9), m2 (1 records, offsets 5..5)`
	if len(f.examples) != 1 || f.examples[0] != want {
		t.Fatalf("examples = %q, want %q", f.examples, want)
	}
}

func TestCommitRegressions(t *testing.T) {
	// c is a commit of group "g" on t/partition made or seen from start to
	// end (ms).
	c := func(partition int32, offset, start, end int64) Commit {
		return Commit{Group: "g", Topic: "t", Partition: partition, Offset: offset, Start: at(start), End: at(end)}
	}
	byMember := func(cm Commit, member string) Commit { cm.Member = member; return cm }
	for _, tc := range []struct {
		name    string
		commits []Commit
		want    int
	}{
		{name: "never backwards",
			commits: []Commit{c(0, -1, 0, 1), c(0, 5, 2, 3), c(0, 5, 4, 5), c(0, 9, 6, 7)}},
		{name: "backwards after a poll",
			commits: []Commit{c(0, 5, 0, 1), c(0, 9, 2, 3), c(0, 7, 4, 5)}, want: 1},
		{name: "a member commits below what was seen",
			commits: []Commit{c(0, 9, 0, 1), byMember(c(0, 4, 2, 3), "m1")}, want: 1},
		{name: "the commit vanished",
			commits: []Commit{c(0, 9, 0, 1), c(0, -1, 2, 3)}, want: 1},
		{name: "overlapping calls are not ordered",
			commits: []Commit{byMember(c(0, 9, 0, 10), "m1"), c(0, 4, 5, 6), c(0, 9, 11, 12)}},
		{name: "a call still going when a lower one starts",
			commits: []Commit{byMember(c(0, 9, 0, 10), "m1"), c(0, 4, 5, 20)}},
		{name: "a zero end is the start",
			commits: []Commit{{Group: "g", Topic: "t", Offset: 9, Start: at(0)}, c(0, 4, 1, 2)}, want: 1},
		{name: "recorded out of order",
			commits: []Commit{c(0, 4, 10, 11), c(0, 9, 0, 1)}, want: 1},
		{name: "each later commit counts",
			commits: []Commit{c(0, 9, 0, 1), c(0, 4, 2, 3), c(0, 5, 4, 5), c(0, 10, 6, 7)}, want: 2},
		{name: "partitions are independent",
			commits: []Commit{c(0, 9, 0, 1), c(1, 4, 2, 3), c(1, 5, 4, 5)}},
		{name: "groups are independent",
			commits: []Commit{c(0, 9, 0, 1), {Group: "h", Topic: "t", Offset: 4, Start: at(2), End: at(3)}}},
		{name: "regressions in two series",
			commits: []Commit{c(0, 9, 0, 1), c(1, 9, 0, 1), c(1, 1, 2, 3), c(0, 1, 2, 3)}, want: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := newRecorderAt(origin)
			for _, x := range tc.commits {
				rec.RecordCommit(x)
			}
			f := commitRegressions(rec.snapshot())
			if f.count != tc.want || len(f.examples) != tc.want {
				t.Fatalf("count = %d (%d examples), want %d:\n%s", f.count, len(f.examples), tc.want, strings.Join(f.examples, "\n"))
			}
		})
	}

	rec := newRecorderAt(origin)
	rec.RecordCommit(c(0, 9, 1000, 1001))
	rec.RecordCommit(byMember(c(0, 4, 2000, 2002), "m1"))
	f := commitRegressions(rec.snapshot())
	want := `group "g" t/0: committed offset 4 (by m1 +2.000s..+2.002s) after 9 (observed +1.000s..+1.001s)`
	if len(f.examples) != 1 || f.examples[0] != want {
		t.Fatalf("examples = %q, want %q", f.examples, want)
	}
}
