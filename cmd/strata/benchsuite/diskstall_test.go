package benchsuite

import (
	"testing"
	"time"
)

// A /proc/diskstats of Linux 5.5+ (20 fields), a 4.18 one (18) and an
// older one (14): the counters are read by position from each.
const diskstats = `   7       0 loop0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0
 254       0 vda 31450 5124 1176386 4409 11407 12799 2028448 5155 3 3908 10555 977 0 316232 218 1805 772
 254       1 vda1 100 0 800 10 200 0 1600 20 0 30 30 5 0 40 1
 8       16 sdb 10 0 80 1 20 0 160 2 1 3 3
   8       0 sda 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17
   8      32 sdc 1 2 3 4 5 6 7 8 9 10
`

func TestParseDiskstats(t *testing.T) {
	for _, tc := range []struct {
		major, minor uint32
		name         string
		want         DiskCounters
	}{
		// reads 31450 + writes 11407 + discards 977 + flushes 1805.
		{254, 0, "vda", DiskCounters{Completed: 31450 + 11407 + 977 + 1805, InFlight: 3}},
		{254, 1, "vda1", DiskCounters{Completed: 100 + 200 + 5}},
		{8, 0, "sda", DiskCounters{Completed: 1 + 5 + 12 + 16, InFlight: 9}},
		{8, 16, "sdb", DiskCounters{Completed: 10 + 20, InFlight: 1}},
	} {
		name, c, err := ParseDiskstats([]byte(diskstats), tc.major, tc.minor)
		if err != nil || name != tc.name || c != tc.want {
			t.Errorf("%d:%d: got %q %+v %v, want %q %+v", tc.major, tc.minor, name, c, err, tc.name, tc.want)
		}
	}
	// Too short a line (sdc) is no device; nor is one that is not
	// listed.
	for _, dev := range [][2]uint32{{8, 32}, {254, 2}} {
		if _, _, err := ParseDiskstats([]byte(diskstats), dev[0], dev[1]); err == nil {
			t.Errorf("%d:%d: no error", dev[0], dev[1])
		}
	}
	if _, _, err := ParseDiskstats([]byte("254 0 vda x 0 0 0 0 0 0 0 0 0 0\n"), 254, 0); err == nil {
		t.Error("a counter that is no number: no error")
	}
}

func TestFindDiskStalls(t *testing.T) {
	t0 := time.Unix(1000, 0)
	// One sample every 50 ms: (completed, in flight, phase).
	rows := [][3]int{
		{0, 1, 1},  // 0 ms
		{5, 2, 1},  // 50: completions
		{5, 2, 1},  // 100: none, two in flight: a stall begins at 50
		{5, 3, 1},  // 150
		{9, 0, 2},  // 200: completed: the stall was 50..150 (100 ms; its requests complete in phase 2)
		{9, 0, 2},  // 250: nothing in flight: idle, no stall
		{9, 1, 2},  // 300
		{9, 1, 3},  // 350: 50 ms stuck: shorter than the minimum
		{10, 1, 3}, // 400
		{10, 1, 3}, // 450
		{10, 1, 3}, // 500
		{10, 4, 4}, // 550: still stuck when sampling ends: 400..550
	}
	var samples []DiskSample
	for i, r := range rows {
		samples = append(samples, DiskSample{At: t0.Add(time.Duration(i) * 50 * time.Millisecond),
			DiskCounters: DiskCounters{Completed: uint64(r[0]), InFlight: uint64(r[1])}, Phase: r[2]})
	}
	got := FindDiskStalls(samples, 100*time.Millisecond)
	want := []DiskStall{
		{Start: t0.Add(50 * time.Millisecond), End: t0.Add(150 * time.Millisecond), Phase: 2},
		{Start: t0.Add(400 * time.Millisecond), End: t0.Add(550 * time.Millisecond), Phase: 4},
	}
	if len(got) != len(want) {
		t.Fatalf("stalls %+v, want %+v", got, want)
	}
	for i := range want {
		if !got[i].Start.Equal(want[i].Start) || !got[i].End.Equal(want[i].End) || got[i].Phase != want[i].Phase {
			t.Errorf("stall %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	if all := SumDiskStalls(got, nil); all != (DiskStalls{Count: 2, Seconds: 0.25, LongestMs: 150}) {
		t.Errorf("all: %+v", all)
	}
	if s := SumDiskStalls(got, func(p int) bool { return p == 2 }); s != (DiskStalls{Count: 1, Seconds: 0.1, LongestMs: 100}) {
		t.Errorf("phase 2: %+v", s)
	}
	if s := SumDiskStalls(got, func(int) bool { return false }); s != (DiskStalls{}) || s.String() != "none" {
		t.Errorf("no phase: %+v %q", s, s)
	}
	if s := FindDiskStalls(samples, 200*time.Millisecond); len(s) != 0 {
		t.Errorf("200 ms minimum: %+v", s)
	}
}
