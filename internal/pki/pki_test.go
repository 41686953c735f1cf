package pki

import (
	"crypto/tls"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// node issues a certificate of ca for role/name into dir and returns its
// Reloader (checking files on every handshake), trusting trustCA.
func node(t *testing.T, ca *CA, trustCA string, req Request) (*Reloader, Files) {
	t.Helper()
	if req.NotAfter.IsZero() {
		req.NotAfter = time.Now().Add(time.Hour)
	}
	certPEM, keyPEM, err := ca.Issue(req)
	if err != nil {
		t.Fatal(err)
	}
	f, err := WriteFiles(t.TempDir(), req.Name, certPEM, keyPEM, trustCA)
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewReloader(f, time.Nanosecond)
	if err != nil {
		t.Fatal(err)
	}
	return r, f
}

func writeCA(t *testing.T, ca *CA) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(p, ca.CertPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// handshake runs a TLS handshake over a pipe and returns what each side
// saw of the other and each side's error.
func handshake(server, client *tls.Config) (peerOfServer, peerOfClient Identity, serverErr, clientErr error) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		s := tls.Server(a, server)
		if serverErr = s.Handshake(); serverErr == nil {
			peerOfServer, serverErr = IdentityOf(s.ConnectionState().PeerCertificates[0])
		}
		a.Close() // a failed side must not leave the other waiting
	}()
	c := tls.Client(b, client)
	if clientErr = c.Handshake(); clientErr == nil {
		peerOfClient, clientErr = IdentityOf(c.ConnectionState().PeerCertificates[0])
		// TLS 1.3: the server checks the client's certificate after the
		// client's side of the handshake ends; a read returns once the
		// server has decided (and closed its end).
		var one [1]byte
		_, _ = c.Read(one[:])
	}
	b.Close()
	<-done
	return
}

func TestMutualTLS(t *testing.T) {
	ca, err := NewCA("test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	caFile := writeCA(t, ca)
	broker, _ := node(t, ca, caFile, Request{Role: RoleBroker, Name: "k1", Hosts: []string{"127.0.0.1", "broker-1"}})
	alice, _ := node(t, ca, caFile, Request{Role: RoleUser, Name: "alice"})

	for _, name := range []string{"127.0.0.1", "broker-1"} {
		srvSaw, cliSaw, serr, cerr := handshake(broker.ServerConfig(), alice.ClientConfig(name))
		if serr != nil || cerr != nil {
			t.Fatalf("dialling %s: server %v, client %v", name, serr, cerr)
		}
		if srvSaw != (Identity{RoleUser, "alice"}) || cliSaw != (Identity{RoleBroker, "k1"}) {
			t.Fatalf("identities: server saw %v, client saw %v", srvSaw, cliSaw)
		}
	}

	other, err := NewCA("another CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	otherFile := writeCA(t, other)
	mallory, _ := node(t, other, otherFile, Request{Role: RoleAdmin, Name: "mallory"})
	expired, _ := node(t, ca, caFile, Request{Role: RoleUser, Name: "old",
		NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
	trustsOther, _ := node(t, ca, otherFile, Request{Role: RoleUser, Name: "bob"})
	noCert := alice.ClientConfig("127.0.0.1")
	noCert.Certificates = nil
	for _, tc := range []struct {
		name   string
		client *tls.Config
	}{
		{"a client certificate from another CA", mallory.ClientConfig("127.0.0.1")},
		{"an expired client certificate", expired.ClientConfig("127.0.0.1")},
		{"no client certificate", noCert},
		{"an IP address the certificate does not hold", alice.ClientConfig("10.0.0.9")},
		{"a host name the certificate does not hold", alice.ClientConfig("broker-2")},
		{"a client that trusts another CA", trustsOther.ClientConfig("127.0.0.1")},
	} {
		_, _, serr, cerr := handshake(broker.ServerConfig(), tc.client)
		if serr == nil && cerr == nil {
			t.Errorf("%s: the handshake succeeded", tc.name)
		} else {
			t.Logf("%s: server %v; client %v", tc.name, serr, cerr)
		}
	}
}

// A node's certificate changes on disk: the next handshake presents the
// new one, without a restart. A file that does not load (half written)
// leaves the previous one in use and is reported by Err until fixed.
func TestRotation(t *testing.T) {
	ca, err := NewCA("test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	caFile := writeCA(t, ca)
	broker, files := node(t, ca, caFile, Request{Role: RoleBroker, Name: "k1", Hosts: []string{"127.0.0.1"}})
	client, _ := node(t, ca, caFile, Request{Role: RoleUser, Name: "alice"})
	handshakeSees := func() string {
		t.Helper()
		_, saw, serr, cerr := handshake(broker.ServerConfig(), client.ClientConfig("127.0.0.1"))
		if serr != nil || cerr != nil {
			t.Fatalf("handshake: server %v, client %v", serr, cerr)
		}
		return saw.Name
	}
	if got := handshakeSees(); got != "k1" {
		t.Fatalf("before the rotation the broker is %q", got)
	}
	certPEM, keyPEM, err := ca.Issue(Request{Role: RoleBroker, Name: "k1-rotated", Hosts: []string{"127.0.0.1"}, NotAfter: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	// Half a rotation: the new certificate with the old key does not load.
	if err := os.WriteFile(files.Cert, certPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := handshakeSees(); got != "k1" || broker.Err() == nil {
		t.Fatalf("with a mismatched key: serving %q, Err %v; want the old certificate and an error", got, broker.Err())
	}
	if err := os.WriteFile(files.Key, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := handshakeSees(); got != "k1-rotated" || broker.Err() != nil {
		t.Fatalf("after the rotation: serving %q, Err %v", got, broker.Err())
	}
}

func TestIdentityOf(t *testing.T) {
	ca, err := NewCA("test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := IdentityOf(ca.Cert); !errors.Is(err, ErrNoIdentity) {
		t.Fatalf("a CA certificate: %v, want ErrNoIdentity", err)
	}
	if _, _, err := ca.Issue(Request{Role: "root", Name: "x", NotAfter: time.Now().Add(time.Hour)}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("an unknown role: %v", err)
	}
	if _, err := NewReloader(Files{Cert: "a"}, 0); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "CA file") {
		t.Fatalf("missing files: %v", err)
	}
}

// The key WriteFiles writes is its owner's only even when the file was
// there before with a wider mode (os.WriteFile keeps an existing file's
// mode): `strata dev --tls` run again in a directory whose key files
// others could read left the new private keys readable by them.
func TestWriteFilesKeyIsPrivate(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "n.key")
	if err := os.WriteFile(key, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(key, 0o644); err != nil { // whatever the umask
		t.Fatal(err)
	}
	if _, err := WriteFiles(dir, "n", []byte("cert"), []byte("key"), "ca.crt"); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(key)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v, want 0600", fi.Mode().Perm())
	}
}
