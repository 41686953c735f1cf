package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"
)

// Sentinel errors.
var (
	ErrInvalid    = errors.New("pki: invalid argument")
	ErrNoIdentity = errors.New("pki: certificate names no single Strata role")
)

// Roles a certificate may carry.
const (
	RoleMetad  = "metad"
	RoleBookie = "bookie"
	RoleBroker = "broker"
	RoleAdmin  = "admin"
	RoleUser   = "user"
)

var roles = map[string]bool{RoleMetad: true, RoleBookie: true, RoleBroker: true, RoleAdmin: true, RoleUser: true}

const rolePrefix = "urn:strata:role:"

// CA is a certificate authority: its certificate and key.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
}

// NewCA creates a self-signed CA named name, valid for validFor.
func NewCA(name string, validFor time.Duration) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("pki: CA key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name, Organization: []string{"Strata"}},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(validFor),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("pki: CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key}, nil
}

// Request describes a certificate to issue.
type Request struct {
	// Role and Name are the identity (see the package doc).
	Role, Name string
	// Hosts are the DNS names and IP addresses the certificate is valid
	// for as a server (a client-only certificate may have none).
	Hosts []string
	// NotBefore and NotAfter bound its validity (zero NotBefore: now
	// minus a minute, for clock skew).
	NotBefore, NotAfter time.Time
}

// Issue signs a new key pair for req and returns the certificate and the
// private key, PEM-encoded. Every certificate is good for both server and
// client authentication: nodes are both.
func (ca *CA) Issue(req Request) (certPEM, keyPEM []byte, err error) {
	if !roles[req.Role] || req.Name == "" || req.NotAfter.IsZero() {
		return nil, nil, fmt.Errorf("%w: a certificate needs a known role, a name and an expiry (got %q, %q)", ErrInvalid, req.Role, req.Name)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: key: %w", err)
	}
	notBefore := req.NotBefore
	if notBefore.IsZero() {
		notBefore = time.Now().Add(-time.Minute)
	}
	role, _ := url.Parse(rolePrefix + req.Role)
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: req.Name, Organization: []string{"Strata"}},
		NotBefore:    notBefore,
		NotAfter:     req.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		URIs:         []*url.URL{role},
	}
	for _, h := range req.Hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: certificate for %s %s: %w", req.Role, req.Name, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), nil
}

// CertPEM is the CA's certificate, PEM-encoded (the bundle peers trust).
func (ca *CA) CertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Cert.Raw})
}

// WriteFiles writes certPEM and keyPEM to dir/name.crt and dir/name.key
// (the key readable by its owner only) and returns their Files, with
// caFile as the CA bundle.
func WriteFiles(dir, name string, certPEM, keyPEM []byte, caFile string) (Files, error) {
	f := Files{Cert: filepath.Join(dir, name+".crt"), Key: filepath.Join(dir, name+".key"), CA: caFile}
	// os.WriteFile keeps the mode of a file already there: remove it, so
	// the key is created readable by its owner only.
	if err := os.Remove(f.Key); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return Files{}, err
	}
	if err := os.WriteFile(f.Key, keyPEM, 0o600); err != nil {
		return Files{}, err
	}
	if err := os.WriteFile(f.Cert, certPEM, 0o644); err != nil {
		return Files{}, err
	}
	return f, nil
}

// Identity is who a certificate names.
type Identity struct {
	Role, Name string
}

func (i Identity) String() string { return i.Role + ":" + i.Name }

// IdentityOf reads the identity of a (verified) certificate.
func IdentityOf(cert *x509.Certificate) (Identity, error) {
	var role string
	for _, u := range cert.URIs {
		s := u.String()
		if len(s) <= len(rolePrefix) || s[:len(rolePrefix)] != rolePrefix {
			continue
		}
		if role != "" {
			return Identity{}, fmt.Errorf("%w: two roles (%s, %s)", ErrNoIdentity, role, s[len(rolePrefix):])
		}
		role = s[len(rolePrefix):]
	}
	if !roles[role] || cert.Subject.CommonName == "" {
		return Identity{}, fmt.Errorf("%w: role %q, name %q", ErrNoIdentity, role, cert.Subject.CommonName)
	}
	return Identity{Role: role, Name: cert.Subject.CommonName}, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}
