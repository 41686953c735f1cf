package devcluster

import (
	"fmt"
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
	if k2.Name != "broker-2" || k2.Role != RoleBroker || k2.ID != "k2" || k2.Listen != "127.0.0.1:7502" ||
		k2.Admin != "127.0.0.1:7602" || k2.Kafka != "127.0.0.1:9093" || k2.DataDir != ".strata/broker-2" || k2.Bin != "/opt/strata/bin/broker" ||
		strings.Join(k2.Args, " ") != "--id k2 --listen 127.0.0.1:7502 --admin-listen 127.0.0.1:7602 --kafka-listen 127.0.0.1:9093 "+
			"--metad 127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003 --drain-timeout 3s --tier-segment-bytes 8388608 --tier-max-delay 30s --tier-check-interval 5s --tier-store file://"+abs+"/tier" ||
		hasCredentials(k2.Env) {
		t.Fatalf("broker-2 planned as %+v", k2)
	}
	// The profile names the gRPC addresses (the CLI's); Kafka clients get
	// the Kafka ones.
	if got := ProfileFromState(&State{Nodes: nodes}); got.Brokers != "127.0.0.1:7501,127.0.0.1:7502" {
		t.Fatalf("profile %+v", got)
	}
	if got := KafkaBootstrap(nodes); got != "127.0.0.1:9092,127.0.0.1:9093" {
		t.Fatalf("Kafka bootstrap %q", got)
	}
	for _, n := range nodes[:6] {
		if n.Kafka != "" {
			t.Fatalf("%s has a Kafka address %q", n.Name, n.Kafka)
		}
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
		{Dir: "d", Metad: 3, Host: "127.0.0.1", MetadPort: 7001, Brokers: 1, BrokerPort: 7501, KafkaPort: 9092, MinIO: "/bin/minio",
			MinIOPort: 65535},
		{Dir: "d", Metad: 3, Host: "127.0.0.1", MetadPort: 7001, Brokers: 1, BrokerPort: 7501, KafkaPort: 80},
	} {
		if _, err := Plan(o); err == nil {
			t.Errorf("Plan(%+v) accepted", o)
		}
	}
}

// TestPlanPortsDisjoint: every default port is distinct, and port flags
// whose ranges overlap are refused with the two nodes named.
func TestPlanPortsDisjoint(t *testing.T) {
	o := DefaultOptions()
	o.BinDir, o.MinIO, o.Brokers, o.Bookies, o.Metad = "/opt/strata/bin", "/bin/minio", 20, 20, 5
	if _, err := Plan(o); err != nil {
		t.Fatalf("the largest cluster on the default ports: %v", err)
	}
	for _, tc := range []struct {
		change func(*Options)
		want   string
	}{
		{func(o *Options) { o.KafkaPort = 7502 }, "broker-1 and broker-2 would both listen on 127.0.0.1:7502"},
		{func(o *Options) { o.BrokerPort = 7201 }, "metad-1 and broker-1 would both listen on 127.0.0.1:7201"},
		{func(o *Options) { o.MinIOPort = 9092 }, "minio and broker-1 would both listen on 127.0.0.1:9092"},
		// A collision with MinIO says where its ports come from.
		{func(o *Options) { o.KafkaPort = 7401 }, "minio and broker-1 would both listen on 127.0.0.1:7501: move one of the port ranges " +
			"(MinIO's ports are --kafka-port + 100 and + 101 unless --minio-port is given)"},
		{func(o *Options) { o.BookiePort = 7410 }, "bookie-1 and broker-10 would both listen on 127.0.0.1:7510"},
	} {
		o := DefaultOptions()
		o.BinDir, o.MinIO = "/opt/strata/bin", "/bin/minio"
		o.Bookies, o.Brokers = 20, 20
		tc.change(&o)
		_, err := Plan(o)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Plan: %v, want %q", err, tc.want)
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

// TestMinIOPortDerived: without --minio-port, MinIO's ports are the first
// Kafka port + MinIOPortOffset and one above, so they move with the port
// flags. For every cluster size the flags allow (1, 3 or 5 metad, 0 to 20
// bookies, 1 to 20 brokers: without brokers there is no MinIO) and for the
// layouts in use (the defaults; every first port +10000, as for a second
// `strata dev`; the bench suite's, benchsuite.FreePorts) no two listeners
// share an address. An explicit --minio-port wins.
func TestMinIOPortDerived(t *testing.T) {
	for _, l := range []struct {
		name                         string
		metad, bookie, broker, kafka int
	}{
		{"defaults", 7001, 7301, 7501, 9092},
		{"every first port +10000", 17001, 17301, 17501, 19092},
		{"the bench suite's, base 21000", 21000, 21300, 21500, 21700},
	} {
		for _, metad := range []int{1, 3, 5} {
			for bookies := 0; bookies <= 20; bookies++ {
				for brokers := 1; brokers <= 20; brokers++ {
					o := DefaultOptions()
					o.BinDir, o.MinIO = "/opt/strata/bin", "/bin/minio"
					o.Metad, o.Bookies, o.Brokers = metad, bookies, brokers
					o.MetadPort, o.BookiePort, o.BrokerPort, o.KafkaPort = l.metad, l.bookie, l.broker, l.kafka
					nodes, err := Plan(o)
					if err != nil {
						t.Fatalf("%s, %d metad, %d bookies, %d brokers: %v", l.name, metad, bookies, brokers, err)
					}
					owner := map[string]string{}
					var minIO *Node
					for i, n := range nodes {
						if n.Role == RoleMinIO {
							minIO = &nodes[i]
						}
						for _, a := range n.Addresses() {
							if o, ok := owner[a]; ok {
								t.Fatalf("%s, %d metad, %d bookies, %d brokers: %s and %s on %s", l.name, metad, bookies, brokers, o, n.Name, a)
							}
							owner[a] = n.Name
						}
					}
					if minIO == nil || minIO.Listen != fmt.Sprintf("127.0.0.1:%d", l.kafka+100) || minIO.Admin != fmt.Sprintf("127.0.0.1:%d", l.kafka+101) {
						t.Fatalf("%s, %d brokers: MinIO planned as %+v, want S3 on --kafka-port + 100, console + 101", l.name, brokers, minIO)
					}
				}
			}
		}
	}

	// An explicit port wins, in the plan and in the brokers' tier store.
	o := DefaultOptions()
	o.BinDir, o.MinIO, o.MinIOPort = "/opt/strata/bin", "/bin/minio", 20701
	nodes, err := Plan(o)
	if err != nil {
		t.Fatal(err)
	}
	m := nodes[6]
	if m.Name != MinIOName || m.Listen != "127.0.0.1:20701" || m.Admin != "127.0.0.1:20702" {
		t.Fatalf("--minio-port 20701: MinIO planned as %+v", m)
	}
	if store, err := TierStore(o); err != nil || !strings.Contains(store, "endpoint=127.0.0.1:20701&") {
		t.Fatalf("--minio-port 20701: tier store %q, %v", store, err)
	}

	// A derived port out of range says where it comes from and what to do.
	o.MinIOPort, o.KafkaPort = 0, 65435
	if _, err := Plan(o); err == nil || !strings.Contains(err.Error(), "MinIO's port 65535 (--kafka-port + 100): out of range; give --minio-port") {
		t.Fatalf("--kafka-port 65435 (console on 65536): %v", err)
	}
	o.MinIOPort = 20701
	if _, err := Plan(o); err != nil {
		t.Fatalf("--kafka-port 65435 --minio-port 20701: %v", err)
	}
}

// TestSecondClusterPorts: a second `strata dev` given other first ports
// (--metad-port 17001 --bookie-port 17301 --broker-port 17501 --kafka-port
// 19092) shares no address with one on the defaults, MinIO's included.
func TestSecondClusterPorts(t *testing.T) {
	first, second := DefaultOptions(), DefaultOptions()
	first.BinDir, first.MinIO = "/opt/strata/bin", "/bin/minio"
	second.BinDir, second.MinIO, second.Dir = "/opt/strata/bin", "/bin/minio", "/tmp/second"
	second.MetadPort, second.BookiePort, second.BrokerPort, second.KafkaPort = 17001, 17301, 17501, 19092
	a, err := Plan(first)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Plan(second)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkDisjoint(append(a, b...)); err != nil {
		t.Fatalf("two clusters: %v", err)
	}
	if got := b[6].Listen + " " + b[6].Admin; got != "127.0.0.1:19192 127.0.0.1:19193" {
		t.Fatalf("the second cluster's MinIO listens on %s", got)
	}
}
