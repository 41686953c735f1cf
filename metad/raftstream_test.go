package metad

import (
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/strata-log/strata/internal/connlimit"
	"github.com/strata-log/strata/internal/mtls"
	"github.com/strata-log/strata/internal/mtls/mtlstest"
	"github.com/strata-log/strata/internal/pki"
	"github.com/strata-log/strata/internal/proctest"
	"github.com/strata-log/strata/internal/testwait"
)

// raftListenerConfig is a member's config for a Raft transport on a free
// port, with caps and a handshake timeout of its own.
func raftListenerConfig(t *testing.T, perIP int, handshake time.Duration) Config {
	cfg := DefaultConfig()
	cfg.RaftListen = proctest.FreeAddr(t)
	cfg.RaftMaxConnectionsPerIP, cfg.HandshakeTimeout = perIP, handshake
	return cfg
}

// startRaftTransport starts a transport with cfg and creds and returns
// it with its guarded listener.
func startRaftTransport(t *testing.T, cfg Config, creds *mtls.Credentials) (*raft.NetworkTransport, *connlimit.Listener) {
	t.Helper()
	trans, ln, err := newRaftTransport(cfg, creds, hclog.NewNullLogger(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { trans.Close() })
	return trans, ln
}

// Only certificates of role metad speak Raft: a member's transport takes
// another member's connection; a broker's certificate fails the handshake
// before the transport sees the connection (counted); a member does not
// talk to a Raft port that answers with a non-metad certificate.
func TestRaftStreamLayerRequiresMetad(t *testing.T) {
	ca := mtlstest.NewCA(t)
	creds := func(role string) *mtls.Credentials { return ca.Credentials(t, role, role) }
	metadCreds, brokerCreds := creds(pki.RoleMetad), creds(pki.RoleBroker)
	member, ln := startRaftTransport(t, raftListenerConfig(t, 10, 10*time.Second), metadCreds)

	// A member's RPC gets an answer: a heartbeat with a term the member
	// refuses still travels the whole way and back.
	peer, _ := startRaftTransport(t, raftListenerConfig(t, 10, 10*time.Second), metadCreds)
	heartbeats := member.Consumer()
	go func() {
		rpc := <-heartbeats
		rpc.Respond(&raft.AppendEntriesResponse{Term: 7}, nil)
	}()
	var resp raft.AppendEntriesResponse
	if err := peer.AppendEntries("m1", member.LocalAddr(), &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{Addr: []byte("peer")}}, &resp); err != nil || resp.Term != 7 {
		t.Fatalf("member to member: %v, term %d", err, resp.Term)
	}

	// A broker's certificate is refused in the handshake: the connection
	// is closed and counted, the transport never reads from it.
	conn, err := tls.Dial("tcp", string(member.LocalAddr()), brokerCreds.ClientTLS("127.0.0.1", nil))
	if err == nil {
		_, err = conn.Read(make([]byte, 1)) // TLS 1.3: the client learns of the refusal on its first read
		conn.Close()
	}
	if err == nil {
		t.Fatal("a broker certificate got a Raft connection")
	}
	testwait.Until(t, 10*time.Second, "the broker's handshake refused", func() bool { return ln.Refused(connlimit.ReasonHandshake) == 1 })

	// A member dialling a Raft port that presents a broker's certificate
	// refuses it.
	impostor, _ := startRaftTransport(t, raftListenerConfig(t, 10, 10*time.Second), brokerCreds)
	dial := &streamLayer{dial: dialTLS(metadCreds, mtls.RequireRole(pki.RoleMetad))}
	if conn, err := dial.Dial(impostor.LocalAddr(), time.Second); !errors.Is(err, mtls.ErrWrongRole) {
		if conn != nil {
			conn.Close()
		}
		t.Fatalf("member dialling a broker's certificate: %v, want ErrWrongRole", err)
	}
}

// In plaintext too the Raft port caps its connections per IP, and closes
// one that sends nothing within the handshake timeout, before the
// transport sees it.
func TestRaftPlaintextCapsIdleConnections(t *testing.T) {
	trans, ln := startRaftTransport(t, raftListenerConfig(t, 3, 50*time.Millisecond), nil)
	var idle []net.Conn
	for range 8 {
		c, err := net.Dial("tcp", string(trans.LocalAddr()))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		idle = append(idle, c)
	}
	testwait.Until(t, 10*time.Second, "5 refused at the per-IP cap, 3 at the handshake timeout", func() bool {
		return ln.Refused(connlimit.ReasonMaxConnectionsPerIP) == 5 && ln.Refused(connlimit.ReasonHandshake) == 3
	})
	for i, c := range idle {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("idle connection %d: %v, want closed by the server", i, err)
		}
	}
}
