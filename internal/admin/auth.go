package admin

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/strata-log/strata/internal/pki"
)

// tokenSource is the bearer token of a file, read again once the file
// changed (looked at, at most, every checkInterval).
type tokenSource struct {
	path          string
	checkInterval time.Duration
	log           *slog.Logger

	mu struct {
		sync.Mutex
		sum     [sha256.Size]byte // of the token: compared in constant time whatever its length
		size    int64
		modTime time.Time
		checked time.Time
	}
}

func newTokenSource(path string, checkInterval time.Duration, log *slog.Logger) (*tokenSource, error) {
	t := &tokenSource{path: path, checkInterval: checkInterval, log: log}
	sum, size, modTime, err := t.load()
	if err != nil {
		return nil, err
	}
	t.mu.sum, t.mu.size, t.mu.modTime, t.mu.checked = sum, size, modTime, time.Now()
	return t, nil
}

func (t *tokenSource) load() (sum [sha256.Size]byte, size int64, modTime time.Time, err error) {
	fi, err := os.Stat(t.path)
	if err != nil {
		return sum, 0, time.Time{}, fmt.Errorf("admin: token file: %w", err)
	}
	b, err := os.ReadFile(t.path)
	if err != nil {
		return sum, 0, time.Time{}, fmt.Errorf("admin: token file: %w", err)
	}
	tok := bytes.TrimSpace(b)
	if len(tok) == 0 {
		return sum, 0, time.Time{}, fmt.Errorf("admin: token file %s is empty", t.path)
	}
	return sha256.Sum256(tok), fi.Size(), fi.ModTime(), nil
}

// current is the token's digest, loading the file again first when it
// changed; a change that does not load keeps the previous token.
func (t *tokenSource) current() [sha256.Size]byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	if time.Since(t.mu.checked) < t.checkInterval {
		return t.mu.sum
	}
	t.mu.checked = time.Now()
	fi, err := os.Stat(t.path)
	if err == nil && fi.Size() == t.mu.size && fi.ModTime().Equal(t.mu.modTime) {
		return t.mu.sum
	}
	sum, size, modTime, err := t.load()
	if err != nil {
		t.log.Warn("admin token file not reloaded; the previous token stays", "err", err)
		return t.mu.sum
	}
	t.mu.sum, t.mu.size, t.mu.modTime = sum, size, modTime
	return sum
}

// authorizer decides who may read the guarded endpoints: a verified
// client certificate of role admin, or the bearer token when there is a
// token file.
type authorizer struct {
	token *tokenSource // nil: certificates only
}

// newAuthorizer returns nil (everything open) unless cfg names a token
// file or requires authentication.
func newAuthorizer(cfg Config, log *slog.Logger) (*authorizer, error) {
	a := &authorizer{}
	if cfg.TokenFile != "" {
		var err error
		if a.token, err = newTokenSource(cfg.TokenFile, time.Second, log); err != nil {
			return nil, err
		}
	}
	if a.token == nil && !cfg.RequireAuth {
		return nil, nil
	}
	return a, nil
}

// allows reports whether r carries a verified client certificate of role
// admin, or the token.
func (a *authorizer) allows(r *http.Request) bool {
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
		if id, err := pki.IdentityOf(r.TLS.VerifiedChains[0][0]); err == nil && id.Role == pki.RoleAdmin {
			return true
		}
	}
	return a.token != nil && a.token.allows(r)
}

// allows reports whether r carries the token.
func (t *tokenSource) allows(r *http.Request) bool {
	auth := r.Header.Get("Authorization")
	const prefix = "Bearer "
	if len(auth) <= len(prefix) || !strings.EqualFold(auth[:len(prefix)], prefix) {
		return false
	}
	got := sha256.Sum256([]byte(strings.TrimSpace(auth[len(prefix):])))
	want := t.current()
	return subtle.ConstantTimeCompare(got[:], want[:]) == 1
}

// guard serves h to requests a allows (every request when a is nil) and
// 401 to the rest.
func guard(a *authorizer, h http.Handler) http.Handler {
	if a == nil {
		return h
	}
	needs := "the admin bearer token or an admin client certificate"
	if a.token == nil {
		needs = "an admin client certificate, over TLS (or a bearer token: --admin-token-file)"
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !a.allows(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="strata admin"`)
			http.Error(w, "unauthorized: this endpoint needs "+needs, http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}
