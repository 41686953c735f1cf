package certs

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/strata-log/strata/internal/pki"
)

// fakeAPI serves the Secrets of one namespace as the Kubernetes API does
// (GET one, POST to create), for one bearer token.
type fakeAPI struct {
	mu      sync.Mutex
	secrets map[string]secretJSON
	forbid  bool
}

const (
	testToken     = "sa-token"
	testNamespace = "streams"
)

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.Header.Get("Authorization") != "Bearer "+testToken {
		http.Error(w, `{"kind":"Status","message":"Unauthorized"}`, http.StatusUnauthorized)
		return
	}
	if f.forbid {
		http.Error(w, `{"kind":"Status","message":"secrets is forbidden"}`, http.StatusForbidden)
		return
	}
	prefix := "/api/v1/namespaces/" + testNamespace + "/secrets"
	switch {
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, prefix+"/"):
		s, ok := f.secrets[strings.TrimPrefix(r.URL.Path, prefix+"/")]
		if !ok {
			http.Error(w, `{"kind":"Status","message":"not found"}`, http.StatusNotFound)
			return
		}
		_ = json.NewEncoder(w).Encode(s)
	case r.Method == http.MethodPost && r.URL.Path == prefix:
		var s secretJSON
		if err := json.NewDecoder(r.Body).Decode(&s); err != nil || s.Kind != "Secret" || s.Metadata.Name == "" {
			http.Error(w, `{"message":"bad secret"}`, http.StatusBadRequest)
			return
		}
		if _, ok := f.secrets[s.Metadata.Name]; ok {
			http.Error(w, `{"kind":"Status","message":"already exists"}`, http.StatusConflict)
			return
		}
		f.secrets[s.Metadata.Name] = s
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(s)
	default:
		http.Error(w, "unexpected "+r.Method+" "+r.URL.Path, http.StatusMethodNotAllowed)
	}
}

func startFakeAPI(t *testing.T) (*fakeAPI, *Kube) {
	t.Helper()
	f := &fakeAPI{secrets: map[string]secretJSON{}}
	srv := httptest.NewTLSServer(f)
	t.Cleanup(srv.Close)
	return f, NewKube(srv.URL, testToken, testNamespace, srv.Client())
}

var secretsOpts = SecretsOptions{CASecret: "rel-strata-ca", CreateCA: true, CAName: "test CA", CAValidity: time.Hour,
	AdminSecret: "rel-strata-admin", AdminName: "admin", AdminValidity: time.Hour, Labels: map[string]string{"app.kubernetes.io/instance": "rel"}}

// TestEnsureSecrets: the first run creates a CA and an admin certificate
// from it; a second run (an upgrade, a retried Job) keeps both (C1).
func TestEnsureSecrets(t *testing.T) {
	f, k := startFakeAPI(t)
	ctx := context.Background()
	done, err := EnsureSecrets(ctx, k, secretsOpts)
	if err != nil || len(done) != 2 || !strings.HasPrefix(done[0], "created") || !strings.HasPrefix(done[1], "created") {
		t.Fatalf("first run: %q, %v", done, err)
	}
	caSecret := f.secrets["rel-strata-ca"]
	if caSecret.Type != "Opaque" || caSecret.Metadata.Labels["app.kubernetes.io/instance"] != "rel" {
		t.Fatalf("CA Secret: type %q, labels %v", caSecret.Type, caSecret.Metadata.Labels)
	}
	ca, err := ParseCA(caSecret.Data[CACertFile], caSecret.Data[CAKeyFile])
	if err != nil {
		t.Fatal(err)
	}
	admin := f.secrets["rel-strata-admin"]
	if admin.Type != "kubernetes.io/tls" || string(admin.Data[CACertFile]) != string(ca.CertPEM()) {
		t.Fatalf("admin Secret: type %q, ca.crt the CA's: %v", admin.Type, string(admin.Data[CACertFile]) == string(ca.CertPEM()))
	}
	// The admin Secret mounted as a directory is a client's TLS files.
	dir := t.TempDir()
	for k, v := range admin.Data {
		if err := os.WriteFile(filepath.Join(dir, k), v, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	checkIssued(t, pki.Files{Cert: filepath.Join(dir, TLSCertKey), Key: filepath.Join(dir, TLSKeyKey), CA: filepath.Join(dir, CACertFile)}, "admin", "admin")

	done, err = EnsureSecrets(ctx, k, secretsOpts)
	if err != nil || !strings.HasPrefix(done[0], "kept") || !strings.HasPrefix(done[1], "kept") {
		t.Fatalf("second run: %q, %v", done, err)
	}
	if string(f.secrets["rel-strata-ca"].Data[CAKeyFile]) != string(caSecret.Data[CAKeyFile]) {
		t.Fatal("second run replaced the CA")
	}
}

// TestEnsureSecretsRefuses: a CA the operator brings must exist; an admin
// Secret left from another CA is reported, not kept silently; a service
// account without the rights gets an error saying which it needs.
func TestEnsureSecretsRefuses(t *testing.T) {
	ctx := context.Background()
	_, k := startFakeAPI(t)
	o := secretsOpts
	o.CreateCA = false
	if _, err := EnsureSecrets(ctx, k, o); !errors.Is(err, ErrNoCA) {
		t.Fatalf("missing CA without CreateCA: %v, want ErrNoCA", err)
	}

	f, k := startFakeAPI(t)
	other, _ := pki.NewCA("other", time.Hour)
	certPEM, keyPEM, _ := other.Issue(pki.Request{Role: pki.RoleAdmin, Name: "admin", NotAfter: time.Now().Add(time.Hour)})
	stale := secretJSON{Kind: "Secret", Data: map[string][]byte{TLSCertKey: certPEM, TLSKeyKey: keyPEM}}
	stale.Metadata.Name = "rel-strata-admin"
	f.secrets[stale.Metadata.Name] = stale
	if _, err := EnsureSecrets(ctx, k, secretsOpts); !errors.Is(err, ErrAdminNotFromCA) {
		t.Fatalf("admin Secret of another CA: %v, want ErrAdminNotFromCA", err)
	}

	f, k = startFakeAPI(t)
	f.forbid = true
	if _, err := EnsureSecrets(ctx, k, secretsOpts); err == nil || !strings.Contains(err.Error(), "needs get and create on secrets") {
		t.Fatalf("forbidden: %v", err)
	}
}

// TestInCluster: the client is built from the service account's files and
// the API server's address in the environment, and authenticates with the
// token.
func TestInCluster(t *testing.T) {
	f := &fakeAPI{secrets: map[string]secretJSON{}}
	srv := httptest.NewTLSServer(f)
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	sa := t.TempDir()
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	for name, data := range map[string]string{"token": testToken + "\n", "ca.crt": string(caPEM), "namespace": testNamespace} {
		if err := os.WriteFile(filepath.Join(sa, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("KUBERNETES_SERVICE_HOST", u.Hostname())
	t.Setenv("KUBERNETES_SERVICE_PORT", u.Port())
	k, err := InCluster(sa, "")
	if err != nil {
		t.Fatal(err)
	}
	if k.Namespace() != testNamespace {
		t.Fatalf("namespace %q", k.Namespace())
	}
	if _, err := k.GetSecret(context.Background(), "nothing"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("GET of a missing Secret: %v, want ErrNotFound", err)
	}
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	if _, err := InCluster(sa, ""); err == nil {
		t.Fatal("InCluster outside a pod: no error")
	}
}
