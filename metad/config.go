package metad

import (
	"errors"
	"fmt"
	"net"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/strata-log/strata/internal/config"
)

// Config is one metad member's configuration. Fill it with DefaultConfig,
// override fields, then call Validate.
type Config struct {
	// ID names this member in the Raft configuration; it must appear in Peers
	// when the cluster is bootstrapped.
	ID string `mapstructure:"id"`
	// DataDir holds the Raft log and stable store (Pebble) and snapshots.
	DataDir string `mapstructure:"data-dir"`
	// Endpoints: the client gRPC address; Advertise (default Listen) is
	// the client address other members and clients use to reach this one;
	// the admin HTTP address.
	config.Endpoints `mapstructure:",squash"`
	// RaftListen is the Raft transport address; it is also advertised, so it
	// must be reachable by the peers (not 0.0.0.0).
	RaftListen string `mapstructure:"raft-listen"`
	// RaftMaxConnections and RaftMaxConnectionsPerIP cap the connections
	// of the Raft address (peers keep a few each); the rest are closed at
	// accept and counted.
	RaftMaxConnections      int `mapstructure:"raft-max-connections"`
	RaftMaxConnectionsPerIP int `mapstructure:"raft-max-connections-per-ip"`
	// Exposure: pprof on the admin address, gRPC reflection.
	config.Exposure `mapstructure:",squash"`
	// Security: TLS certificate files (serving and dialling peers, mTLS)
	// and --insecure.
	config.Security `mapstructure:",squash"`
	// Limits: the gRPC and admin listeners' caps and timeouts (the Raft
	// address's handshake too).
	config.Limits `mapstructure:",squash"`
	// Peers lists the initial voters as "id=raftAddress,...". It is used only
	// to bootstrap a member that has no Raft state yet.
	Peers string `mapstructure:"peers"`
	// Join starts a member without bootstrapping: it waits to be added with
	// `strata meta member add`.
	Join bool `mapstructure:"join"`

	// HeartbeatTimeout and ElectionTimeout bound how long a follower waits
	// for the leader before starting an election.
	HeartbeatTimeout time.Duration `mapstructure:"heartbeat-timeout"`
	ElectionTimeout  time.Duration `mapstructure:"election-timeout"`
	// RequestTimeout bounds a request whose context carries no deadline.
	RequestTimeout time.Duration `mapstructure:"request-timeout"`
	// SnapshotThreshold is the number of log entries between snapshots.
	SnapshotThreshold uint64 `mapstructure:"snapshot-threshold"`
	// HistoryRevisions is how many recent revisions watches can resume from.
	HistoryRevisions int `mapstructure:"history-revisions"`
	// HistoryBytes bounds the key and value bytes of that history (the
	// newest revision always stays): every member keeps it in memory.
	HistoryBytes int64 `mapstructure:"history-bytes"`
	// MaxTxnOps caps the compares, and separately the ops, of one
	// transaction.
	MaxTxnOps int `mapstructure:"max-txn-ops"`
	// QuotaKeys, QuotaBytes and QuotaLeases bound the live keys, their key
	// and value bytes, and the granted leases: writes that would grow past
	// them fail with RESOURCE_EXHAUSTED. The leader stamps its values on
	// each command it proposes (kv rule L1), so members may differ safely;
	// the leader's values apply.
	QuotaKeys   int64 `mapstructure:"quota-keys"`
	QuotaBytes  int64 `mapstructure:"quota-bytes"`
	QuotaLeases int64 `mapstructure:"quota-leases"`
	// NoSync turns off fsync of the Raft log: benchmarks of CPU only, never
	// production.
	NoSync bool `mapstructure:"no-sync"`

	config.Logging `mapstructure:",squash"`
}

// DefaultConfig returns the defaults for every field that has one.
func DefaultConfig() Config {
	return Config{
		Exposure:   config.DefaultExposure(),
		Endpoints:  config.Endpoints{Listen: "127.0.0.1:7001", AdminListen: "127.0.0.1:7201"},
		RaftListen: "127.0.0.1:7101",
		// A member keeps up to raftMaxPool connections to each peer, plus
		// one for pipelined appends and one per snapshot sent.
		RaftMaxConnections:      128,
		RaftMaxConnectionsPerIP: 64,
		Limits:                  config.DefaultLimits(),
		HeartbeatTimeout:        500 * time.Millisecond,
		ElectionTimeout:         500 * time.Millisecond,
		RequestTimeout:          5 * time.Second,
		SnapshotThreshold:       8192,
		HistoryRevisions:        10000,
		HistoryBytes:            64 << 20,
		MaxTxnOps:               128,
		QuotaKeys:               1_000_000,
		QuotaBytes:              512 << 20,
		QuotaLeases:             100_000,
		Logging:                 config.DefaultLogging(),
	}
}

var memberIDPattern = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// ValidateMemberID says what is wrong with a member id, or nil.
func ValidateMemberID(id string) error {
	if !memberIDPattern.MatchString(id) {
		return fmt.Errorf("metad: member id %q: want 1-64 characters of [a-zA-Z0-9_-]", id)
	}
	return nil
}

// Validate reports every problem with the configuration.
func (c Config) Validate() error {
	var errs []error
	if err := ValidateMemberID(c.ID); err != nil {
		errs = append(errs, fmt.Errorf("--id: %w", err))
	}
	if c.DataDir == "" {
		errs = append(errs, errors.New("--data-dir is required"))
	}
	for _, a := range []struct{ flag, addr string }{
		{"--listen", c.Listen}, {"--raft-listen", c.RaftListen}, {"--admin-listen", c.AdminListen},
	} {
		if _, _, err := net.SplitHostPort(a.addr); err != nil {
			errs = append(errs, fmt.Errorf("%s %q: %w", a.flag, a.addr, err))
		}
	}
	if host, _, err := net.SplitHostPort(c.RaftListen); err == nil {
		if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
			errs = append(errs, fmt.Errorf("--raft-listen %q: must be an address peers can reach, not %s", c.RaftListen, host))
		}
	}
	peers, err := ParsePeers(c.Peers)
	switch {
	case err != nil:
		errs = append(errs, fmt.Errorf("--peers: %w", err))
	case !c.Join && len(peers) == 0:
		errs = append(errs, errors.New("--peers is required unless --join is set"))
	case !c.Join:
		if _, ok := peers[c.ID]; !ok {
			errs = append(errs, fmt.Errorf("--peers does not list this member's --id %q", c.ID))
		}
	}
	if c.HeartbeatTimeout < 10*time.Millisecond || c.ElectionTimeout < 10*time.Millisecond {
		errs = append(errs, errors.New("--heartbeat-timeout and --election-timeout must be at least 10ms"))
	}
	if c.RequestTimeout <= 0 {
		errs = append(errs, errors.New("--request-timeout must be positive"))
	}
	if c.HistoryRevisions < 1 {
		errs = append(errs, errors.New("--history-revisions must be at least 1"))
	}
	if c.HistoryBytes < 1 {
		errs = append(errs, errors.New("--history-bytes must be at least 1"))
	}
	if c.MaxTxnOps < 1 {
		errs = append(errs, errors.New("--max-txn-ops must be at least 1"))
	}
	if c.QuotaKeys < 1 || c.QuotaBytes < 1 || c.QuotaLeases < 1 {
		errs = append(errs, errors.New("--quota-keys, --quota-bytes and --quota-leases must be at least 1"))
	}
	if c.SnapshotThreshold < 1 {
		errs = append(errs, errors.New("--snapshot-threshold must be at least 1"))
	}
	if c.RaftMaxConnections < 1 || c.RaftMaxConnectionsPerIP < 1 {
		errs = append(errs, errors.New("--raft-max-connections and --raft-max-connections-per-ip must be at least 1"))
	}
	if err := c.Limits.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Security.Check(c.Listen, c.AdminListen, config.Listener{Flag: "raft-listen", Addr: c.RaftListen, TLSCapable: true}); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (c Config) String() string {
	return fmt.Sprintf("id=%s data-dir=%s listen=%s raft-listen=%s admin-listen=%s peers=%s join=%t heartbeat=%s election=%s "+
		"history-revisions=%d history-bytes=%d max-txn-ops=%d quota-keys=%d quota-bytes=%d quota-leases=%d",
		c.ID, c.DataDir, c.Listen, c.RaftListen, c.AdminListen, c.Peers, c.Join, c.HeartbeatTimeout, c.ElectionTimeout,
		c.HistoryRevisions, c.HistoryBytes, c.MaxTxnOps, c.QuotaKeys, c.QuotaBytes, c.QuotaLeases) + " " + c.Security.String() +
		fmt.Sprintf(" raft-max-connections=%d raft-max-connections-per-ip=%d ", c.RaftMaxConnections, c.RaftMaxConnectionsPerIP) + c.Limits.String()
}

// ParsePeers parses "id=addr,id=addr". An empty string gives no peers.
func ParsePeers(s string) (map[string]string, error) {
	peers := map[string]string{}
	if strings.TrimSpace(s) == "" {
		return peers, nil
	}
	for _, part := range strings.Split(s, ",") {
		id, addr, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return nil, fmt.Errorf("%q: want id=host:port", part)
		}
		if err := ValidateMemberID(id); err != nil {
			return nil, err
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, fmt.Errorf("peer %s: %w", id, err)
		}
		if _, dup := peers[id]; dup {
			return nil, fmt.Errorf("peer %s listed twice", id)
		}
		peers[id] = addr
	}
	return peers, nil
}

// sortedIDs returns the keys of m in order.
func sortedIDs(m map[string]string) []string {
	ids := make([]string, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}
