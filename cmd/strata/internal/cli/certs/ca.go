package certs

import (
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/strata-log/strata/cmd/strata/internal/cli"
	"github.com/strata-log/strata/internal/pki"
)

// Sentinel errors.
var (
	ErrIncompleteCA = errors.New("certs: the CA directory holds only one of ca.crt and ca.key")
	ErrKeyMismatch  = errors.New("certs: the CA key does not belong to the CA certificate")
)

// File names of a CA directory, and of the CA certificate beside every
// issued certificate.
const (
	CACertFile = "ca.crt"
	CAKeyFile  = "ca.key"
)

// EnsureCA makes a CA named name, valid for validity, in dir (ca.crt and
// ca.key, the key readable by its owner only) unless dir already holds
// one, which is kept (C1). created says which happened.
func EnsureCA(dir, name string, validity time.Duration) (created bool, err error) {
	certPath, keyPath := filepath.Join(dir, CACertFile), filepath.Join(dir, CAKeyFile)
	haveCert, err := exists(certPath)
	if err != nil {
		return false, err
	}
	haveKey, err := exists(keyPath)
	if err != nil {
		return false, err
	}
	switch {
	case haveCert && haveKey:
		_, err := LoadCA(dir)
		return false, err
	case haveCert || haveKey:
		return false, fmt.Errorf("%w: %s (delete both to make a new CA, which every node must then trust)", ErrIncompleteCA, dir)
	}
	ca, err := pki.NewCA(name, validity)
	if err != nil {
		return false, err
	}
	certPEM, keyPEM, err := EncodeCA(ca)
	if err != nil {
		return false, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return false, err
	}
	if err := cli.WriteFileAs(keyPath, keyPEM, 0o600, nil); err != nil {
		return false, err
	}
	return true, cli.WriteFileAs(certPath, certPEM, 0o644, nil)
}

// LoadCA reads the CA of dir (ca.crt and ca.key).
func LoadCA(dir string) (*pki.CA, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, CACertFile))
	if err != nil {
		return nil, err
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, CAKeyFile))
	if err != nil {
		return nil, err
	}
	return ParseCA(certPEM, keyPEM)
}

// ParseCA reads a CA from its PEM certificate and PEM ECDSA key (PKCS#8,
// as EncodeCA writes, or SEC 1).
func ParseCA(certPEM, keyPEM []byte) (*pki.CA, error) {
	cert, err := pki.ParseCertPEM(certPEM)
	if err != nil {
		return nil, fmt.Errorf("certs: CA certificate: %w", err)
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("certs: %q is not a CA certificate", cert.Subject.CommonName)
	}
	b, _ := pem.Decode(keyPEM)
	if b == nil {
		return nil, errors.New("certs: CA key: no PEM block")
	}
	var key *ecdsa.PrivateKey
	switch b.Type {
	case "PRIVATE KEY":
		k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certs: CA key: %w", err)
		}
		var ok bool
		if key, ok = k.(*ecdsa.PrivateKey); !ok {
			return nil, fmt.Errorf("certs: CA key: %T, want an ECDSA key", k)
		}
	case "EC PRIVATE KEY":
		if key, err = x509.ParseECPrivateKey(b.Bytes); err != nil {
			return nil, fmt.Errorf("certs: CA key: %w", err)
		}
	default:
		return nil, fmt.Errorf("certs: CA key: PEM block %q, want an ECDSA key", b.Type)
	}
	if pub, ok := cert.PublicKey.(*ecdsa.PublicKey); !ok || !pub.Equal(&key.PublicKey) {
		return nil, ErrKeyMismatch
	}
	return &pki.CA{Cert: cert, Key: key}, nil
}

// EncodeCA is the CA's certificate and key, PEM-encoded (the key as
// PKCS#8).
func EncodeCA(ca *pki.CA) (certPEM, keyPEM []byte, err error) {
	der, err := x509.MarshalPKCS8PrivateKey(ca.Key)
	if err != nil {
		return nil, nil, err
	}
	return ca.CertPEM(), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func exists(path string) (bool, error) {
	_, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

// Owner is the user and group issued files are given (Options.Owner).
type Owner = cli.Owner
