package devcluster

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Roles, in start order: metad first, since everything registers there;
// brokers last, once bookies can store their ledgers and MinIO (RoleMinIO,
// started with the bookies) their objects.
const (
	RoleMetad  = "metad"
	RoleBookie = "bookie"
	RoleBroker = "broker"
)

// Options describes the cluster to run.
type Options struct {
	// Dir holds data, logs, the state file and the profile (default .strata).
	Dir string
	// BinDir holds the role binaries (metad, ...): by default the directory
	// of the running strata binary.
	BinDir string
	// Metad is the number of metad members (1, 3 or 5; default 3).
	Metad int
	// Bookies is the number of bookies (default 3; 0 for metad only).
	Bookies int
	// BookiePort is the first bookie port; admin ports are +100 (defaults
	// 7301, 7401).
	BookiePort int
	// Host is the loopback address nodes listen on (default 127.0.0.1).
	Host string
	// Hosts gives nodes, by name ("metad-1", "bookie-2", "minio"), an
	// address of their own instead of Host: the nodes of a cluster whose
	// every node runs in its own network namespace (Netns).
	Hosts map[string]string
	// Netns runs nodes, by name, inside the named network namespace
	// (`ip netns exec NS`), so that a test can cut the links between them.
	Netns map[string]string
	// MetadPort is the first metad client port; raft ports are +100 and
	// admin ports +200 (defaults 7001, 7101, 7201).
	MetadPort int
	// Brokers is the number of brokers (default 2; 0 for none).
	Brokers int
	// BrokerPort is the first broker gRPC port, the one the CLI and the Go
	// client use; admin ports are +100 (defaults 7501, 7601).
	BrokerPort int
	// KafkaPort is the first broker's Kafka protocol port; broker i
	// listens on KafkaPort+i-1 (default 9092, Kafka's).
	KafkaPort int
	// MinIO is the minio binary to run as the brokers' object store (see
	// FindMinIO); empty: no MinIO, the brokers tier to the directory
	// DIR/tier instead. Without brokers MinIO does not run.
	MinIO string
	// MinIOPort is MinIO's S3 port; its console is on +1. Zero (the
	// default) derives it from KafkaPort, as admin ports are derived from
	// their role's first port: KafkaPort+100, console +101 (9192, 9193 by
	// default; see MinIOPortOffset).
	MinIOPort int
	// TLS runs every node with mutual TLS: certificates under Dir/tls
	// (WriteCertificates, before the nodes start) and the TLS flags.
	TLS bool
	// BrokerArgs are added after every broker's planned arguments (a flag
	// given again overrides the planned one): `strata bench suite` turns
	// tiering off with "--tier-store=".
	BrokerArgs []string
	// BookieArgs are added after every bookie's planned arguments, as
	// BrokerArgs are for brokers.
	BookieArgs []string
	// NodeEnv is added to the environment of nodes, by name, after Env.
	NodeEnv map[string][]string
	// Env is added to every node's environment, after what the plan sets
	// (`strata bench suite --profile` sets STRATA_ENABLE_PPROF=true).
	Env []string
}

// DefaultOptions returns the defaults.
func DefaultOptions() Options {
	return Options{Dir: ".strata", Metad: 3, Bookies: 3, Host: "127.0.0.1", MetadPort: 7001, BookiePort: 7301,
		Brokers: 2, BrokerPort: 7501, KafkaPort: 9092}
}

// MinIOPortOffset is how far above the first Kafka port MinIO's S3 port
// is when Options.MinIOPort is zero; its console is one above that. A
// cluster's Kafka ports run from KafkaPort to at most KafkaPort+19 (20
// brokers), so MinIO's two ports are never one of them; and the Kafka
// block is the highest of the default layout (metad 7001-7205, bookies
// 7301-7420, brokers 7501-7620, Kafka 9092-9111, MinIO 9192-9193), so
// every port of a cluster, MinIO's too, follows from the four first ports:
// a second cluster given other first ports (e.g. each +10000) gets other
// MinIO ports as well. Plan refuses any layout in which two ranges
// overlap.
const MinIOPortOffset = 100

// minIOPort is MinIO's S3 port: Options.MinIOPort when given, else
// KafkaPort+MinIOPortOffset.
func (o Options) minIOPort() int {
	if o.MinIOPort != 0 {
		return o.MinIOPort
	}
	return o.KafkaPort + MinIOPortOffset
}

// Validate says what is wrong with o.
func (o Options) Validate() error {
	var errs []error
	if o.Dir == "" {
		errs = append(errs, errors.New("--dir is required"))
	}
	if o.Metad != 1 && o.Metad != 3 && o.Metad != 5 {
		errs = append(errs, fmt.Errorf("--metad %d: want 1, 3 or 5", o.Metad))
	}
	if o.MetadPort < 1024 || o.MetadPort+200+o.Metad > 65535 {
		errs = append(errs, fmt.Errorf("--metad-port %d: out of range", o.MetadPort))
	}
	if o.Bookies < 0 || o.Bookies > 20 {
		errs = append(errs, fmt.Errorf("--bookies %d: want 0 to 20", o.Bookies))
	}
	if o.Bookies > 0 && (o.BookiePort < 1024 || o.BookiePort+100+o.Bookies > 65535) {
		errs = append(errs, fmt.Errorf("--bookie-port %d: out of range", o.BookiePort))
	}
	if o.Brokers < 0 || o.Brokers > 20 {
		errs = append(errs, fmt.Errorf("--brokers %d: want 0 to 20", o.Brokers))
	}
	if o.Brokers > 0 && (o.BrokerPort < 1024 || o.BrokerPort+100+o.Brokers > 65535) {
		errs = append(errs, fmt.Errorf("--broker-port %d: out of range", o.BrokerPort))
	}
	if o.Brokers > 0 && (o.KafkaPort < 1024 || o.KafkaPort+o.Brokers > 65535) {
		errs = append(errs, fmt.Errorf("--kafka-port %d: out of range", o.KafkaPort))
	}
	if p := o.minIOPort(); o.runsMinIO() && (p < 1024 || p+1 > 65535) {
		if o.MinIOPort == 0 {
			errs = append(errs, fmt.Errorf("MinIO's port %d (--kafka-port + %d): out of range; give --minio-port", p, MinIOPortOffset))
		} else {
			errs = append(errs, fmt.Errorf("--minio-port %d: out of range", p))
		}
	}
	return errors.Join(errs...)
}

// Node is one process of the cluster, as recorded in the state file.
type Node struct {
	Name   string `json:"name"`
	Role   string `json:"role"`
	ID     string `json:"id"`
	PID    int    `json:"pid"`
	Listen string `json:"listen"`
	Admin  string `json:"admin"`
	Raft   string `json:"raft,omitempty"`
	// Kafka is a broker's Kafka protocol address (what clients such as
	// kcat bootstrap from).
	Kafka   string   `json:"kafka,omitempty"`
	DataDir string   `json:"data_dir"`
	LogFile string   `json:"log_file"`
	Bin     string   `json:"bin"`
	Args    []string `json:"args"`
	// Netns is the network namespace the node runs in (empty: the
	// caller's).
	Netns string `json:"netns,omitempty"`
	// Env is added to the inherited environment: the object store's
	// credentials, for MinIO and the brokers. It is kept here so that
	// 'strata dev start' passes them again.
	Env []string `json:"env,omitempty"`
}

// Plan computes every node's addresses, directories and arguments. It
// starts nothing.
func Plan(o Options) ([]Node, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	nodes := planMetad(o)
	metadEndpoints := strings.Join(Endpoints(nodes, RoleMetad), ",")
	tierStore, err := TierStore(o)
	if err != nil {
		return nil, err
	}
	nodes = append(nodes, planBookies(o, metadEndpoints)...)
	if o.runsMinIO() {
		nodes = append(nodes, planMinIO(o))
	}
	nodes = append(nodes, planBrokers(o, metadEndpoints, tierStore)...)
	for i := range nodes {
		nodes[i].Env = append(nodes[i].Env, o.Env...)
		nodes[i].Env = append(nodes[i].Env, o.NodeEnv[nodes[i].Name]...)
	}
	if err := checkDisjoint(nodes); err != nil {
		return nil, err
	}
	return nodes, nil
}

// Addresses lists every address n listens on.
func (n Node) Addresses() []string {
	var out []string
	for _, a := range []string{n.Listen, n.Admin, n.Raft, n.Kafka} {
		if a != "" {
			out = append(out, a)
		}
	}
	return out
}

// checkDisjoint refuses a plan in which two listeners share an address
// (port flags whose ranges overlap), naming the first two.
func checkDisjoint(nodes []Node) error {
	owner := map[string]string{}
	for _, n := range nodes {
		for _, a := range n.Addresses() {
			if o, ok := owner[a]; ok {
				hint := ""
				if o == MinIOName || n.Name == MinIOName {
					hint = fmt.Sprintf(" (MinIO's ports are --kafka-port + %d and + %d unless --minio-port is given)", MinIOPortOffset, MinIOPortOffset+1)
				}
				return fmt.Errorf("devcluster: %s and %s would both listen on %s: move one of the port ranges%s", o, n.Name, a, hint)
			}
			owner[a] = n.Name
		}
	}
	return nil
}

// planMetad plans the metad nodes: client ports from MetadPort, Raft
// ports 100 above, admin ports 200 above; each lists every peer's Raft
// address.
func planMetad(o Options) []Node {
	var peers []string
	for i := 1; i <= o.Metad; i++ {
		peers = append(peers, fmt.Sprintf("%d=%s", i, o.addr(fmt.Sprintf("metad-%d", i), o.MetadPort+100+i-1)))
	}
	var nodes []Node
	for i := 1; i <= o.Metad; i++ {
		n := serverNode(o, RoleMetad, fmt.Sprintf("metad-%d", i), fmt.Sprint(i), o.MetadPort+i-1, o.MetadPort+200+i-1)
		n.Raft = o.addr(n.Name, o.MetadPort+100+i-1)
		n.Args = []string{
			"--id", n.ID, "--data-dir", n.DataDir, "--listen", n.Listen, "--raft-listen", n.Raft,
			"--admin-listen", n.Admin, "--peers", strings.Join(peers, ","),
		}
		n.Args = append(n.Args, nodeTLSArgs(o, n.Name)...)
		nodes = append(nodes, n)
	}
	return nodes
}

// planBookies plans the bookies: client ports from BookiePort, admin
// ports 100 above.
func planBookies(o Options, metadEndpoints string) []Node {
	var nodes []Node
	for i := 1; i <= o.Bookies; i++ {
		n := serverNode(o, RoleBookie, fmt.Sprintf("bookie-%d", i), fmt.Sprintf("b%d", i), o.BookiePort+i-1, o.BookiePort+100+i-1)
		n.Args = []string{
			"--id", n.ID, "--data-dir", n.DataDir, "--listen", n.Listen, "--admin-listen", n.Admin,
			"--metad", metadEndpoints,
		}
		n.Args = append(n.Args, nodeTLSArgs(o, n.Name)...)
		n.Args = append(n.Args, o.BookieArgs...)
		nodes = append(nodes, n)
	}
	return nodes
}

// planBrokers plans the brokers: gRPC ports from BrokerPort, admin ports
// 100 above, Kafka protocol ports from KafkaPort, tiering to tierStore;
// o.BrokerArgs come last, so they win.
func planBrokers(o Options, metadEndpoints, tierStore string) []Node {
	var nodes []Node
	for i := 1; i <= o.Brokers; i++ {
		n := serverNode(o, RoleBroker, fmt.Sprintf("broker-%d", i), fmt.Sprintf("k%d", i), o.BrokerPort+i-1, o.BrokerPort+100+i-1)
		n.Kafka = o.addr(n.Name, o.KafkaPort+i-1)
		// Brokers keep no state on disk (cmd/broker has no --data-dir):
		// DataDir is reserved for them but not passed. A short drain keeps
		// Ctrl-C quick: when every broker stops at once none can take the
		// others' partitions, and a dev cluster's hand-over takes ~1 s.
		// Small objects, uploaded soon, so a dev cluster shows its history
		// moving to the store within a minute.
		n.Args = []string{"--id", n.ID, "--listen", n.Listen, "--admin-listen", n.Admin, "--kafka-listen", n.Kafka, "--metad", metadEndpoints,
			"--drain-timeout", "3s", "--tier-segment-bytes", "8388608", "--tier-max-delay", "30s", "--tier-check-interval", "5s",
			"--tier-store", tierStore}
		n.Args = append(n.Args, nodeTLSArgs(o, n.Name)...)
		n.Args = append(n.Args, o.BrokerArgs...)
		n.Env = brokerRuntimeEnv(os.Getenv("GODEBUG"))
		if o.runsMinIO() {
			n.Env = append(n.Env, brokerTierEnv()...)
		}
		nodes = append(nodes, n)
	}
	return nodes
}

// serverNode is a Strata server process of role on the given client and
// admin ports, with its data directory, log file and binary under o's.
func serverNode(o Options, role, name, id string, listenPort, adminPort int) Node {
	return Node{
		Name: name, Role: role, ID: id, Listen: o.addr(name, listenPort), Admin: o.addr(name, adminPort),
		Netns:   o.Netns[name],
		DataDir: filepath.Join(o.Dir, name), LogFile: filepath.Join(o.Dir, "logs", name+".log"),
		Bin: filepath.Join(o.BinDir, role),
	}
}

// nodeTLSArgs is the TLS flags of node name with o.TLS, none without.
func nodeTLSArgs(o Options, name string) []string {
	if !o.TLS {
		return nil
	}
	return tlsArgs(o.Dir, name)
}

// addr is the address of node name at port: its own host from o.Hosts,
// else o.Host.
func (o Options) addr(name string, port int) string {
	return net.JoinHostPort(o.host(name), strconv.Itoa(port))
}

// host is node name's host: its own from o.Hosts, else o.Host.
func (o Options) host(name string) string {
	if h, ok := o.Hosts[name]; ok {
		return h
	}
	return o.Host
}

// Endpoints lists the client addresses of the nodes with the given role.
func Endpoints(nodes []Node, role string) []string {
	var out []string
	for _, n := range nodes {
		if n.Role == role {
			out = append(out, n.Listen)
		}
	}
	return out
}

// brokerRuntimeEnv is the Go runtime setting brokers run with, added to
// the user's GODEBUG (their own madvdontneed wins): memory the runtime
// returns to the kernel is released with MADV_FREE, not MADV_DONTNEED.
// The tier chunk cache turns over 8 MiB buffers, and with MADV_DONTNEED
// every reuse of returned memory faults its pages back in: a cold 1 GiB
// catch-up from the object store reached 76% of a plain GET's rate with
// it and 89% without (tiering TestCatchUpThroughput, docs/tiering.md).
// The image sets the same (deploy/docker/strata.Dockerfile). The cost:
// RSS falls only when the kernel reclaims those pages, under memory
// pressure.
func brokerRuntimeEnv(godebug string) []string {
	switch {
	case strings.Contains(godebug, "madvdontneed="):
		return nil
	case godebug == "":
		return []string{"GODEBUG=madvdontneed=0"}
	}
	return []string{"GODEBUG=" + godebug + ",madvdontneed=0"}
}
