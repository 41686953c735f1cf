package cli

import (
	"context"
	"io"
	"net"
	"net/http"
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

// ProbeHTTP GETs http://addr+path and returns the status code and the
// first line of the body.
func ProbeHTTP(ctx context.Context, addr, path string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := (&http.Client{Timeout: probeTimeout}).Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, probeBodyBytes))
	line, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	return resp.StatusCode, line, nil
}
