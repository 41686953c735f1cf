package history

import (
	"slices"
	"testing"
	"time"
)

func TestUnavailability(t *testing.T) {
	ok := func(start, end int64) try { return try{start, end, true} }
	fail := func(start, end int64) try { return try{start, end, false} }
	for _, c := range []struct {
		name  string
		tries []try
		want  []stretch
	}{
		{name: "nothing tried"},
		{name: "acknowledged one at a time, idle between",
			tries: []try{ok(0, 10), ok(100, 105)},
			want:  []stretch{{0, 10, true}, {100, 105, true}}},
		{name: "failures and retries until one succeeds",
			tries: []try{fail(0, 10), fail(20, 30), ok(40, 50), ok(50, 52)},
			want:  []stretch{{0, 50, true}, {50, 52, true}}},
		{name: "in flight across an acknowledgement",
			tries: []try{ok(0, 100), ok(10, 20)},
			want:  []stretch{{0, 20, true}, {20, 100, true}}},
		{name: "many in flight, one slow answer",
			tries: []try{ok(0, 5), ok(1, 6), fail(2, 3000), ok(7, 2500), ok(2600, 2610)},
			// Still waiting after the last acknowledgement: the stretch runs
			// to that wait's end.
			want: []stretch{{0, 5, true}, {5, 6, true}, {6, 2500, true}, {2500, 2610, true}, {2610, 3000, false}}},
		{name: "never recovered",
			tries: []try{ok(0, 10), fail(20, 30), fail(40, 900)},
			want:  []stretch{{0, 10, true}, {20, 900, false}}},
		{name: "never acknowledged at all",
			tries: []try{fail(5, 30), fail(20, 40)},
			want:  []stretch{{5, 40, false}}},
		{name: "order of tries does not matter",
			tries: []try{ok(40, 50), fail(20, 30), fail(0, 10)},
			want:  []stretch{{0, 50, true}}},
		{name: "instant answers",
			tries: []try{ok(10, 10), fail(20, 20), ok(30, 30)},
			want:  []stretch{{20, 30, true}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := unavailability(c.tries)
			if !slices.Equal(got, c.want) {
				t.Fatalf("stretches = %v, want %v", got, c.want)
			}
		})
	}
}

func TestWorstOverlapping(t *testing.T) {
	stretches := []stretch{{0, 10, true}, {10, 500, true}, {600, 610, true}, {700, 1000, false}}
	for _, c := range []struct {
		from, to int64
		want     stretch
		found    bool
	}{
		{from: -5, to: -1},
		{from: 501, to: 599},
		{from: 0, to: 5, want: stretch{0, 10, true}, found: true},
		{from: 10, to: 10, want: stretch{10, 500, true}, found: true},
		{from: 550, to: 650, want: stretch{600, 610, true}, found: true},
		{from: 605, to: 2000, want: stretch{700, 1000, false}, found: true},
		{from: 400, to: 1000, want: stretch{10, 500, true}, found: true},
		{from: 1001, to: 2000},
	} {
		got, found := worstOverlapping(stretches, c.from, c.to)
		if got != c.want || found != c.found {
			t.Errorf("[%d, %d]: got %v %v, want %v %v", c.from, c.to, got, found, c.want, c.found)
		}
	}
}

func TestMeasureAvailability(t *testing.T) {
	rec := newRecorderAt(origin)
	produce := func(partition int32, start, end int64, outcome Outcome) {
		rec.RecordAttempt(Attempt{Topic: "t", Partition: partition, Start: at(start), End: at(end), Outcome: outcome,
			Value: []byte(time.Duration(start).String() + "/" + string(rune('a'+partition)))})
	}
	poll := func(partition int32, start, end int64, ok bool) {
		rec.RecordPoll(Poll{Topic: "t", Partition: partition, Start: at(start), End: at(end), OK: ok})
	}
	// t/0 cannot be written from 1000 to 4000 ms, t/1 from 6000 to 6500;
	// t/1 cannot be read from 2000 to 2800.
	produce(0, 0, 10, OK)
	produce(0, 1000, 2000, Unknown)
	produce(0, 2100, 3000, Failed)
	produce(0, 3900, 4000, OK)
	produce(1, 5000, 5010, OK)
	produce(1, 6000, 6500, OK)
	poll(1, 1900, 2000, true)
	poll(1, 2000, 2500, false)
	poll(1, 2600, 2800, true)
	rec.RecordFault(Fault{Kind: "kill", Target: "broker-1", Start: at(1500), End: at(1600)})
	rec.RecordFault(Fault{Kind: "pause", Target: "broker-2", Start: at(5500), End: at(5600)})
	rec.RecordFault(Fault{Kind: "disk-full", Target: "bookie-0", Start: at(7000)}) // never healed
	rec.RecordFault(Fault{Kind: "pause", Target: "broker-2", Start: at(6600), End: at(6700)})
	rec.RecordFault(Fault{Kind: "partition-isolate", Target: "broker-1", Start: at(2100), End: at(2200)})

	av := measureAvailability(rec.snapshot())
	wantProduce := &Unavailability{Topic: "t", Partition: 0, From: at(1000), To: at(4000), Ms: 3000, Recovered: true}
	if *av.worstProduce != *wantProduce {
		t.Errorf("worst produce = %+v, want %+v", av.worstProduce, wantProduce)
	}
	wantRead := &Unavailability{Topic: "t", Partition: 1, From: at(2000), To: at(2800), Ms: 800, Recovered: true}
	if *av.worstRead != *wantRead {
		t.Errorf("worst read = %+v, want %+v", av.worstRead, wantRead)
	}
	var got [][2]int64
	for _, f := range av.faults {
		got = append(got, [2]int64{f.MaxUnavailableMs, f.MaxReadUnavailableMs})
	}
	// The kill overlaps t/0's 3000 ms, but no read stretch (t/1's polls
	// begin at 1900). The first pause overlaps nothing. The disk-full
	// never healed, so it runs to the last try and sees nothing after 7000.
	// The second pause overlaps nothing: t/1's stretch ended at 6500. The
	// isolation overlaps both t/0's produce and t/1's read stretch.
	want := [][2]int64{{3000, 0}, {0, 0}, {0, 0}, {0, 0}, {3000, 800}}
	if !slices.Equal(got, want) {
		t.Errorf("per fault (produce, read ms) = %v, want %v", got, want)
	}

	// A fault while t/1 waits 500 ms for its acknowledgement sees it.
	rec.RecordFault(Fault{Kind: "pause", Target: "broker-2", Start: at(6100), End: at(6200)})
	av = measureAvailability(rec.snapshot())
	if got := av.faults[5].MaxUnavailableMs; got != 500 {
		t.Errorf("fault during t/1's wait: %d ms, want 500", got)
	}
}
