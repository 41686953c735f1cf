package certs

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Errors of Kube.
var (
	ErrNotFound = errors.New("certs: Secret not found")
	ErrExists   = errors.New("certs: Secret already exists")
)

// ServiceAccountDir is where Kubernetes mounts a pod's service account:
// its token, the API server's CA and the pod's namespace.
const ServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// kubeTimeout bounds one API call; kubeBodyBytes what is read of an
// answer (a Secret holds at most 1 MiB).
const (
	kubeTimeout   = 30 * time.Second
	kubeBodyBytes = 2 << 20
)

// Kube is a client of the Secrets of one namespace in the Kubernetes API:
// what `strata cert kubernetes` needs and nothing more (no other kind, no
// update, no delete).
type Kube struct {
	base      string // https://host:port
	token     string
	namespace string
	hc        *http.Client
}

// Secret is a Kubernetes Secret as this package reads and writes it.
type Secret struct {
	Name   string
	Type   string // "Opaque", "kubernetes.io/tls"
	Labels map[string]string
	Data   map[string][]byte
}

// InCluster is the client of the pod's own service account: the API server
// at $KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT, trusted through
// and authenticated with the files in saDir (ServiceAccountDir). An
// empty namespace is the pod's own.
func InCluster(saDir, namespace string) (*Kube, error) {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return nil, errors.New("certs: not in a Kubernetes pod ($KUBERNETES_SERVICE_HOST and $KUBERNETES_SERVICE_PORT are unset)")
	}
	token, err := os.ReadFile(filepath.Join(saDir, "token"))
	if err != nil {
		return nil, fmt.Errorf("certs: service account token: %w", err)
	}
	caPEM, err := os.ReadFile(filepath.Join(saDir, "ca.crt"))
	if err != nil {
		return nil, fmt.Errorf("certs: API server CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("certs: no certificate in %s", filepath.Join(saDir, "ca.crt"))
	}
	if namespace == "" {
		ns, err := os.ReadFile(filepath.Join(saDir, "namespace"))
		if err != nil {
			return nil, fmt.Errorf("certs: namespace: %w", err)
		}
		namespace = strings.TrimSpace(string(ns))
	}
	hc := &http.Client{Timeout: kubeTimeout, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
	}}
	return NewKube("https://"+net.JoinHostPort(host, port), strings.TrimSpace(string(token)), namespace, hc), nil
}

// NewKube is a client of the API server at base (https://host:port) that
// authenticates with the bearer token, in namespace, through hc.
func NewKube(base, token, namespace string, hc *http.Client) *Kube {
	return &Kube{base: strings.TrimSuffix(base, "/"), token: token, namespace: namespace, hc: hc}
}

// Namespace is the namespace the client reads and writes.
func (k *Kube) Namespace() string { return k.namespace }

func (k *Kube) secretsURL(name string) string {
	u := k.base + "/api/v1/namespaces/" + url.PathEscape(k.namespace) + "/secrets"
	if name != "" {
		u += "/" + url.PathEscape(name)
	}
	return u
}

// secretJSON is the wire form of a Secret (data values are base64, which
// encoding/json does for []byte).
type secretJSON struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string            `json:"name"`
		Namespace string            `json:"namespace,omitempty"`
		Labels    map[string]string `json:"labels,omitempty"`
	} `json:"metadata"`
	Type string            `json:"type,omitempty"`
	Data map[string][]byte `json:"data,omitempty"`
}

// GetSecret reads the Secret name (ErrNotFound when there is none).
func (k *Kube) GetSecret(ctx context.Context, name string) (Secret, error) {
	body, err := k.do(ctx, http.MethodGet, k.secretsURL(name), nil, http.StatusOK)
	if err != nil {
		return Secret{}, err
	}
	var s secretJSON
	if err := json.Unmarshal(body, &s); err != nil {
		return Secret{}, fmt.Errorf("certs: Secret %s: %w", name, err)
	}
	return Secret{Name: s.Metadata.Name, Type: s.Type, Labels: s.Metadata.Labels, Data: s.Data}, nil
}

// CreateSecret creates s (ErrExists when a Secret of that name exists: it
// is left as it is).
func (k *Kube) CreateSecret(ctx context.Context, s Secret) error {
	w := secretJSON{APIVersion: "v1", Kind: "Secret", Type: s.Type, Data: s.Data}
	w.Metadata.Name, w.Metadata.Namespace, w.Metadata.Labels = s.Name, k.namespace, s.Labels
	body, err := json.Marshal(w)
	if err != nil {
		return err
	}
	_, err = k.do(ctx, http.MethodPost, k.secretsURL(""), body, http.StatusCreated)
	return err
}

// do sends one request and returns the body of an answer with status
// want; 404 is ErrNotFound, 409 ErrExists, anything else an error with
// the API's message.
func (k *Kube) do(ctx context.Context, method, u string, body []byte, want int) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+k.token)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := k.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("certs: %s %s: %w", method, u, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, kubeBodyBytes))
	if err != nil {
		return nil, fmt.Errorf("certs: %s %s: %w", method, u, err)
	}
	switch resp.StatusCode {
	case want:
		return b, nil
	case http.StatusNotFound:
		return nil, fmt.Errorf("%w: %s", ErrNotFound, u)
	case http.StatusConflict:
		return nil, fmt.Errorf("%w: %s", ErrExists, u)
	}
	var st struct {
		Message string `json:"message"`
	}
	msg := strings.TrimSpace(string(b))
	if json.Unmarshal(b, &st) == nil && st.Message != "" {
		msg = st.Message
	}
	hint := ""
	if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
		hint = " (the service account needs get and create on secrets in namespace " + k.namespace + ")"
	}
	return nil, fmt.Errorf("certs: %s %s: %s: %s%s", method, u, resp.Status, msg, hint)
}
