package mtls

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"

	"github.com/strata-log/strata/internal/pki"
)

// Sentinel errors.
var (
	// ErrNoPeer: the call came without a verified TLS client certificate.
	ErrNoPeer = errors.New("mtls: no verified peer certificate")
	// ErrWrongRole: the peer's certificate names another role.
	ErrWrongRole = errors.New("mtls: peer has the wrong role")
)

// Credentials are a node's TLS material. The zero of *Credentials (nil)
// is plaintext.
type Credentials struct {
	reloader *pki.Reloader
}

// Load reads f's files; it returns nil (plaintext) when f names none, and
// pki.ErrInvalid when it names some but not all three.
func Load(f pki.Files) (*Credentials, error) {
	if f == (pki.Files{}) {
		return nil, nil
	}
	r, err := pki.NewReloader(f, pki.DefaultCheckInterval)
	if err != nil {
		return nil, fmt.Errorf("mtls: %w", err)
	}
	return &Credentials{reloader: r}, nil
}

// Enabled reports whether c is TLS (non-nil).
func (c *Credentials) Enabled() bool { return c != nil }

// Reloader is the certificate source (nil when plaintext).
func (c *Credentials) Reloader() *pki.Reloader {
	if c == nil {
		return nil
	}
	return c.reloader
}

// ServerOption is the gRPC server's transport credential: mTLS, or none
// (plaintext) when c is nil.
func (c *Credentials) ServerOption() grpc.ServerOption {
	if c == nil {
		return grpc.Creds(insecure.NewCredentials())
	}
	return grpc.Creds(credentials.NewTLS(c.reloader.ServerConfig()))
}

// Transport is the credential for dialling another node: TLS presenting
// the node's current certificate and checking the server's against the
// current CA bundle and the host dialled; insecure when c is nil.
func (c *Credentials) Transport() credentials.TransportCredentials {
	if c == nil {
		return insecure.NewCredentials()
	}
	return &reloadingClient{r: c.reloader}
}

// DialOption is Transport as a dial option.
func (c *Credentials) DialOption() grpc.DialOption {
	return grpc.WithTransportCredentials(c.Transport())
}

// ServerTLS is the tls.Config of a TLS listener (mTLS); every peer must
// also pass check, when not nil. REQUIRES: c not nil.
func (c *Credentials) ServerTLS(check func(tls.ConnectionState) error) *tls.Config {
	base := c.reloader.ServerConfig()
	if check == nil {
		return base
	}
	perClient := base.GetConfigForClient
	base.GetConfigForClient = func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		cfg, err := perClient(h)
		if err != nil {
			return nil, err
		}
		cfg.VerifyConnection = both(cfg.VerifyConnection, check)
		return cfg, nil
	}
	return base
}

// ClientTLS is the tls.Config of one connection to serverName (a host
// name or an IP address); the server must also pass check, when not nil.
// REQUIRES: c not nil.
func (c *Credentials) ClientTLS(serverName string, check func(tls.ConnectionState) error) *tls.Config {
	cfg := c.reloader.ClientConfig(serverName)
	cfg.VerifyConnection = both(cfg.VerifyConnection, check)
	return cfg
}

// both runs first (the revocation check pki installs), then second.
func both(first, second func(tls.ConnectionState) error) func(tls.ConnectionState) error {
	if first == nil || second == nil {
		if first == nil {
			return second
		}
		return first
	}
	return func(cs tls.ConnectionState) error {
		if err := first(cs); err != nil {
			return err
		}
		return second(cs)
	}
}

// RequireRole returns a VerifyConnection check that admits only
// certificates naming role.
func RequireRole(role string) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return ErrNoPeer
		}
		id, err := pki.IdentityOf(cs.PeerCertificates[0])
		if err != nil {
			return err
		}
		if id.Role != role {
			return fmt.Errorf("%w: %s, want role %s", ErrWrongRole, id, role)
		}
		return nil
	}
}

// PeerIdentity is the identity of a gRPC call's verified client
// certificate.
func PeerIdentity(ctx context.Context) (pki.Identity, error) {
	p, ok := peer.FromContext(ctx)
	if !ok || p.AuthInfo == nil {
		return pki.Identity{}, ErrNoPeer
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
		return pki.Identity{}, ErrNoPeer
	}
	return pki.IdentityOf(info.State.VerifiedChains[0][0])
}

// reloadingClient is a gRPC client credential that builds its tls.Config
// per handshake, so a rotated certificate or CA bundle is used from the
// next connection on. Server handshakes are not its job.
type reloadingClient struct {
	r          *pki.Reloader
	serverName string // override, from OverrideServerName
}

func (t *reloadingClient) ClientHandshake(ctx context.Context, authority string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	// An empty ServerName makes gRPC's TLS credential use the authority's
	// host, the address dialled.
	return credentials.NewTLS(t.r.ClientConfig(t.serverName)).ClientHandshake(ctx, authority, conn)
}

func (t *reloadingClient) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("mtls: a client credential does not serve")
}

func (t *reloadingClient) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "tls"}
}

func (t *reloadingClient) Clone() credentials.TransportCredentials {
	c := *t
	return &c
}

// OverrideServerName is part of the TransportCredentials interface.
func (t *reloadingClient) OverrideServerName(name string) error {
	t.serverName = name
	return nil
}
