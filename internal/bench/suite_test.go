package bench

import (
	"testing"

	"github.com/strata-log/strata/internal/devcluster"
)

func TestCPUDelta(t *testing.T) {
	nodes := []devcluster.Node{
		{Name: "broker-1", Role: devcluster.RoleBroker}, {Name: "broker-2", Role: devcluster.RoleBroker},
		{Name: "bookie-1", Role: devcluster.RoleBookie}, {Name: "metad-1", Role: devcluster.RoleMetad},
	}
	before := map[string]float64{"broker-1": 1.1, "broker-2": 0.3, "bookie-1": 2, "metad-1": 5, "": 0.7}
	// metad-1 exited in between: left out, not counted as negative.
	after := map[string]float64{"broker-1": 2.3, "broker-2": 0.5, "bookie-1": 4.5, "": 1}
	c := CPUDelta(before, after, nodes)
	want := map[string]float64{"broker": 1.4, "bookie": 2.5, "client": 0.3}
	if len(c.PerRole) != len(want) {
		t.Fatalf("per role %v, want %v", c.PerRole, want)
	}
	for role, v := range want {
		if c.PerRole[role] != v {
			t.Errorf("%s: %v, want %v", role, c.PerRole[role], v)
		}
	}
	if _, ok := c.PerProcess["metad-1"]; ok {
		t.Error("an exited process was counted")
	}
	c.FillPerGB(2e9)
	if c.PerGBBrokersBookies != 1.95 || c.PerGBBrokers != 0.7 {
		t.Errorf("per GB: %+v", c)
	}
}
