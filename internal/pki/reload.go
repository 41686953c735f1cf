package pki

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"sync"
	"time"
)

// Files names a node's PEM files: its certificate chain, its private key,
// the CA bundle it trusts for peers and, optionally, the certificate
// revocation lists (CRLs) of that CA.
type Files struct {
	Cert, Key, CA string
	// CRL, when set, holds one or more PEM "X509 CRL" blocks, each signed
	// by a certificate of the CA bundle.
	CRL string
}

// DefaultCheckInterval is how often a Reloader looks at its files.
const DefaultCheckInterval = time.Second

// Reloader holds a node's certificate, trusted CAs and revoked serials,
// read from Files and read again (on a handshake, at most every
// checkInterval) once a file changed. Safe for concurrent use.
type Reloader struct {
	files         Files
	checkInterval time.Duration

	mu struct {
		sync.Mutex
		m       *material
		stamps  [4]stamp // of Cert, Key, CA, CRL as last loaded
		checked time.Time
		err     error // the last reload that failed, until one succeeds
	}
}

// material is what one load of the files gives.
type material struct {
	cert    *tls.Certificate
	pool    *x509.CertPool
	revoked Revoked
}

// stamp is what says a file changed.
type stamp struct {
	size    int64
	modTime time.Time
}

// NewReloader loads f. checkInterval 0 is DefaultCheckInterval.
func NewReloader(f Files, checkInterval time.Duration) (*Reloader, error) {
	if f.Cert == "" || f.Key == "" || f.CA == "" {
		return nil, fmt.Errorf("%w: TLS needs a certificate, a key and a CA file (got %q, %q, %q)", ErrInvalid, f.Cert, f.Key, f.CA)
	}
	if checkInterval <= 0 {
		checkInterval = DefaultCheckInterval
	}
	r := &Reloader{files: f, checkInterval: checkInterval}
	stamps, err := r.stamps()
	if err != nil {
		return nil, err
	}
	m, err := r.load()
	if err != nil {
		return nil, err
	}
	r.mu.m, r.mu.stamps, r.mu.checked = m, stamps, time.Now()
	return r, nil
}

func (r *Reloader) stamps() ([4]stamp, error) {
	var s [4]stamp
	for i, p := range []string{r.files.Cert, r.files.Key, r.files.CA, r.files.CRL} {
		if p == "" {
			continue // no CRL
		}
		fi, err := os.Stat(p)
		if err != nil {
			return s, fmt.Errorf("pki: %w", err)
		}
		s[i] = stamp{fi.Size(), fi.ModTime()}
	}
	return s, nil
}

func (r *Reloader) load() (*material, error) {
	cert, err := tls.LoadX509KeyPair(r.files.Cert, r.files.Key)
	if err != nil {
		return nil, fmt.Errorf("pki: %s with %s: %w", r.files.Cert, r.files.Key, err)
	}
	if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
		return nil, fmt.Errorf("pki: %s: %w", r.files.Cert, err)
	}
	caPEM, err := os.ReadFile(r.files.CA)
	if err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("pki: %s holds no PEM certificate", r.files.CA)
	}
	m := &material{cert: &cert, pool: pool}
	if r.files.CRL != "" {
		crlPEM, err := os.ReadFile(r.files.CRL)
		if err != nil {
			return nil, fmt.Errorf("pki: %w", err)
		}
		if m.revoked, err = ParseCRLs(crlPEM, caPEM); err != nil {
			return nil, fmt.Errorf("pki: %s: %w", r.files.CRL, err)
		}
	}
	return m, nil
}

// current returns what is loaded, loading the files again first when
// they changed since the last load.
func (r *Reloader) current() *material {
	r.mu.Lock()
	defer r.mu.Unlock()
	if time.Since(r.mu.checked) < r.checkInterval {
		return r.mu.m
	}
	r.mu.checked = time.Now()
	stamps, err := r.stamps()
	if err == nil && stamps == r.mu.stamps {
		return r.mu.m
	}
	var m *material
	if err == nil {
		m, err = r.load()
	}
	if err != nil {
		// Half-written files, or a key that does not match yet: keep
		// serving with what was loaded last; try again next interval.
		r.mu.err = err
		return r.mu.m
	}
	r.mu.m, r.mu.stamps, r.mu.err = m, stamps, nil
	return m
}

// Err is the error of the last reload, if it failed (nil once one works).
func (r *Reloader) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mu.err
}

// Leaf is the node's own certificate as loaded now.
func (r *Reloader) Leaf() *x509.Certificate {
	return r.current().cert.Leaf
}

// ServerConfig serves the current certificate and requires a client
// certificate signed by the current CA bundle and not revoked by the
// current CRLs (mTLS).
func (r *Reloader) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			m := r.current()
			return &tls.Config{
				MinVersion:       tls.VersionTLS13,
				Certificates:     []tls.Certificate{*m.cert},
				ClientCAs:        m.pool,
				ClientAuth:       tls.RequireAndVerifyClientCert,
				VerifyConnection: m.revoked.Check,
			}, nil
		},
	}
}

// HTTPSConfig serves the current certificate for a listener whose
// clients need not have one (the admin HTTP address, scraped by tools
// that hold the CA and a token): a client certificate is verified against
// the CA bundle and the CRLs only when one is presented.
func (r *Reloader) HTTPSConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12, // scrapers and probes lag behind
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			m := r.current()
			return &tls.Config{
				MinVersion:       tls.VersionTLS12,
				Certificates:     []tls.Certificate{*m.cert},
				ClientCAs:        m.pool,
				ClientAuth:       tls.VerifyClientCertIfGiven,
				VerifyConnection: m.revoked.Check,
			}, nil
		},
	}
}

// ClientConfig presents the current certificate and checks the server's
// against the current CA bundle, the current CRLs and serverName (a host
// name or an IP address). Build one per connection (a gRPC transport
// credential does it per handshake), so a rotated bundle, CRL or
// certificate is used from the next connection on.
func (r *Reloader) ClientConfig(serverName string) *tls.Config {
	m := r.current()
	return &tls.Config{
		MinVersion:       tls.VersionTLS13,
		Certificates:     []tls.Certificate{*m.cert},
		RootCAs:          m.pool,
		ServerName:       serverName,
		VerifyConnection: m.revoked.Check,
	}
}
