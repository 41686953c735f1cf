package cli

import (
	"fmt"

	"github.com/strata-log/strata/internal/pki"
)

// Environment variables naming the CLI's TLS files when the --tls-* flags
// are not given.
const (
	EnvTLSCA   = "STRATA_TLS_CA"
	EnvTLSCert = "STRATA_TLS_CERT"
	EnvTLSKey  = "STRATA_TLS_KEY"
)

// ResolveTLS picks the CLI's TLS files from the first source that names
// any: the --tls-ca, --tls-cert and --tls-key flags, else the STRATA_TLS_*
// variables, else the profile. Sources are never mixed: a certificate
// from one place and a key from another is an error, not a guess. The
// zero Files means plaintext.
func ResolveTLS(flags, env, profile pki.Files) (pki.Files, error) {
	return resolveTLS(flags, env, profile, false)
}

// ResolveTLSForUser is ResolveTLS for a --user login: a source may name
// the CA alone (the password authenticates, no client certificate is
// needed), and only the CA is returned.
func ResolveTLSForUser(flags, env, profile pki.Files) (pki.Files, error) {
	f, err := resolveTLS(flags, env, profile, true)
	return pki.Files{CA: f.CA}, err
}

func resolveTLS(flags, env, profile pki.Files, caOnly bool) (pki.Files, error) {
	for _, src := range []struct {
		name  string
		files pki.Files
	}{
		{"--tls-ca, --tls-cert and --tls-key", flags},
		{"$" + EnvTLSCA + ", $" + EnvTLSCert + " and $" + EnvTLSKey, env},
		{"the profile's tls_ca, tls_cert and tls_key", profile},
	} {
		f := src.files
		if f == (pki.Files{}) {
			continue
		}
		if caOnly && f.CA != "" {
			return f, nil
		}
		if f.CA == "" || f.Cert == "" || f.Key == "" {
			return pki.Files{}, fmt.Errorf("%s go together (got CA %q, certificate %q, key %q)", src.name, f.CA, f.Cert, f.Key)
		}
		return f, nil
	}
	return pki.Files{}, nil
}
