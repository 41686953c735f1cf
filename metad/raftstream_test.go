package metad

import (
	"crypto/tls"
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/strata-log/strata/internal/mtls"
	"github.com/strata-log/strata/internal/mtls/mtlstest"
	"github.com/strata-log/strata/internal/pki"
	"github.com/strata-log/strata/internal/proctest"
)

// Only certificates of role metad speak Raft: a member's stream layer
// accepts another member and refuses a broker's certificate, and a member
// does not talk to a Raft port that answers with a non-metad certificate.
func TestRaftStreamLayerRequiresMetad(t *testing.T) {
	ca := mtlstest.NewCA(t)
	creds := func(role string) *mtls.Credentials { return ca.Credentials(t, role, role) }
	check := mtls.RequireRole(pki.RoleMetad)
	layer := func(c *mtls.Credentials) *tlsStreamLayer {
		ln := proctest.Listen(t)
		return &tlsStreamLayer{Listener: tls.NewListener(ln, c.ServerTLS(check)), creds: c, check: check}
	}
	// serverSide accepts one connection and returns its handshake's error.
	serverSide := func(l *tlsStreamLayer) <-chan error {
		out := make(chan error, 1)
		go func() {
			conn, err := l.Accept()
			if err != nil {
				out <- err
				return
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
			out <- conn.(*tls.Conn).Handshake()
		}()
		return out
	}
	metadCreds, brokerCreds := creds(pki.RoleMetad), creds(pki.RoleBroker)
	member := layer(metadCreds)

	accepted := serverSide(member)
	conn, err := layer(metadCreds).Dial(raftAddr(member), time.Second)
	if err != nil {
		t.Fatalf("member to member: %v", err)
	}
	if err := <-accepted; err != nil {
		t.Fatalf("member accepting a member: %v", err)
	}
	conn.Close()

	accepted = serverSide(member)
	if conn, err := layer(brokerCreds).Dial(raftAddr(member), time.Second); err == nil {
		conn.Close()
	}
	if err := <-accepted; !errors.Is(err, mtls.ErrWrongRole) {
		t.Fatalf("member accepting a broker certificate: %v, want ErrWrongRole", err)
	}

	impostor := layer(brokerCreds)
	go func() {
		if conn, err := impostor.Accept(); err == nil {
			_ = conn.(*tls.Conn).Handshake()
			conn.Close()
		}
	}()
	if conn, err := layer(metadCreds).Dial(raftAddr(impostor), time.Second); !errors.Is(err, mtls.ErrWrongRole) {
		if conn != nil {
			conn.Close()
		}
		t.Fatalf("member dialling a broker's certificate: %v, want ErrWrongRole", err)
	}
}

func raftAddr(l *tlsStreamLayer) raft.ServerAddress { return raft.ServerAddress(l.Addr().String()) }
