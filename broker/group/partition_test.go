package group

import (
	"testing"

	"github.com/strata-log/strata/recordbatch"
)

// Kafka's UtilsTest.testMurmur2 vectors: PartitionFor must agree with every
// Kafka client.
func TestMurmur2KafkaVectors(t *testing.T) {
	for in, want := range map[string]int32{
		"21":                         -973932308,
		"foobar":                     -790332482,
		"a-little-bit-long-string":   -985981536,
		"a-little-bit-longer-string": -1486304829,
		"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
		"abc": 479470107,
	} {
		if got := recordbatch.Murmur2([]byte(in)); got != want {
			t.Errorf("murmur2(%q) = %d, want %d", in, got, want)
		}
	}
}

func TestPartitionFor(t *testing.T) {
	// toPositive(-973932308) % 16
	if got, want := PartitionFor("21", 16), int32((-973932308&0x7fffffff)%16); got != want {
		t.Errorf("PartitionFor(21, 16) = %d, want %d", got, want)
	}
	for _, g := range []string{"", "a", "orders-consumers", "x.y_z"} {
		if p := PartitionFor(g, 16); p < 0 || p >= 16 {
			t.Errorf("PartitionFor(%q) = %d out of range", g, p)
		}
	}
	if p := PartitionFor("g", 0); p != 0 {
		t.Errorf("PartitionFor(n=0) = %d", p)
	}
}
