package devcluster

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/strata-log/strata/internal/pki"
)

// TLSDir is where `strata dev --tls` keeps its certificates, under Dir.
const TLSDir = "tls"

// AdminName names the CLI's certificate (role admin) in TLSDir.
const AdminName = "admin"

// certValidity is how long the dev CA and its certificates are good for:
// a new set is issued on every `strata dev --tls`.
const certValidity = 90 * 24 * time.Hour

// tlsFiles are the certificate files of the node (or AdminName) called
// name under dir: dir/tls/NAME.crt, .key, and the CA dir/tls/ca.crt.
func tlsFiles(dir, name string) pki.Files {
	d := filepath.Join(dir, TLSDir)
	return pki.Files{Cert: filepath.Join(d, name+".crt"), Key: filepath.Join(d, name+".key"), CA: filepath.Join(d, "ca.crt")}
}

// AdminTLSFiles are the CLI's certificate files of a --tls cluster in dir,
// as absolute paths (the profile is used from any directory).
func AdminTLSFiles(dir string) (pki.Files, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return pki.Files{}, err
	}
	return tlsFiles(abs, AdminName), nil
}

// tlsArgs are the TLS flags of the node called name.
func tlsArgs(dir, name string) []string {
	f := tlsFiles(dir, name)
	return []string{"--tls-cert-file", f.Cert, "--tls-key-file", f.Key, "--tls-ca-file", f.CA}
}

// WriteCertificates creates a CA under o.Dir/tls and issues from it one
// certificate per Strata node of nodes (its role, its id as name, valid
// for o.Host and localhost) and one of role admin for the CLI. Keys are
// readable by their owner only. The CA's key is not kept: a new
// `strata dev --tls` issues everything again.
func WriteCertificates(o Options, nodes []Node) error {
	dir := filepath.Join(o.Dir, TLSDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	ca, err := pki.NewCA("Strata dev CA", certValidity)
	if err != nil {
		return err
	}
	caFile := tlsFiles(o.Dir, "").CA
	if err := os.WriteFile(caFile, ca.CertPEM(), 0o644); err != nil {
		return err
	}
	issue := func(name, role, id string) error {
		certPEM, keyPEM, err := ca.Issue(pki.Request{Role: role, Name: id, Hosts: []string{o.host(name), "localhost"},
			NotAfter: time.Now().Add(certValidity)})
		if err != nil {
			return err
		}
		_, err = pki.WriteFiles(dir, name, certPEM, keyPEM, caFile)
		return err
	}
	for _, n := range nodes {
		if n.Role == RoleMinIO {
			continue
		}
		if err := issue(n.Name, n.Role, n.ID); err != nil {
			return fmt.Errorf("devcluster: certificate of %s: %w", n.Name, err)
		}
	}
	if err := issue(AdminName, pki.RoleAdmin, AdminName); err != nil {
		return fmt.Errorf("devcluster: admin certificate: %w", err)
	}
	return nil
}
