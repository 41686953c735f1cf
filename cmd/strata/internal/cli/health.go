package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

// Bounds of ProbeHTTP.
const (
	probeTimeout   = 5 * time.Second
	probeBodyBytes = 4096
)

// DefaultAdmin is the address `strata node health` probes for the admin
// listen address fromEnv (a role's $STRATA_ADMIN_LISTEN): an unspecified
// host (":7601", "0.0.0.0:7601") is dialled on loopback. fallback is used
// when fromEnv is empty or not host:port.
func DefaultAdmin(fromEnv, fallback string) string {
	host, port, err := net.SplitHostPort(fromEnv)
	if err != nil {
		return fallback
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}

// ProbeHTTP GETs addr+path and returns the status code and the first line
// of the body. Without tlsConf it speaks http. With it, https first,
// checking the node's certificate, and http when the node answers in
// plaintext (a node without --admin-tls): one probe serves a cluster
// whatever its admin ports speak.
func ProbeHTTP(ctx context.Context, addr, path string, tlsConf *tls.Config) (int, string, error) {
	if tlsConf != nil {
		hc := &http.Client{Timeout: probeTimeout, Transport: &http.Transport{TLSClientConfig: tlsConf}}
		defer hc.CloseIdleConnections()
		code, line, err := get(ctx, hc, "https://"+addr+path)
		if !errors.Is(err, http.ErrSchemeMismatch) {
			return code, line, err
		}
	}
	return get(ctx, &http.Client{Timeout: probeTimeout}, "http://"+addr+path)
}

func get(ctx context.Context, hc *http.Client, url string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, probeBodyBytes))
	line, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	return resp.StatusCode, line, nil
}

// AdminTLS is the client configuration of a probe of admin addresses
// served over TLS (--admin-tls): the nodes' certificates are checked
// against the CA bundle in caFile. No client certificate: /readyz and
// /livez are open.
func AdminTLS(caFile string) (*tls.Config, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no PEM certificate", caFile)
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}
