package config

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/strata-log/strata/internal/pki"
)

// ErrInsecureListener is returned by Security.CheckListeners for a
// listener on a non-loopback address without TLS and without --insecure.
var ErrInsecureListener = errors.New("config: plaintext listener on a non-loopback address")

// Security is a node's transport security; every role's config embeds it
// (squashed: its keys are plain flags). With the three files set, the
// node serves gRPC (and metad its Raft transport) over mutual TLS and
// dials every other node with the same certificate; with none, it is
// plaintext as before. With them the admin HTTP listener serves TLS (same
// certificate) beside plain HTTP, TLS only with AdminTLS, and /metrics
// and /debug/ need an admin client certificate or AdminTokenFile's token;
// without them, the token only when AdminTokenFile is set.
type Security struct {
	// TLSCertFile, TLSKeyFile and TLSCAFile are the node's certificate
	// chain, its private key and the CA bundle it trusts for peers (PEM).
	// All three or none.
	TLSCertFile string `mapstructure:"tls-cert-file"`
	TLSKeyFile  string `mapstructure:"tls-key-file"`
	TLSCAFile   string `mapstructure:"tls-ca-file"`
	// TLSCRLFile optionally holds the CA's certificate revocation lists
	// (PEM); a peer certificate they list is refused on every handshake,
	// both ways. Re-read on change like the other files.
	TLSCRLFile string `mapstructure:"tls-crl-file"`
	// AdminTLS serves the admin HTTP address over TLS only (without it,
	// a node with TLS serves TLS and plain HTTP there, told apart by a
	// connection's first byte); a client certificate is optional there.
	AdminTLS bool `mapstructure:"admin-tls"`
	// AdminTokenFile holds a bearer token that /metrics and /debug/ then
	// require (or a client certificate of role admin, over TLS); on a
	// node with TLS they need one of the two even without it. /livez and
	// /readyz stay open. Re-read on change.
	AdminTokenFile string `mapstructure:"admin-token-file"`
	// Insecure allows a plaintext listener on a non-loopback address.
	Insecure bool `mapstructure:"insecure"`
}

// SecurityFlags defines the flags of Security with d's values as defaults.
func SecurityFlags(fs *pflag.FlagSet, d Security) {
	fs.String("tls-cert-file", d.TLSCertFile, "PEM certificate chain of this node: serve gRPC over mutual TLS and dial peers with it (with --tls-key-file and --tls-ca-file)")
	fs.String("tls-key-file", d.TLSKeyFile, "PEM private key of --tls-cert-file")
	fs.String("tls-ca-file", d.TLSCAFile, "PEM CA bundle trusted for peers' certificates (clients and other nodes)")
	fs.String("tls-crl-file", d.TLSCRLFile, "PEM certificate revocation lists of the CA: refuse peers (clients and other nodes) whose certificate they list; re-read on change")
	fs.Bool("admin-tls", d.AdminTLS, "serve the admin HTTP address over TLS only (without it, a node with --tls-* serves TLS beside plain HTTP there; client certificates optional)")
	fs.String("admin-token-file", d.AdminTokenFile, "file holding a bearer token required for /metrics and /debug/ on the admin address (on a node with --tls-*, an admin client certificate also passes, and one of the two is required; /livez and /readyz stay open); re-read on change")
	fs.Bool("insecure", d.Insecure, "allow plaintext listeners (gRPC without TLS, the admin HTTP address) on non-loopback addresses")
}

// Files are the TLS files for pki and mtls.
func (s Security) Files() pki.Files {
	return pki.Files{Cert: s.TLSCertFile, Key: s.TLSKeyFile, CA: s.TLSCAFile, CRL: s.TLSCRLFile}
}

// TLS reports whether the certificate files are set.
func (s Security) TLS() bool { return s.TLSCertFile != "" }

// Validate checks that the TLS files are given all three or not at all,
// and that the CRL file and admin TLS come with them.
func (s Security) Validate() error {
	set := 0
	for _, f := range []string{s.TLSCertFile, s.TLSKeyFile, s.TLSCAFile} {
		if f != "" {
			set++
		}
	}
	if set != 0 && set != 3 {
		return fmt.Errorf("config: --tls-cert-file, --tls-key-file and --tls-ca-file go together (got %q, %q, %q)",
			s.TLSCertFile, s.TLSKeyFile, s.TLSCAFile)
	}
	if set == 0 && s.TLSCRLFile != "" {
		return fmt.Errorf("config: --tls-crl-file needs --tls-cert-file, --tls-key-file and --tls-ca-file")
	}
	if set == 0 && s.AdminTLS {
		return fmt.Errorf("config: --admin-tls needs --tls-cert-file, --tls-key-file and --tls-ca-file")
	}
	return nil
}

// String summarises s for the start-up log line (paths are not secret).
func (s Security) String() string {
	token := s.AdminTokenFile != ""
	if !s.TLS() {
		return fmt.Sprintf("tls=off insecure=%t admin-token=%t", s.Insecure, token)
	}
	return fmt.Sprintf("tls=on tls-cert-file=%s tls-ca-file=%s tls-crl-file=%s admin-tls=%t admin-token=%t insecure=%t",
		s.TLSCertFile, s.TLSCAFile, s.TLSCRLFile, s.AdminTLS, token, s.Insecure)
}

// Listener names one address a node listens on, and whether it is served
// over TLS when Security has certificates.
type Listener struct {
	// Flag is the flag naming the address, for the error message.
	Flag, Addr string
	// TLSCapable: served over TLS when TLS is on (gRPC, Raft); false for
	// the admin HTTP address, which is TLS only with AdminTLS.
	TLSCapable bool
}

// Check is Validate, then CheckListeners over a node's gRPC address
// listen (TLS-capable), its admin HTTP address admin, and any other
// listeners (metad's Raft): what every role's Config.Validate asks.
func (s Security) Check(listen, admin string, more ...Listener) error {
	if err := s.Validate(); err != nil {
		return err
	}
	ls := append([]Listener{{Flag: "listen", Addr: listen, TLSCapable: true}, {Flag: "admin-listen", Addr: admin}}, more...)
	return s.CheckListeners(ls...)
}

// CheckListeners refuses (ErrInsecureListener) a listener that would be
// plaintext on an address other than loopback, unless Insecure is set: a
// node reachable from the network must not serve unauthenticated calls
// by accident. An empty address is not checked (the listener is off).
func (s Security) CheckListeners(ls ...Listener) error {
	if s.Insecure {
		return nil
	}
	var bad []string
	for _, l := range ls {
		if l.Addr == "" || (s.TLS() && (l.TLSCapable || s.AdminTLS)) {
			continue
		}
		if !IsLoopback(l.Addr) {
			bad = append(bad, fmt.Sprintf("--%s %s", l.Flag, l.Addr))
		}
	}
	if len(bad) == 0 {
		return nil
	}
	hint := "give --tls-cert-file, --tls-key-file and --tls-ca-file, or"
	if s.TLS() {
		hint = "pass --admin-tls to serve the admin HTTP address over TLS, or"
	}
	return fmt.Errorf("%w: %s; %s listen on loopback, or pass --insecure to accept it",
		ErrInsecureListener, strings.Join(bad, ", "), hint)
}

// IsLoopback reports whether addr (host:port) can only be reached from
// this machine: a loopback IP, "localhost", or a name that resolves only
// to loopback IPs. An empty host (every interface), an unspecified address
// and anything unresolvable are not loopback.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	host = strings.Trim(host, "[]")
	if host == "" {
		return false
	}
	if ip := net.ParseIP(host); ip != nil {
		return ip.IsLoopback()
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	ips, err := net.DefaultResolver.LookupIPAddr(ctx, host)
	if err != nil || len(ips) == 0 {
		return false
	}
	for _, ip := range ips {
		if !ip.IP.IsLoopback() {
			return false
		}
	}
	return true
}
