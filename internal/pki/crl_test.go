package pki

import (
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func serialOf(t *testing.T, f Files) *big.Int {
	t.Helper()
	certPEM, err := os.ReadFile(f.Cert)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ParseCertPEM(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	return c.SerialNumber
}

func writeCRL(t *testing.T, path string, ca *CA, number int64, serials ...*big.Int) {
	t.Helper()
	crl, err := ca.CRL(number, time.Hour, serials...)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, crl, 0o644); err != nil {
		t.Fatal(err)
	}
}

// withCRL is r's files with a CRL file, loaded again (checking on every
// handshake).
func withCRL(t *testing.T, f Files, crl string) *Reloader {
	t.Helper()
	f.CRL = crl
	r, err := NewReloader(f, time.Nanosecond)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// A certificate a CRL of the CA lists is refused both ways: a server
// refuses such a client, a client refuses such a server. Publishing a new
// CRL revokes from the next handshake on; a CRL that does not load
// leaves the previous one in use.
func TestRevocation(t *testing.T) {
	ca, err := NewCA("test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	caFile := writeCA(t, ca)
	_, brokerFiles := node(t, ca, caFile, Request{Role: RoleBroker, Name: "k1", Hosts: []string{"127.0.0.1"}})
	_, aliceFiles := node(t, ca, caFile, Request{Role: RoleUser, Name: "alice"})
	_, bobFiles := node(t, ca, caFile, Request{Role: RoleUser, Name: "bob"})
	crlFile := filepath.Join(t.TempDir(), "ca.crl")
	writeCRL(t, crlFile, ca, 1, serialOf(t, bobFiles))

	broker := withCRL(t, brokerFiles, crlFile)
	alice := withCRL(t, aliceFiles, crlFile)
	bob := withCRL(t, bobFiles, crlFile)

	if _, _, serr, cerr := handshake(broker.ServerConfig(), alice.ClientConfig("127.0.0.1")); serr != nil || cerr != nil {
		t.Fatalf("alice, not revoked: server %v, client %v", serr, cerr)
	}
	_, _, serr, cerr := handshake(broker.ServerConfig(), bob.ClientConfig("127.0.0.1"))
	if !errors.Is(serr, ErrRevoked) {
		t.Fatalf("bob, revoked: server %v, client %v; want the server to refuse with ErrRevoked", serr, cerr)
	}
	// The client side: bob as a server (its certificate holds no
	// 127.0.0.1, so dial by its name) is refused by alice.
	_, bobServer := node(t, ca, caFile, Request{Role: RoleBroker, Name: "k2", Hosts: []string{"k2"}})
	writeCRL(t, crlFile, ca, 2, serialOf(t, bobFiles), serialOf(t, bobServer))
	k2 := withCRL(t, bobServer, crlFile)
	if _, _, serr, cerr := handshake(k2.ServerConfig(), alice.ClientConfig("k2")); !errors.Is(cerr, ErrRevoked) || serr == nil {
		t.Fatalf("a revoked server: server %v, client %v; want the client to refuse with ErrRevoked", serr, cerr)
	}

	// A new CRL revoking alice too: refused from the next handshake on.
	writeCRL(t, crlFile, ca, 3, serialOf(t, bobFiles), serialOf(t, aliceFiles))
	if _, _, serr, _ := handshake(broker.ServerConfig(), alice.ClientConfig("127.0.0.1")); !errors.Is(serr, ErrRevoked) {
		t.Fatalf("alice after her revocation: server %v", serr)
	}

	// A CRL signed by another CA does not load: at start an error, on a
	// change the previous lists stay and Err says why.
	other, err := NewCA("another CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	foreign := filepath.Join(t.TempDir(), "foreign.crl")
	writeCRL(t, foreign, other, 1)
	f := brokerFiles
	f.CRL = foreign
	if _, err := NewReloader(f, 0); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a CRL of another CA at start: %v, want ErrInvalid", err)
	}
	if err := os.WriteFile(crlFile, []byte("not a CRL"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, serr, _ := handshake(broker.ServerConfig(), alice.ClientConfig("127.0.0.1")); !errors.Is(serr, ErrRevoked) || broker.Err() == nil {
		t.Fatalf("after a bad CRL: server %v, Err %v; want the previous CRL in use and an error", serr, broker.Err())
	}
	writeCRL(t, crlFile, ca, 4) // nothing revoked
	if _, _, serr, cerr := handshake(broker.ServerConfig(), alice.ClientConfig("127.0.0.1")); serr != nil || cerr != nil || broker.Err() != nil {
		t.Fatalf("after an empty CRL: server %v, client %v, Err %v", serr, cerr, broker.Err())
	}
}

// The admin HTTP configuration checks a client certificate (CA and CRL)
// when one is given; internal/admin tests clients without one.
func TestHTTPSConfig(t *testing.T) {
	ca, err := NewCA("test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	caFile := writeCA(t, ca)
	_, brokerFiles := node(t, ca, caFile, Request{Role: RoleBroker, Name: "k1", Hosts: []string{"127.0.0.1"}})
	_, aliceFiles := node(t, ca, caFile, Request{Role: RoleAdmin, Name: "alice"})
	_, bobFiles := node(t, ca, caFile, Request{Role: RoleAdmin, Name: "bob"})
	crlFile := filepath.Join(t.TempDir(), "ca.crl")
	writeCRL(t, crlFile, ca, 1, serialOf(t, bobFiles))
	broker := withCRL(t, brokerFiles, crlFile)
	alice := withCRL(t, aliceFiles, crlFile)
	bob := withCRL(t, bobFiles, crlFile)

	if saw, _, serr, cerr := handshake(broker.HTTPSConfig(), alice.ClientConfig("127.0.0.1")); serr != nil || cerr != nil || saw.Name != "alice" {
		t.Fatalf("a good client certificate: saw %v, server %v, client %v", saw, serr, cerr)
	}
	if _, _, serr, _ := handshake(broker.HTTPSConfig(), bob.ClientConfig("127.0.0.1")); !errors.Is(serr, ErrRevoked) {
		t.Fatalf("a revoked client certificate: server %v, want ErrRevoked", serr)
	}
}
