package recordbatch_test

import (
	"testing"

	"github.com/strata-log/strata/recordbatch"
)

// Kafka's UtilsTest.testMurmur2.
func TestMurmur2Vectors(t *testing.T) {
	vectors := map[string]int32{
		"21":                         -973932308,
		"foobar":                     -790332482,
		"a-little-bit-long-string":   -985981536,
		"a-little-bit-longer-string": -1486304829,
		"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
		"abc": 479470107,
	}
	for in, want := range vectors {
		if got := recordbatch.Murmur2([]byte(in)); got != want {
			t.Errorf("Murmur2(%q) = %d, want %d", in, got, want)
		}
	}
}

func TestPartitionForKeyMasksNotAbs(t *testing.T) {
	// murmur2("21") = -973932308: x&0x7fffffff = 1173551340, 1173551340%7 = 3,
	// while abs would give 973932308%7 = 6.
	if got := recordbatch.PartitionForKey([]byte("21"), 7); got != 3 {
		t.Errorf("PartitionForKey(21, 7) = %d, want 3", got)
	}
	if got := recordbatch.PartitionForKey([]byte("21"), 10); got != 0 {
		t.Errorf("PartitionForKey(21, 10) = %d, want 0", got)
	}
	// murmur2("abc") = 479470107 is positive: plain modulo.
	if got := recordbatch.PartitionForKey([]byte("abc"), 12); got != 479470107%12 {
		t.Errorf("PartitionForKey(abc, 12) = %d, want %d", got, 479470107%12)
	}
	for _, key := range []string{"", "a", "ab", "abc", "abcd", "abcde"} {
		for n := int32(1); n < 50; n++ {
			if p := recordbatch.PartitionForKey([]byte(key), n); p < 0 || p >= n {
				t.Fatalf("PartitionForKey(%q, %d) = %d", key, n, p)
			}
		}
	}
}

func TestStickyPartitioner(t *testing.T) {
	s := recordbatch.NewSticky()
	const n = 8
	p := s.Partition(n)
	if p < 0 || p >= n {
		t.Fatalf("partition %d", p)
	}
	for range 100 {
		if q := s.Partition(n); q != p {
			t.Fatalf("sticky partition moved from %d to %d without Next", p, q)
		}
	}
	seen := map[int32]bool{p: true}
	for range 1000 {
		s.Next(n)
		q := s.Partition(n)
		if q == p {
			t.Fatalf("Next kept partition %d", p)
		}
		if q < 0 || q >= n {
			t.Fatalf("partition %d out of range", q)
		}
		p = q
		seen[q] = true
	}
	if len(seen) != n {
		t.Errorf("visited %d of %d partitions", len(seen), n)
	}

	// One partition: always 0.
	one := recordbatch.NewSticky()
	for range 10 {
		if p := one.Partition(1); p != 0 {
			t.Fatalf("n=1: partition %d", p)
		}
		one.Next(1)
	}

	// The partition count shrinks below the sticky partition: re-pick.
	shrink := recordbatch.NewSticky()
	for shrink.Partition(100) < 10 {
		shrink.Next(100)
	}
	if p := shrink.Partition(10); p < 0 || p >= 10 {
		t.Errorf("after shrinking to 10: partition %d", p)
	}
	shrink.Next(2)
	if p := shrink.Partition(2); p < 0 || p >= 2 {
		t.Errorf("after Next(2): %d", p)
	}
}

func TestStickyConcurrent(t *testing.T) {
	s := recordbatch.NewSticky()
	done := make(chan struct{})
	for range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			for range 1000 {
				if p := s.Partition(5); p < 0 || p >= 5 {
					t.Errorf("partition %d", p)
					return
				}
				s.Next(5)
			}
		}()
	}
	for range 4 {
		<-done
	}
}
