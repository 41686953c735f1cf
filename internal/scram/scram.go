package scram

import (
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Mechanism is the only mechanism stored.
const Mechanism = "SCRAM-SHA-256"

// MinIterations is the least PBKDF2 iteration count accepted (RFC 7677),
// MaxIterations the most (Kafka's bound): a broker derives the key with
// the stored count on every password it checks, so a credential of a
// billion iterations would make each login of that user minutes of CPU.
// DefaultIterations is what NewCredential uses.
const (
	MinIterations     = 4096
	MaxIterations     = 16384
	DefaultIterations = 4096
	saltBytes         = 16
)

// Sentinel errors.
var (
	// ErrBadPassword: the password does not match the credential.
	ErrBadPassword = errors.New("scram: wrong user name or password")
	// ErrInvalid: a credential that cannot be used (bad JSON, too few or
	// too many iterations, wrong key sizes).
	ErrInvalid = errors.New("scram: invalid credential")
)

// Credential is what metad keeps of a user's password.
type Credential struct {
	Name       string `json:"name"`
	Mechanism  string `json:"mechanism"`
	Iterations int    `json:"iterations"`
	Salt       []byte `json:"salt"`
	StoredKey  []byte `json:"stored_key"`
	ServerKey  []byte `json:"server_key"`
}

// NewCredential salts and hashes password for name (iterations 0:
// DefaultIterations).
func NewCredential(name, password string, iterations int) (Credential, error) {
	if iterations == 0 {
		iterations = DefaultIterations
	}
	if iterations < MinIterations || iterations > MaxIterations {
		return Credential{}, fmt.Errorf("%w: %d iterations, want %d to %d", ErrInvalid, iterations, MinIterations, MaxIterations)
	}
	if password == "" {
		return Credential{}, fmt.Errorf("%w: empty password", ErrInvalid)
	}
	salt := make([]byte, saltBytes)
	if _, err := rand.Read(salt); err != nil {
		return Credential{}, err
	}
	stored, server, err := keys(password, salt, iterations)
	if err != nil {
		return Credential{}, err
	}
	return Credential{Name: name, Mechanism: Mechanism, Iterations: iterations, Salt: salt, StoredKey: stored, ServerKey: server}, nil
}

func keys(password string, salt []byte, iterations int) (stored, server []byte, err error) {
	salted, err := pbkdf2.Key(sha256.New, password, salt, iterations, sha256.Size)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	clientKey := mac(salted, "Client Key")
	sum := sha256.Sum256(clientKey)
	return sum[:], mac(salted, "Server Key"), nil
}

func mac(key []byte, msg string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(msg))
	return h.Sum(nil)
}

// Validate reports whether c can be checked against.
func (c Credential) Validate() error {
	if c.Mechanism != Mechanism || c.Iterations < MinIterations || c.Iterations > MaxIterations || len(c.Salt) < 8 ||
		len(c.StoredKey) != sha256.Size || len(c.ServerKey) != sha256.Size {
		return fmt.Errorf("%w: user %q", ErrInvalid, c.Name)
	}
	return nil
}

// Verify returns nil when password is c's, else ErrBadPassword (or
// ErrInvalid for an unusable credential).
func (c Credential) Verify(password string) error {
	if err := c.Validate(); err != nil {
		return err
	}
	stored, _, err := keys(password, c.Salt, c.Iterations)
	if err != nil {
		return err
	}
	if subtle.ConstantTimeCompare(stored, c.StoredKey) != 1 {
		return ErrBadPassword
	}
	return nil
}

// Marshal encodes c for metad.
func (c Credential) Marshal() []byte {
	b, _ := json.Marshal(c)
	return b
}

// Unmarshal decodes a stored credential.
func Unmarshal(b []byte) (Credential, error) {
	var c Credential
	if err := json.Unmarshal(b, &c); err != nil {
		return Credential{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return c, c.Validate()
}

// Cache remembers successful verifications (see the package doc). Safe
// for concurrent use.
type Cache struct {
	key [32]byte
	max int
	ttl time.Duration

	mu struct {
		sync.Mutex
		entries map[[32]byte]cacheEntry
	}
}

type cacheEntry struct {
	version int64
	expires time.Time
}

// NewCache returns a cache of at most max entries living ttl each.
func NewCache(max int, ttl time.Duration) *Cache {
	c := &Cache{max: max, ttl: ttl}
	if _, err := rand.Read(c.key[:]); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	c.mu.entries = map[[32]byte]cacheEntry{}
	return c
}

func (c *Cache) id(name, password string) [32]byte {
	h := hmac.New(sha256.New, c.key[:])
	h.Write([]byte(name))
	h.Write([]byte{0})
	h.Write([]byte(password))
	var out [32]byte
	copy(out[:], h.Sum(nil))
	return out
}

// Check reports whether (name, password) was verified against the record
// of version and has not expired at now.
func (c *Cache) Check(name, password string, version int64, now time.Time) bool {
	id := c.id(name, password)
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.mu.entries[id]
	if !ok {
		return false
	}
	if e.version != version || !now.Before(e.expires) {
		delete(c.mu.entries, id)
		return false
	}
	return true
}

// Add remembers that (name, password) matched the record of version.
func (c *Cache) Add(name, password string, version int64, now time.Time) {
	id := c.id(name, password)
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.mu.entries) >= c.max {
		for k, e := range c.mu.entries {
			if !now.Before(e.expires) {
				delete(c.mu.entries, k)
			}
		}
		for k := range c.mu.entries {
			if len(c.mu.entries) < c.max {
				break
			}
			delete(c.mu.entries, k)
		}
	}
	c.mu.entries[id] = cacheEntry{version: version, expires: now.Add(c.ttl)}
}

// Len is the number of entries.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.mu.entries)
}

// gRPC metadata keys of a password login (per call, over TLS only).
const (
	MetadataUser     = "strata-user"
	MetadataPassword = "strata-password"
)
