package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/strata-log/strata/internal/pki"
)

const day = 24 * time.Hour

func TestParseSpec(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Spec
		err  bool
	}{
		{in: "metad:1", want: Spec{Path: "1", Role: "metad", Name: "1"}},
		{in: "metad-1/node=metad:1:10.0.0.11,metad-1", want: Spec{Path: "metad-1/node", Role: "metad", Name: "1", Hosts: []string{"10.0.0.11", "metad-1"}}},
		{in: "broker:k1:fd00::1, broker-1 ,", want: Spec{Path: "k1", Role: "broker", Name: "k1", Hosts: []string{"fd00::1", "broker-1"}}},
		{in: "admin=admin:alice", want: Spec{Path: "admin", Role: "admin", Name: "alice"}},
		{in: "metad", err: true},
		{in: "root:1", err: true},
		{in: "metad:", err: true},
		{in: "../x=metad:1", err: true},
		{in: "/etc/x=metad:1", err: true},
		{in: "=metad:1", err: true},
		{in: "a/../../x=metad:1", err: true},
	} {
		got, err := ParseSpec(tc.in)
		if tc.err {
			if !errors.Is(err, ErrSpec) {
				t.Errorf("%q: %+v, %v; want ErrSpec", tc.in, got, err)
			}
			continue
		}
		if err != nil || got.Path != tc.want.Path || got.Role != tc.want.Role || got.Name != tc.want.Name || !slices.Equal(got.Hosts, tc.want.Hosts) {
			t.Errorf("%q: %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}

// TestEnsureCAKeepsACA: a CA is made once; running again keeps it (C1),
// and half a CA is refused rather than completed with a new key.
func TestEnsureCAKeepsACA(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ca")
	created, err := EnsureCA(dir, "test CA", time.Hour)
	if err != nil || !created {
		t.Fatalf("first EnsureCA: %v, %v", created, err)
	}
	first, _ := os.ReadFile(filepath.Join(dir, CAKeyFile))
	if fi, err := os.Stat(filepath.Join(dir, CAKeyFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("CA key mode: %v, %v; want 0600", fi.Mode(), err)
	}
	created, err = EnsureCA(dir, "test CA", time.Hour)
	if err != nil || created {
		t.Fatalf("second EnsureCA: %v, %v; want kept", created, err)
	}
	if again, _ := os.ReadFile(filepath.Join(dir, CAKeyFile)); string(again) != string(first) {
		t.Fatal("second EnsureCA replaced the key")
	}
	ca, err := LoadCA(dir)
	if err != nil || ca.Cert.KeyUsage&x509.KeyUsageCRLSign == 0 {
		t.Fatalf("LoadCA: %v (a CA that cannot sign CRLs cannot revoke)", err)
	}
	if err := os.Remove(filepath.Join(dir, CACertFile)); err != nil {
		t.Fatal(err)
	}
	if _, err := EnsureCA(dir, "test CA", time.Hour); !errors.Is(err, ErrIncompleteCA) {
		t.Fatalf("EnsureCA with a key and no certificate: %v, want ErrIncompleteCA", err)
	}
}

func TestParseCARefusesAnotherKey(t *testing.T) {
	a, _ := pki.NewCA("a", time.Hour)
	b, _ := pki.NewCA("b", time.Hour)
	certA, _, _ := EncodeCA(a)
	_, keyB, _ := EncodeCA(b)
	if _, err := ParseCA(certA, keyB); !errors.Is(err, ErrKeyMismatch) {
		t.Fatalf("ParseCA of a's certificate with b's key: %v, want ErrKeyMismatch", err)
	}
}

// TestIssue: each certificate carries its spec's role, name and hosts,
// chains to the CA, sits beside the CA's certificate, and its key is
// private; --keep-valid leaves a current certificate alone and replaces
// one whose spec changed or whose CA is another.
func TestIssue(t *testing.T) {
	caDir, out := filepath.Join(t.TempDir(), "ca"), t.TempDir()
	if _, err := EnsureCA(caDir, "test CA", time.Hour); err != nil {
		t.Fatal(err)
	}
	ca, err := LoadCA(caDir)
	if err != nil {
		t.Fatal(err)
	}
	sp, err := ParseSpec("metad-1/node=metad:1:10.0.0.11,metad-1,127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	o := Options{Out: out, Validity: 30 * day, KeepValid: true}
	if kept, err := Issue(ca, sp, o); err != nil || kept {
		t.Fatalf("first Issue: %v, %v", kept, err)
	}
	files := pki.Files{Cert: filepath.Join(out, "metad-1/node.crt"), Key: filepath.Join(out, "metad-1/node.key"), CA: filepath.Join(out, "metad-1/ca.crt")}
	cert := checkIssued(t, files, "metad", "1")
	if !slices.Equal(cert.DNSNames, []string{"metad-1"}) || len(cert.IPAddresses) != 2 {
		t.Fatalf("hosts: DNS %v, IP %v", cert.DNSNames, cert.IPAddresses)
	}
	serial := cert.SerialNumber

	if kept, err := Issue(ca, sp, o); err != nil || !kept {
		t.Fatalf("Issue again with KeepValid: kept %v, %v; want kept", kept, err)
	}
	if c := checkIssued(t, files, "metad", "1"); c.SerialNumber.Cmp(serial) != 0 {
		t.Fatal("KeepValid replaced a current certificate")
	}
	sp.Hosts = append(sp.Hosts, "metad-1.example")
	if kept, _ := Issue(ca, sp, o); kept {
		t.Fatal("KeepValid kept a certificate without the spec's new host")
	}
	if c := checkIssued(t, files, "metad", "1"); !slices.Contains(c.DNSNames, "metad-1.example") {
		t.Fatalf("reissued certificate hosts %v", c.DNSNames)
	}
	// A certificate with less than a third of its validity left is renewed.
	if kept, _ := Issue(ca, sp, Options{Out: out, Validity: 100 * day, KeepValid: true}); kept {
		t.Fatal("KeepValid kept a certificate with 30 of 100 days left")
	}
	// Another CA: everything is issued again, ca.crt included.
	other, _ := pki.NewCA("other", time.Hour)
	if kept, _ := Issue(other, sp, o); kept {
		t.Fatal("KeepValid kept a certificate of another CA")
	}
	if b, _ := os.ReadFile(files.CA); string(b) != string(other.CertPEM()) {
		t.Fatal("ca.crt is not the new CA's")
	}
}

// checkIssued loads files as a node would and checks the identity.
func checkIssued(t *testing.T, f pki.Files, role, name string) *x509.Certificate {
	t.Helper()
	if _, err := pki.NewReloader(f, 0); err != nil {
		t.Fatalf("the files do not load as a node's: %v", err)
	}
	pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(pair.Certificate[0])
	caPEM, _ := os.ReadFile(f.CA)
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		t.Fatalf("does not chain to ca.crt: %v", err)
	}
	if id, err := pki.IdentityOf(cert); err != nil || id.Role != role || id.Name != name {
		t.Fatalf("identity %v, %v; want %s:%s", id, err, role, name)
	}
	if fi, err := os.Stat(f.Key); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key mode %v, %v; want 0600", fi.Mode(), err)
	}
	return cert
}
