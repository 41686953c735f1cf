package admin

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/strata-log/strata/internal/pki"
	"github.com/strata-log/strata/internal/proctest"
	"github.com/strata-log/strata/internal/testwait"
)

// request GETs url with client, with a bearer token when not empty.
func request(t *testing.T, client *http.Client, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func writeToken(t *testing.T, path, token string) {
	t.Helper()
	// By rename, as an operator (or a Kubernetes secret volume) would.
	if err := os.WriteFile(path+".tmp", []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

func testRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "strata_test_things_total", Help: "things"})
	reg.MustRegister(c)
	return reg
}

// With a token file, /metrics and /debug/ need the token; /livez and
// /readyz stay open; a new token in the file replaces the old one; an
// empty file at start is an error and on a change keeps the old token.
func TestToken(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Addr: proctest.FreeAddr(t), Registry: testRegistry(), Ready: func() error { return nil }, Pprof: true, TokenFile: tokenFile}
	if _, err := Start(cfg, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Fatalf("an empty token file: %v, want an error", err)
	}
	writeToken(t, tokenFile, "s3cret")
	s, err := Start(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	base := "http://" + s.Addr()
	c := http.DefaultClient
	for _, tc := range []struct {
		path, token string
		want        int
	}{
		{"/livez", "", 200},
		{"/readyz", "", 200},
		{"/metrics", "", 401},
		{"/metrics", "wrong", 401},
		{"/metrics", "s3cret", 200},
		{"/debug/pprof/", "", 401},
		{"/debug/pprof/cmdline", "wrong", 401},
		{"/debug/pprof/", "s3cret", 200},
	} {
		if code, body := request(t, c, base+tc.path, tc.token); code != tc.want {
			t.Errorf("%s with token %q: %d %q, want %d", tc.path, tc.token, code, body, tc.want)
		}
	}
	if code, body := request(t, c, base+"/metrics", "s3cret"); !strings.Contains(body, "strata_test_things_total 0") {
		t.Errorf("metrics with the token: %d %q", code, body)
	}

	// Rotation: the file changes, the new token works, the old does not.
	writeToken(t, tokenFile, "n3w")
	testwait.Until(t, 10*time.Second, "the rotated token to be accepted", func() bool {
		code, _ := request(t, c, base+"/metrics", "n3w")
		return code == 200
	})
	if code, _ := request(t, c, base+"/metrics", "s3cret"); code != 401 {
		t.Fatalf("the old token after the rotation: %d", code)
	}
}

// A change of the token file that does not load (empty, gone) keeps the
// token in use.
func TestTokenBadChangeKeepsToken(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "token")
	writeToken(t, tokenFile, "s3cret")
	src, err := newTokenSource(tokenFile, 0, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	withToken := func(tok string) *http.Request {
		r, _ := http.NewRequest(http.MethodGet, "/metrics", nil)
		r.Header.Set("Authorization", "Bearer "+tok)
		return r
	}
	writeToken(t, tokenFile, "  ")
	if !src.allows(withToken("s3cret")) {
		t.Fatal("after an empty token file the previous token is refused")
	}
	if err := os.Remove(tokenFile); err != nil {
		t.Fatal(err)
	}
	if !src.allows(withToken("s3cret")) || src.allows(withToken("")) || src.allows(withToken(" ")) {
		t.Fatal("after the token file went: the previous token refused, or an empty one allowed")
	}
	writeToken(t, tokenFile, "n3w")
	if !src.allows(withToken("n3w")) || src.allows(withToken("s3cret")) {
		t.Fatal("the new token is not the one in use")
	}
}

// tlsFixture is a CA, a node certificate served by the admin address,
// and clients holding the CA and, optionally, a certificate.
type tlsFixture struct {
	t      *testing.T
	ca     *pki.CA
	server *tls.Config
	pool   *x509.CertPool
}

func newTLSFixture(t *testing.T) *tlsFixture {
	dir := t.TempDir()
	ca, err := pki.NewCA("test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(caFile, ca.CertPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	f := &tlsFixture{t: t, ca: ca, pool: x509.NewCertPool()}
	f.pool.AddCert(ca.Cert)
	certPEM, keyPEM, err := ca.Issue(pki.Request{Role: pki.RoleBroker, Name: "k1", Hosts: []string{"127.0.0.1"}, NotAfter: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	files, err := pki.WriteFiles(dir, "k1", certPEM, keyPEM, caFile)
	if err != nil {
		t.Fatal(err)
	}
	r, err := pki.NewReloader(files, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.server = r.HTTPSConfig()
	return f
}

// client is an HTTPS client holding the CA and, with role, a certificate
// of that role.
func (f *tlsFixture) client(role string) *http.Client {
	cfg := &tls.Config{RootCAs: f.pool}
	if role != "" {
		certPEM, keyPEM, err := f.ca.Issue(pki.Request{Role: role, Name: role + "-1", NotAfter: time.Now().Add(time.Hour)})
		if err != nil {
			f.t.Fatal(err)
		}
		c, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			f.t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{c}
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
}

// Over TLS: a client holding only the CA (and the token) scrapes; a
// client certificate of role admin stands for the token; another role's
// does not; /readyz needs neither.
func TestTLS(t *testing.T) {
	f := newTLSFixture(t)
	tokenFile := filepath.Join(t.TempDir(), "token")
	writeToken(t, tokenFile, "s3cret")
	s, err := Start(Config{Addr: proctest.FreeAddr(t), Registry: testRegistry(), Ready: func() error { return nil },
		TLS: f.server, TLSOnly: true, TokenFile: tokenFile}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	base := "https://" + s.Addr()
	caOnly := f.client("")
	if code, _ := request(t, caOnly, base+"/readyz", ""); code != 200 {
		t.Fatalf("readyz over TLS: %d", code)
	}
	if code, _ := request(t, caOnly, base+"/metrics", ""); code != 401 {
		t.Fatalf("metrics with the CA only: %d, want 401", code)
	}
	if code, _ := request(t, caOnly, base+"/metrics", "s3cret"); code != 200 {
		t.Fatalf("metrics with the CA and the token: %d", code)
	}
	if code, _ := request(t, f.client(pki.RoleAdmin), base+"/metrics", ""); code != 200 {
		t.Fatalf("metrics with an admin certificate: %d", code)
	}
	if code, _ := request(t, f.client(pki.RoleUser), base+"/metrics", ""); code != 401 {
		t.Fatalf("metrics with a user certificate: %d, want 401", code)
	}
	// Plain HTTP on a TLS-only listener gets nowhere.
	if resp, err := http.Get("http://" + s.Addr() + "/readyz"); err == nil {
		resp.Body.Close()
		t.Fatalf("plain HTTP answered %d on a TLS-only listener", resp.StatusCode)
	}
}

// A node with TLS (RequireAuth) and no token file: its admin address
// serves plain HTTP and TLS on one port; probes get /livez and /readyz
// either way; /metrics and /debug/ only an admin certificate, over TLS.
func TestRequireAuthWithoutToken(t *testing.T) {
	f := newTLSFixture(t)
	s, err := Start(Config{Addr: proctest.FreeAddr(t), Registry: testRegistry(), Ready: func() error { return nil },
		Pprof: true, TLS: f.server, RequireAuth: true}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	plain, https := "http://"+s.Addr(), "https://"+s.Addr()
	for _, tc := range []struct {
		name   string
		client *http.Client
		url    string
		want   int
	}{
		{"plain livez", http.DefaultClient, plain + "/livez", 200},
		{"plain readyz", http.DefaultClient, plain + "/readyz", 200},
		{"plain metrics", http.DefaultClient, plain + "/metrics", 401},
		{"plain pprof", http.DefaultClient, plain + "/debug/pprof/", 401},
		{"TLS readyz, CA only", f.client(""), https + "/readyz", 200},
		{"TLS metrics, CA only", f.client(""), https + "/metrics", 401},
		{"TLS metrics, user certificate", f.client(pki.RoleUser), https + "/metrics", 401},
		{"TLS metrics, admin certificate", f.client(pki.RoleAdmin), https + "/metrics", 200},
		{"TLS pprof, admin certificate", f.client(pki.RoleAdmin), https + "/debug/pprof/", 200},
	} {
		code, body := request(t, tc.client, tc.url, "any-token")
		if code != tc.want {
			t.Errorf("%s: %d %q, want %d", tc.name, code, body, tc.want)
		}
		if code == 401 && !strings.Contains(body, "admin client certificate") {
			t.Errorf("%s: the refusal %q does not say what is needed", tc.name, body)
		}
	}
}
