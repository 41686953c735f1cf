package certs

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/strata-log/strata/cmd/strata/internal/cli"
	"github.com/strata-log/strata/internal/pki"
)

// ErrSpec is a certificate spec that does not parse.
var ErrSpec = errors.New("certs: bad certificate spec")

// specForm is how a spec reads, for error messages and help.
const specForm = "[PATH=]ROLE:NAME[:HOST,...], e.g. metad-1/node=metad:1:10.0.0.11,metad-1"

// Spec is one certificate to issue.
type Spec struct {
	// Path is where it goes, relative to the output directory and without
	// the extension: PATH.crt and PATH.key, and ca.crt beside them.
	Path string
	// Role and Name are its identity (internal/pki).
	Role, Name string
	// Hosts are the DNS names and IP addresses it serves as.
	Hosts []string
}

// ParseSpec reads "[PATH=]ROLE:NAME[:HOST,...]"; PATH defaults to NAME.
// Hosts may be IPv6 addresses (everything after the second colon is the
// host list).
func ParseSpec(s string) (Spec, error) {
	var sp Spec
	path, rest, hasPath := strings.Cut(s, "=")
	if !hasPath {
		rest = s
	}
	parts := strings.SplitN(rest, ":", 3)
	if len(parts) < 2 {
		return Spec{}, fmt.Errorf("%w %q: want %s", ErrSpec, s, specForm)
	}
	sp.Role, sp.Name = parts[0], parts[1]
	if len(parts) == 3 {
		for h := range strings.SplitSeq(parts[2], ",") {
			if h = strings.TrimSpace(h); h != "" {
				sp.Hosts = append(sp.Hosts, h)
			}
		}
	}
	if !hasPath {
		path = sp.Name
	}
	sp.Path = filepath.Clean(path)
	switch {
	case !slices.Contains([]string{pki.RoleMetad, pki.RoleBookie, pki.RoleBroker, pki.RoleAdmin, pki.RoleUser}, sp.Role):
		return Spec{}, fmt.Errorf("%w %q: role %q is not one of metad, bookie, broker, admin, user", ErrSpec, s, sp.Role)
	case sp.Name == "":
		return Spec{}, fmt.Errorf("%w %q: no name", ErrSpec, s)
	case path == "" || filepath.IsAbs(sp.Path) || sp.Path == ".." || strings.HasPrefix(sp.Path, "../"):
		return Spec{}, fmt.Errorf("%w %q: the path must stay under the output directory (C4)", ErrSpec, s)
	}
	return sp, nil
}

// Options say where and how Issue writes.
type Options struct {
	// Out is the directory spec paths are relative to.
	Out string
	// Validity is how long a new certificate is good for.
	Validity time.Duration
	// KeepValid keeps a current certificate instead of issuing a new one
	// (C3).
	KeepValid bool
	// Owner, when not nil, owns every file and directory written (a root
	// container writing for a node that runs as another user).
	Owner *Owner
}

// Issue signs spec's certificate with ca and writes it, its key and the
// CA's certificate (module doc). kept says an existing certificate was
// current and left in place (Options.KeepValid).
func Issue(ca *pki.CA, sp Spec, o Options) (kept bool, err error) {
	certPath := filepath.Join(o.Out, sp.Path+".crt")
	keyPath := filepath.Join(o.Out, sp.Path+".key")
	dir := filepath.Dir(certPath)
	if err := mkdirAll(dir, o.Owner); err != nil {
		return false, err
	}
	caPEM := ca.CertPEM()
	caPath := filepath.Join(dir, CACertFile)
	if old, err := os.ReadFile(caPath); err != nil || !bytes.Equal(old, caPEM) {
		if err := cli.WriteFileAs(caPath, caPEM, 0o644, o.Owner); err != nil {
			return false, err
		}
	}
	if o.KeepValid && current(ca, sp, certPath, keyPath, o.Validity/3) {
		return true, nil
	}
	certPEM, keyPEM, err := ca.Issue(pki.Request{Role: sp.Role, Name: sp.Name, Hosts: sp.Hosts, NotAfter: time.Now().Add(o.Validity)})
	if err != nil {
		return false, err
	}
	// The key first: a node reloading on change then sees a new key with
	// the old certificate (refused, the previous pair stays) and never
	// the new certificate without its key.
	if err := cli.WriteFileAs(keyPath, keyPEM, 0o600, o.Owner); err != nil {
		return false, err
	}
	return false, cli.WriteFileAs(certPath, certPEM, 0o644, o.Owner)
}

// current reports whether certPath and keyPath hold a certificate of
// spec, signed by ca, matching its key, valid for at least minLeft more.
func current(ca *pki.CA, sp Spec, certPath, keyPath string, minLeft time.Duration) bool {
	pair, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil || len(pair.Certificate) == 0 {
		return false
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil || cert.CheckSignatureFrom(ca.Cert) != nil || time.Until(cert.NotAfter) < minLeft {
		return false
	}
	id, err := pki.IdentityOf(cert)
	if err != nil || id.Role != sp.Role || id.Name != sp.Name {
		return false
	}
	return slices.Equal(hostSet(sp.Hosts), certHosts(cert))
}

// hostSet is hosts as a certificate lists them: IP addresses in their
// canonical form, sorted, without duplicates.
func hostSet(hosts []string) []string {
	var out []string
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			h = ip.String()
		}
		out = append(out, h)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func certHosts(cert *x509.Certificate) []string {
	hosts := slices.Clone(cert.DNSNames)
	for _, ip := range cert.IPAddresses {
		hosts = append(hosts, ip.String())
	}
	return hostSet(hosts)
}

// mkdirAll makes dir (readable by all: it holds certificates, the keys
// in it are 0600) and gives each directory it makes to owner.
func mkdirAll(dir string, owner *Owner) error {
	if ok, err := exists(dir); err != nil || ok {
		return err
	}
	if parent := filepath.Dir(dir); parent != dir {
		if err := mkdirAll(parent, owner); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	if owner != nil {
		return os.Chown(dir, owner.UID, owner.GID)
	}
	return nil
}
