package certs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/strata-log/strata/internal/pki"
)

// Errors of EnsureSecrets.
var (
	ErrNoCA           = errors.New("certs: the CA Secret does not exist")
	ErrAdminNotFromCA = errors.New("certs: the admin Secret holds a certificate the CA did not sign")
)

// Keys of the Secrets EnsureSecrets writes. The CA Secret holds CACertFile
// and CAKeyFile (the names of a CA directory, so the Secret mounted as a
// volume is one); the admin Secret is a kubernetes.io/tls Secret with the
// CA's certificate beside the pair.
const (
	TLSCertKey = "tls.crt"
	TLSKeyKey  = "tls.key"
)

// SecretsOptions name the Secrets EnsureSecrets keeps and what goes in
// them.
type SecretsOptions struct {
	// CASecret holds the CA (keys ca.crt, ca.key).
	CASecret string
	// CreateCA makes a new CA when CASecret does not exist; without it a
	// missing CA Secret is ErrNoCA (a CA the operator brings).
	CreateCA   bool
	CAName     string
	CAValidity time.Duration
	// AdminSecret, when not empty, holds a certificate of role admin named
	// AdminName, valid for AdminValidity, issued once from the CA.
	AdminSecret   string
	AdminName     string
	AdminValidity time.Duration
	// Labels go on every Secret created.
	Labels map[string]string
}

// EnsureSecrets makes the Secrets of o that do not exist, keeping those
// that do (C1), and returns one line per Secret saying which happened.
func EnsureSecrets(ctx context.Context, k *Kube, o SecretsOptions) ([]string, error) {
	var done []string
	ca, created, err := ensureCASecret(ctx, k, o)
	if err != nil {
		return nil, err
	}
	done = append(done, secretLine(o.CASecret, created, "CA "+ca.Cert.Subject.CommonName))
	if o.AdminSecret == "" {
		return done, nil
	}
	created, err = ensureAdminSecret(ctx, k, ca, o)
	if err != nil {
		return done, err
	}
	return append(done, secretLine(o.AdminSecret, created, "certificate of role admin, name "+o.AdminName)), nil
}

func secretLine(name string, created bool, what string) string {
	if created {
		return fmt.Sprintf("created Secret %s: %s", name, what)
	}
	return fmt.Sprintf("kept Secret %s: %s", name, what)
}

// ensureCASecret reads the CA Secret, creating it first when it is
// missing and o.CreateCA; of two Jobs racing to create it, the loser reads
// the winner's.
func ensureCASecret(ctx context.Context, k *Kube, o SecretsOptions) (*pki.CA, bool, error) {
	s, err := k.GetSecret(ctx, o.CASecret)
	switch {
	case err == nil:
		ca, err := ParseCA(s.Data[CACertFile], s.Data[CAKeyFile])
		if err != nil {
			return nil, false, fmt.Errorf("Secret %s: %w", o.CASecret, err)
		}
		return ca, false, nil
	case !errors.Is(err, ErrNotFound):
		return nil, false, err
	case !o.CreateCA:
		return nil, false, fmt.Errorf("%w: %s in namespace %s (create it with the keys %s and %s)", ErrNoCA, o.CASecret, k.Namespace(), CACertFile, CAKeyFile)
	}
	ca, err := pki.NewCA(o.CAName, o.CAValidity)
	if err != nil {
		return nil, false, err
	}
	certPEM, keyPEM, err := EncodeCA(ca)
	if err != nil {
		return nil, false, err
	}
	err = k.CreateSecret(ctx, Secret{Name: o.CASecret, Type: "Opaque", Labels: o.Labels,
		Data: map[string][]byte{CACertFile: certPEM, CAKeyFile: keyPEM}})
	if errors.Is(err, ErrExists) {
		return ensureCASecret(ctx, k, SecretsOptions{CASecret: o.CASecret})
	}
	return ca, err == nil, err
}

// ensureAdminSecret keeps an admin Secret signed by ca, or creates one.
func ensureAdminSecret(ctx context.Context, k *Kube, ca *pki.CA, o SecretsOptions) (bool, error) {
	s, err := k.GetSecret(ctx, o.AdminSecret)
	if err == nil {
		cert, perr := pki.ParseCertPEM(s.Data[TLSCertKey])
		if perr != nil || cert.CheckSignatureFrom(ca.Cert) != nil {
			return false, fmt.Errorf("%w: %s (delete it to have a new one issued)", ErrAdminNotFromCA, o.AdminSecret)
		}
		return false, nil
	}
	if !errors.Is(err, ErrNotFound) {
		return false, err
	}
	certPEM, keyPEM, err := ca.Issue(pki.Request{Role: pki.RoleAdmin, Name: o.AdminName, NotAfter: time.Now().Add(o.AdminValidity)})
	if err != nil {
		return false, err
	}
	err = k.CreateSecret(ctx, Secret{Name: o.AdminSecret, Type: "kubernetes.io/tls", Labels: o.Labels,
		Data: map[string][]byte{CACertFile: ca.CertPEM(), TLSCertKey: certPEM, TLSKeyKey: keyPEM}})
	if errors.Is(err, ErrExists) {
		return ensureAdminSecret(ctx, k, ca, o) // made meanwhile: check it
	}
	return err == nil, err
}
