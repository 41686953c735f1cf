package metad

import (
	"crypto/tls"
	"fmt"
	"net"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/strata-log/strata/internal/mtls"
	"github.com/strata-log/strata/internal/pki"
)

// Raft transport settings: connections pooled per peer, and the bound on
// one RPC's I/O (hashicorp/raft's own defaults for its TCP transport).
const (
	raftMaxPool = 3
	raftTimeout = 10 * time.Second
)

// newRaftTransport listens for Raft on addr: plaintext TCP when creds is
// nil, else mutual TLS where both ends must hold a certificate of role
// metad (only cluster members speak Raft), checked in the handshake.
func newRaftTransport(addr string, creds *mtls.Credentials, logger hclog.Logger) (*raft.NetworkTransport, error) {
	if !creds.Enabled() {
		return raft.NewTCPTransportWithLogger(addr, nil, raftMaxPool, raftTimeout, logger)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	check := mtls.RequireRole(pki.RoleMetad)
	stream := &tlsStreamLayer{
		Listener: tls.NewListener(ln, creds.ServerTLS(check)),
		creds:    creds,
		check:    check,
	}
	return raft.NewNetworkTransportWithLogger(stream, raftMaxPool, raftTimeout, logger), nil
}

// tlsStreamLayer is a raft.StreamLayer over mutual TLS. Accepted
// connections complete their handshake on first read, in the transport's
// per-connection goroutine, so a slow or hostile peer does not hold up
// the accept loop; one that fails the handshake is dropped there.
type tlsStreamLayer struct {
	net.Listener
	creds *mtls.Credentials
	check func(tls.ConnectionState) error
}

var _ raft.StreamLayer = (*tlsStreamLayer)(nil)

// Dial connects to a peer's Raft address and completes the handshake
// (the server's certificate must hold that address and role metad).
func (l *tlsStreamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	host, _, err := net.SplitHostPort(string(address))
	if err != nil {
		return nil, fmt.Errorf("metad: raft peer %q: %w", address, err)
	}
	d := &net.Dialer{Timeout: timeout}
	conn, err := tls.DialWithDialer(d, "tcp", string(address), l.creds.ClientTLS(host, l.check))
	if err != nil {
		return nil, fmt.Errorf("metad: raft peer %s: %w", address, err)
	}
	return conn, nil
}
