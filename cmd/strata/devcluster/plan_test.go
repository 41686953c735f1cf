package devcluster

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestPlan(t *testing.T) {
	o := DefaultOptions()
	o.BinDir = "/opt/strata/bin"
	nodes, err := Plan(o)
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 8 {
		t.Fatalf("%d nodes, want 8", len(nodes))
	}
	abs, err := filepath.Abs(".strata")
	if err != nil {
		t.Fatal(err)
	}
	k2 := nodes[7]
	if k2.Name != "broker-2" || k2.Role != RoleBroker || k2.ID != "k2" || k2.Listen != "127.0.0.1:9093" ||
		k2.Admin != "127.0.0.1:9193" || k2.DataDir != ".strata/broker-2" || k2.Bin != "/opt/strata/bin/broker" ||
		strings.Join(k2.Args, " ") != "--id k2 --listen 127.0.0.1:9093 --admin-listen 127.0.0.1:9193 "+
			"--metad 127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003 --drain-timeout 3s --tier-segment-bytes 8388608 --tier-max-delay 30s --tier-check-interval 5s --tier-store file://"+abs+"/tier" ||
		hasCredentials(k2.Env) {
		t.Fatalf("broker-2 planned as %+v", k2)
	}
	if got := ProfileFromState(&State{Nodes: nodes}); got.Brokers != "127.0.0.1:9092,127.0.0.1:9093" {
		t.Fatalf("profile %+v", got)
	}
	b2 := nodes[4]
	if b2.Name != "bookie-2" || b2.ID != "b2" || b2.Listen != "127.0.0.1:7302" || b2.Admin != "127.0.0.1:7402" ||
		!strings.Contains(strings.Join(b2.Args, " "), "--metad 127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003") {
		t.Fatalf("bookie-2 planned as %+v", b2)
	}
	m2 := nodes[1]
	if m2.Name != "metad-2" || m2.Listen != "127.0.0.1:7002" || m2.Raft != "127.0.0.1:7102" || m2.Admin != "127.0.0.1:7202" {
		t.Fatalf("metad-2 planned as %+v", m2)
	}
	if m2.Bin != "/opt/strata/bin/metad" || m2.DataDir != ".strata/metad-2" {
		t.Fatalf("metad-2 paths %+v", m2)
	}
	args := strings.Join(m2.Args, " ")
	if !strings.Contains(args, "--peers 1=127.0.0.1:7101,2=127.0.0.1:7102,3=127.0.0.1:7103") {
		t.Fatalf("metad-2 args %q", args)
	}
	if got := strings.Join(Endpoints(nodes, RoleMetad), ","); got != "127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003" {
		t.Fatalf("endpoints %q", got)
	}
}

func TestPlanRejects(t *testing.T) {
	for _, o := range []Options{
		{Dir: "", Metad: 3, Host: "127.0.0.1", MetadPort: 7001},
		{Dir: "d", Metad: 2, Host: "127.0.0.1", MetadPort: 7001},
		{Dir: "d", Metad: 3, Host: "127.0.0.1", MetadPort: 80},
		{Dir: "d", Metad: 3, Host: "127.0.0.1", MetadPort: 7001, Brokers: -1},
		{Dir: "d", Metad: 3, Host: "127.0.0.1", MetadPort: 7001, Brokers: 2, BrokerPort: 65500},
		{Dir: "d", Metad: 3, Host: "127.0.0.1", MetadPort: 7001, Brokers: 1, BrokerPort: 9092, MinIO: "/bin/minio",
			MinIOPort: 65535},
	} {
		if _, err := Plan(o); err == nil {
			t.Errorf("Plan(%+v) accepted", o)
		}
	}
}

// TestPlanBrokerArgs: extra broker arguments come after the planned ones
// (so they override them) and only brokers get them.
func TestPlanBrokerArgs(t *testing.T) {
	o := DefaultOptions()
	o.BinDir, o.BrokerArgs = "/opt/strata/bin", []string{"--tier-store="}
	nodes, err := Plan(o)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		last := n.Args[len(n.Args)-1]
		if (n.Role == RoleBroker) != (last == "--tier-store=") {
			t.Errorf("%s: args end with %q", n.Name, last)
		}
	}
}

// hasCredentials reports whether env holds object store credentials.
func hasCredentials(env []string) bool {
	for _, kv := range env {
		if strings.HasPrefix(kv, "AWS_") {
			return true
		}
	}
	return false
}

// Brokers run with MADV_FREE (see brokerRuntimeEnv), added to the user's
// GODEBUG, whose own madvdontneed setting wins.
func TestBrokerRuntimeEnv(t *testing.T) {
	for godebug, want := range map[string]string{
		"":                   "GODEBUG=madvdontneed=0",
		"gctrace=1":          "GODEBUG=gctrace=1,madvdontneed=0",
		"madvdontneed=1":     "",
		"x=1,madvdontneed=1": "",
	} {
		if got := strings.Join(brokerRuntimeEnv(godebug), " "); got != want {
			t.Errorf("GODEBUG %q: %q, want %q", godebug, got, want)
		}
	}
}
