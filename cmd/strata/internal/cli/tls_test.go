package cli

import (
	"strings"
	"testing"

	"github.com/strata-log/strata/internal/pki"
)

func TestResolveTLS(t *testing.T) {
	flags := pki.Files{CA: "f.ca", Cert: "f.crt", Key: "f.key"}
	env := pki.Files{CA: "e.ca", Cert: "e.crt", Key: "e.key"}
	prof := pki.Files{CA: "p.ca", Cert: "p.crt", Key: "p.key"}
	for _, tc := range []struct {
		name             string
		flags, env, prof pki.Files
		want             pki.Files
		err              string
	}{
		{"none: plaintext", pki.Files{}, pki.Files{}, pki.Files{}, pki.Files{}, ""},
		{"flags win", flags, env, prof, flags, ""},
		{"env over profile", pki.Files{}, env, prof, env, ""},
		{"profile", pki.Files{}, pki.Files{}, prof, prof, ""},
		{"partial flags are not completed from env", pki.Files{Cert: "f.crt"}, env, prof, pki.Files{}, "--tls-ca, --tls-cert and --tls-key go together"},
		{"partial env", pki.Files{}, pki.Files{CA: "e.ca"}, prof, pki.Files{}, "$STRATA_TLS_CA"},
	} {
		got, err := ResolveTLS(tc.flags, tc.env, tc.prof)
		if got != tc.want || (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s: %+v, %v; want %+v, %q", tc.name, got, err, tc.want, tc.err)
		}
	}
}

func TestResolveTLSForUser(t *testing.T) {
	full := pki.Files{CA: "ca", Cert: "c", Key: "k"}
	if f, err := ResolveTLSForUser(pki.Files{CA: "flag-ca"}, full, pki.Files{}); err != nil || f != (pki.Files{CA: "flag-ca"}) {
		t.Errorf("CA flag alone: %+v %v", f, err)
	}
	if f, err := ResolveTLSForUser(pki.Files{}, pki.Files{}, full); err != nil || f != (pki.Files{CA: "ca"}) {
		t.Errorf("profile: %+v %v; want its CA only", f, err)
	}
	if _, err := ResolveTLSForUser(pki.Files{Cert: "c"}, pki.Files{}, full); err == nil {
		t.Error("a certificate without a CA accepted")
	}
	if f, err := ResolveTLSForUser(pki.Files{}, pki.Files{}, pki.Files{}); err != nil || f != (pki.Files{}) {
		t.Errorf("nothing: %+v %v", f, err)
	}
}
