// Package mtlstest issues certificates and mutual TLS credentials for
// tests: a CA whose certificate is written to a temporary directory, and
// node credentials of a given role loaded from files, as a node loads
// them.
package mtlstest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"github.com/strata-log/strata/internal/mtls"
	"github.com/strata-log/strata/internal/pki"
)

// CA is a test certificate authority with its files in Dir.
type CA struct {
	*pki.CA
	Dir    string // where certificates are written
	CAFile string // the CA certificate (PEM)
}

// NewCA returns a CA valid for an hour, its certificate written to a new
// temporary directory of t.
func NewCA(t testing.TB) *CA {
	t.Helper()
	ca, err := pki.NewCA("test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	c := &CA{CA: ca, Dir: t.TempDir()}
	c.CAFile = filepath.Join(c.Dir, "ca.crt")
	if err := os.WriteFile(c.CAFile, ca.CertPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	return c
}

// Credentials issues a certificate of role, named name, valid for
// 127.0.0.1 for an hour, writes it to Dir and loads it.
func (c *CA) Credentials(t testing.TB, role, name string) *mtls.Credentials {
	t.Helper()
	certPEM, keyPEM, err := c.Issue(pki.Request{Role: role, Name: name, Hosts: []string{"127.0.0.1"}, NotAfter: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	f, err := pki.WriteFiles(c.Dir, name, certPEM, keyPEM, c.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	creds, err := mtls.Load(f)
	if err != nil {
		t.Fatal(err)
	}
	return creds
}

// PeerAddr is the address of PeerContext's peer (TEST-NET-1).
var PeerAddr = &net.TCPAddr{IP: net.IPv4(192, 0, 2, 4), Port: 5000}

// PeerContext returns a context whose gRPC peer, at PeerAddr, presented a
// verified certificate of role, named name, issued by c: what a server's
// handler sees of a mutual TLS caller (mtls.PeerIdentity reads it).
func (c *CA) PeerContext(t testing.TB, role, name string) context.Context {
	t.Helper()
	certPEM, _, err := c.Issue(pki.Request{Role: role, Name: name, NotAfter: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	cert, err := pki.ParseCertPEM(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	info := credentials.TLSInfo{State: tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert},
		VerifiedChains: [][]*x509.Certificate{{cert, c.Cert}}}}
	return peer.NewContext(context.Background(), &peer.Peer{Addr: PeerAddr, AuthInfo: info})
}
