package benchsuite

import (
	"math"
	"testing"
)

func TestExtraCPU(t *testing.T) {
	c := Compaction{BytesIn: 500e6, WindowSeconds: 10, ControlSeconds: 5,
		CPUPerRole:        map[string]float64{"broker": 6, "bookie": 8, RoleClient: 4},
		CPUPerRoleControl: map[string]float64{"broker": 2.5, "bookie": 3.5, RoleClient: 2.5}}
	perRole, perGB, ok := c.ExtraCPU()
	// broker 0.6 - 0.5, bookie 0.8 - 0.7 cores; the client's -0.1 is not
	// the nodes': 0.2 cores for 10 s over 0.5 GB.
	want := map[string]float64{"broker": 0.1, "bookie": 0.1, RoleClient: -0.1}
	if !ok || len(perRole) != len(want) || math.Abs(perGB-4) > 1e-9 {
		t.Fatalf("ExtraCPU = %v, %v, %v", perRole, perGB, ok)
	}
	for role, w := range want {
		if math.Abs(perRole[role]-w) > 1e-9 {
			t.Errorf("%s: %v, want %v", role, perRole[role], w)
		}
	}
	for _, c := range []Compaction{{BytesIn: 1, WindowSeconds: 1}, {ControlSeconds: 1, WindowSeconds: 1}, {BytesIn: 1, ControlSeconds: 1}} {
		if _, _, ok := c.ExtraCPU(); ok {
			t.Errorf("%+v: ok", c)
		}
	}
}
