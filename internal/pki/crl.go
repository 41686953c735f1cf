package pki

import (
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"time"
)

// ErrRevoked is the handshake error for a peer certificate listed by a
// loaded CRL.
var ErrRevoked = errors.New("pki: certificate revoked")

// Revoked is the set of revoked certificates of the loaded CRLs, keyed by
// issuer (raw subject) and serial. The zero Revoked (no CRL) revokes
// nothing.
type Revoked map[string]struct{}

func revokedKey(rawIssuer []byte, serial *big.Int) string {
	return string(rawIssuer) + "\x00" + serial.String()
}

// Contains reports whether cert is listed by a loaded CRL of its issuer.
func (rv Revoked) Contains(cert *x509.Certificate) bool {
	if len(rv) == 0 {
		return false
	}
	_, ok := rv[revokedKey(cert.RawIssuer, cert.SerialNumber)]
	return ok
}

// Check is a tls.Config VerifyConnection: it refuses (ErrRevoked) a
// connection whose verified peer chain holds a revoked certificate. A
// peer without a certificate passes (whether one is required is the
// config's ClientAuth).
func (rv Revoked) Check(cs tls.ConnectionState) error {
	if len(rv) == 0 {
		return nil
	}
	for _, chain := range cs.VerifiedChains {
		for _, c := range chain {
			if rv.Contains(c) {
				return fmt.Errorf("%w: %s, serial %x", ErrRevoked, c.Subject.CommonName, c.SerialNumber)
			}
		}
	}
	return nil
}

// ParseCRLs reads the PEM "X509 CRL" blocks of crlPEM; each must be
// signed by a certificate of the PEM bundle caPEM (ErrInvalid otherwise),
// so a CRL from elsewhere cannot revoke the cluster's certificates, nor
// a forged one be taken for the CA's. A CRL past its NextUpdate still
// counts: a stale list revokes less than a fresh one, never more.
func ParseCRLs(crlPEM, caPEM []byte) (Revoked, error) {
	var cas []*x509.Certificate
	for rest := caPEM; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		if c, err := x509.ParseCertificate(b.Bytes); err == nil {
			cas = append(cas, c)
		}
	}
	rv := Revoked{}
	n := 0
	for rest := crlPEM; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		if b.Type != "X509 CRL" {
			continue
		}
		n++
		crl, err := x509.ParseRevocationList(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%w: CRL %d: %v", ErrInvalid, n, err)
		}
		signed := false
		for _, ca := range cas {
			if crl.CheckSignatureFrom(ca) == nil {
				signed = true
				break
			}
		}
		if !signed {
			return nil, fmt.Errorf("%w: CRL %d (issuer %s) is not signed by a certificate of the CA bundle", ErrInvalid, n, crl.Issuer)
		}
		for _, e := range crl.RevokedCertificateEntries {
			rv[revokedKey(crl.RawIssuer, e.SerialNumber)] = struct{}{}
		}
	}
	if n == 0 {
		return nil, fmt.Errorf("%w: no PEM X509 CRL block", ErrInvalid)
	}
	return rv, nil
}

// CRL signs a certificate revocation list revoking serials, numbered
// number (CRL numbers grow with each list the CA publishes), valid until
// now+validFor; PEM-encoded.
func (ca *CA) CRL(number int64, validFor time.Duration, serials ...*big.Int) ([]byte, error) {
	now := time.Now()
	tmpl := &x509.RevocationList{
		Number:     big.NewInt(number),
		ThisUpdate: now.Add(-time.Minute),
		NextUpdate: now.Add(validFor),
	}
	for _, s := range serials {
		tmpl.RevokedCertificateEntries = append(tmpl.RevokedCertificateEntries,
			x509.RevocationListEntry{SerialNumber: s, RevocationTime: now})
	}
	der, err := x509.CreateRevocationList(rand.Reader, tmpl, ca.Cert, ca.Key)
	if err != nil {
		return nil, fmt.Errorf("pki: CRL: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "X509 CRL", Bytes: der}), nil
}

// ParseCertPEM parses the first certificate of certPEM (to read a serial
// to revoke, for instance).
func ParseCertPEM(certPEM []byte) (*x509.Certificate, error) {
	b, _ := pem.Decode(certPEM)
	if b == nil || b.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("%w: no PEM certificate", ErrInvalid)
	}
	return x509.ParseCertificate(b.Bytes)
}
