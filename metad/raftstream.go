package metad

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/strata-log/strata/internal/connlimit"
	"github.com/strata-log/strata/internal/mtls"
	"github.com/strata-log/strata/internal/pki"
)

// Raft transport settings: connections pooled per peer, and the bound on
// one RPC's I/O (hashicorp/raft's own defaults for its TCP transport).
const (
	raftMaxPool = 3
	raftTimeout = 10 * time.Second
)

// newRaftTransport listens for Raft on cfg.RaftListen. hashicorp/raft's
// NetworkTransport gives every connection it accepts a 256 KiB buffer and
// a goroutine, so connections reach it only through a connlimit.Listener:
// at most cfg.RaftMaxConnections (cfg.RaftMaxConnectionsPerIP from one
// IP), and each only once it completed, within cfg.HandshakeTimeout, the
// mutual TLS handshake with a certificate of role metad (with creds: only
// cluster members speak Raft) or, in plaintext, sent its first byte. The
// listener is returned for its metrics (strata_metad_raft_connections_*).
func newRaftTransport(cfg Config, creds *mtls.Credentials, logger hclog.Logger, log *slog.Logger) (*raft.NetworkTransport, *connlimit.Listener, error) {
	lc := connlimit.Config{
		MaxConnections: cfg.RaftMaxConnections, MaxConnectionsPerIP: cfg.RaftMaxConnectionsPerIP,
		Handshake: connlimit.FirstByte, HandshakeTimeout: cfg.HandshakeTimeout,
		Name: "strata_metad_raft", Help: "Raft", Logger: log,
	}
	stream := &streamLayer{dial: dialPlain}
	if creds.Enabled() {
		check := mtls.RequireRole(pki.RoleMetad)
		lc.Handshake = connlimit.ServerTLS(creds.ServerTLS(check))
		stream.dial = dialTLS(creds, check)
	}
	ln, err := connlimit.Listen(cfg.RaftListen, lc)
	if err != nil {
		return nil, nil, err
	}
	stream.Listener = ln
	return raft.NewNetworkTransportWithLogger(stream, raftMaxPool, raftTimeout, logger), ln, nil
}

// streamLayer is a raft.StreamLayer: the guarded listener, and how to
// dial a peer.
type streamLayer struct {
	net.Listener
	dial func(address string, timeout time.Duration) (net.Conn, error)
}

var _ raft.StreamLayer = (*streamLayer)(nil)

// Dial connects to a peer's Raft address.
func (l *streamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	conn, err := l.dial(string(address), timeout)
	if err != nil {
		return nil, fmt.Errorf("metad: raft peer %s: %w", address, err)
	}
	return conn, nil
}

func dialPlain(address string, timeout time.Duration) (net.Conn, error) {
	return net.DialTimeout("tcp", address, timeout)
}

// dialTLS connects and completes the handshake: the server's certificate
// must hold the address dialled and pass check.
func dialTLS(creds *mtls.Credentials, check func(tls.ConnectionState) error) func(string, time.Duration) (net.Conn, error) {
	return func(address string, timeout time.Duration) (net.Conn, error) {
		host, _, err := net.SplitHostPort(address)
		if err != nil {
			return nil, err
		}
		d := &net.Dialer{Timeout: timeout}
		return tls.DialWithDialer(d, "tcp", address, creds.ClientTLS(host, check))
	}
}
