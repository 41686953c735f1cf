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
// and the CA bundle it trusts for peers.
type Files struct {
	Cert, Key, CA string
}

// DefaultCheckInterval is how often a Reloader looks at its files.
const DefaultCheckInterval = time.Second

// Reloader holds a node's certificate and trusted CAs, read from Files and
// read again (on a handshake, at most every checkInterval) once a file
// changed. Safe for concurrent use.
type Reloader struct {
	files         Files
	checkInterval time.Duration

	mu struct {
		sync.Mutex
		cert    *tls.Certificate
		pool    *x509.CertPool
		stamps  [3]stamp // of Cert, Key, CA as last loaded
		checked time.Time
		err     error // the last reload that failed, until one succeeds
	}
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
	cert, pool, err := r.load()
	if err != nil {
		return nil, err
	}
	r.mu.cert, r.mu.pool, r.mu.stamps, r.mu.checked = cert, pool, stamps, time.Now()
	return r, nil
}

func (r *Reloader) stamps() ([3]stamp, error) {
	var s [3]stamp
	for i, p := range []string{r.files.Cert, r.files.Key, r.files.CA} {
		fi, err := os.Stat(p)
		if err != nil {
			return s, fmt.Errorf("pki: %w", err)
		}
		s[i] = stamp{fi.Size(), fi.ModTime()}
	}
	return s, nil
}

func (r *Reloader) load() (*tls.Certificate, *x509.CertPool, error) {
	cert, err := tls.LoadX509KeyPair(r.files.Cert, r.files.Key)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: %s with %s: %w", r.files.Cert, r.files.Key, err)
	}
	if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
		return nil, nil, fmt.Errorf("pki: %s: %w", r.files.Cert, err)
	}
	caPEM, err := os.ReadFile(r.files.CA)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, nil, fmt.Errorf("pki: %s holds no PEM certificate", r.files.CA)
	}
	return &cert, pool, nil
}

// current returns the certificate and pool, loading the files again
// first when they changed since the last load.
func (r *Reloader) current() (*tls.Certificate, *x509.CertPool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if time.Since(r.mu.checked) < r.checkInterval {
		return r.mu.cert, r.mu.pool
	}
	r.mu.checked = time.Now()
	stamps, err := r.stamps()
	if err == nil && stamps == r.mu.stamps {
		return r.mu.cert, r.mu.pool
	}
	var cert *tls.Certificate
	var pool *x509.CertPool
	if err == nil {
		cert, pool, err = r.load()
	}
	if err != nil {
		// Half-written files, or a key that does not match yet: keep
		// serving with what was loaded last; try again next interval.
		r.mu.err = err
		return r.mu.cert, r.mu.pool
	}
	r.mu.cert, r.mu.pool, r.mu.stamps, r.mu.err = cert, pool, stamps, nil
	return cert, pool
}

// Err is the error of the last reload, if it failed (nil once one works).
func (r *Reloader) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mu.err
}

// Leaf is the node's own certificate as loaded now.
func (r *Reloader) Leaf() *x509.Certificate {
	cert, _ := r.current()
	return cert.Leaf
}

// ServerConfig serves the current certificate and requires a client
// certificate signed by the current CA bundle (mTLS).
func (r *Reloader) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			cert, pool := r.current()
			return &tls.Config{
				MinVersion:   tls.VersionTLS13,
				Certificates: []tls.Certificate{*cert},
				ClientCAs:    pool,
				ClientAuth:   tls.RequireAndVerifyClientCert,
			}, nil
		},
	}
}

// ClientConfig presents the current certificate and checks the server's
// against the current CA bundle and serverName (a host name or an IP
// address). Build one per connection (a gRPC transport credential does
// it per handshake), so a rotated bundle or certificate is used from the
// next connection on.
func (r *Reloader) ClientConfig(serverName string) *tls.Config {
	cert, pool := r.current()
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{*cert},
		RootCAs:      pool,
		ServerName:   serverName,
	}
}
