package benchsuite

import (
	"bytes"
	"strings"
	"testing"
)

// The group workloads' rows: Kafka's group read against the Strata
// group's, and each rebalance scenario's slowest repeat against its
// target (1 s for a leave, the session + 1 s for a kill), the median
// nearest-rank.
func TestGroupRatios(t *testing.T) {
	leave := RebalanceScenario{Protocol: ProtocolCooperativeSticky, Event: EventLeave, SessionTimeoutMs: 6000, HeartbeatIntervalMs: 500,
		SetBy: "client", SamplesMs: []float64{400, 1200, 300, 500}}
	kill := RebalanceScenario{Protocol: ProtocolKIP848, Event: EventKill, SessionTimeoutMs: 6000, HeartbeatIntervalMs: 500,
		SetBy: "broker", SamplesMs: []float64{5900, 6100, 6800}}
	leave.Fill()
	kill.Fill()
	if leave.MedianMs != 400 || leave.MaxMs != 1200 || kill.MedianMs != 6100 || kill.MaxMs != 6800 {
		t.Fatalf("leave %+v, kill %+v", leave, kill)
	}
	cpu := CPU{PerProcess: map[string]float64{"broker-1": 0.5, "bookie-1": 0.25}, PerRole: map[string]float64{"broker": 0.5, "bookie": 0.25, RoleClient: 1}}
	cpu.FillPerGB(5e8)
	run := Run{Workloads: []Workload{
		{Name: WorkloadGroupCatchUp, MBPerSec: 400, CPU: cpu, Group: &GroupRead{Protocol: ProtocolKIP848, Members: 4, JoinSeconds: 0.1}},
		{Name: WorkloadKafkaGroupCatchUp, MBPerSec: 340, Group: &GroupRead{Protocol: ProtocolCooperativeSticky, Members: 4, JoinSeconds: 0.4}},
		{Name: WorkloadGroupRebalance, Rebalance: &Rebalance{Repeats: 4, Scenarios: []RebalanceScenario{leave, kill}}},
	}}
	got := map[string]Ratio{}
	for _, x := range Ratios(Limits{}, run) {
		got[x.Workload+"/"+x.Metric] = x
	}
	checkRatios(t, got, []ratioCase{
		{WorkloadKafkaGroupCatchUp + "/MB/s Kafka ÷ gRPC", 0.85, false},
		{WorkloadGroupRebalance + "/cooperative-sticky leave → consuming, max", 1200, false},
		{WorkloadGroupRebalance + "/kip-848 kill → consuming, max", 6800, true},
	})
	if x := got[WorkloadGroupRebalance+"/kip-848 kill → consuming, max"]; x.Target != 7000 || !strings.Contains(x.Bound, "median 6100 ms of 3 (5900 6100 6800 ms)") {
		t.Errorf("kill: %+v", x)
	}
	if got := cpu.PerGBByProcess; got["broker-1"] != 1 || got["bookie-1"] != 0.5 || got[RoleClient] != 2 {
		t.Errorf("per GB by process: %v", got)
	}
	var buf bytes.Buffer
	r := &Report{Runs: []Run{run}}
	if err := r.Fprint(&buf); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"CPU core-s/GB per process: bookie-1 0.50, broker-1 1.00, client 2.00", "first record after 0.10 s",
		"kip-848 kill: median 6100 ms, max 6800 ms (session 6s, heartbeat 0.5s, broker)"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, buf.String())
		}
	}
}
