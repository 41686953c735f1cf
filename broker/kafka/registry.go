package kafka

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// API keys the Server answers itself, and Produce, whose requests may be
// larger than the others' (Config.MaxControlRequestBytes).
const (
	keyProduce          int16 = 0
	keySaslHandshake    int16 = 17
	keyApiVersions      int16 = 18
	keySaslAuthenticate int16 = 36
)

// Versions of the Server's own APIs. ApiVersions v5 (KIP-1242) would
// need the cluster and node IDs checked, so it stops at v4; a v5 request
// gets the KIP-511 answer and the client retries at v4.
const (
	apiVersionsMaxVersion      int16 = 4
	saslHandshakeMaxVersion    int16 = 1
	saslAuthenticateMaxVersion int16 = 2
)

// ErrRegister is wrapped by the errors Register returns.
var ErrRegister = errors.New("kafka: bad handler registration")

// Reply finishes a request: it may block (waiting for acknowledgements, a
// long-poll fetch, a parked JoinGroup) and runs concurrently with later
// requests' Handle and Reply. ctx is the connection's, cancelled when the
// connection closes: a Reply must then return promptly, since the
// connection (and Server.Close) waits for it. A nil Response sends
// nothing (Produce with acks=0); an error closes the connection.
type Reply func(ctx context.Context) (kmsg.Response, error)

// Held is a response that holds memory of a budget until it is written
// (a Fetch's records). When a Reply returns one, the connection writes
// Response and calls Release exactly once: after the response's frame
// was handed to the socket (written or failed), or, when the connection
// closed first, once it has dropped the response unwritten.
type Held struct {
	kmsg.Response
	Release func()
}

// Respond is the Reply of a response that is already known.
func Respond(resp kmsg.Response) Reply {
	return func(context.Context) (kmsg.Response, error) { return resp, nil }
}

// Handler serves one API. Handle runs on the connection's reader, in
// request order, one request at a time, after the request decoded and its
// version was checked against the registration: it does the work whose
// order matters (validation, enqueueing appends, admin changes) and
// returns the Reply that produces the response. ctx is the connection's,
// carrying what Security put in it (the principal). req is the decoded
// request (req.GetVersion() its version); the Server sets the response's
// version to the request's, so a Reply may build it with
// kmsg.NewPtr…Response() (whose defaults are Kafka's, unlike a struct
// literal's zeros); a response returned is the Server's (it sets the
// version), never one shared between requests. An error, or a panic,
// closes the connection. A nil Reply sends nothing, as a Reply returning
// a nil Response does.
type Handler interface {
	Handle(ctx context.Context, c *Conn, req kmsg.Request) (Reply, error)
}

// HandlerFunc is a function as a Handler.
type HandlerFunc func(ctx context.Context, c *Conn, req kmsg.Request) (Reply, error)

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, c *Conn, req kmsg.Request) (Reply, error) {
	return f(ctx, c, req)
}

type registration struct {
	minVersion, maxVersion int16
	handler                Handler
}

// Registry maps API keys to handlers and the versions they serve; it is
// what ApiVersions advertises. Not safe for concurrent use: fill it, then
// give it to New.
type Registry struct {
	entries map[int16]registration
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{entries: map[int16]registration{}} }

// Register serves versions minVersion..maxVersion of key with h. It
// refuses a key kmsg does not know, versions outside kmsg's, a key
// registered twice and the Server's own keys (ApiVersions,
// SaslHandshake, SaslAuthenticate).
func (r *Registry) Register(key, minVersion, maxVersion int16, h Handler) error {
	req := kmsg.RequestForKey(key)
	switch {
	case req == nil:
		return fmt.Errorf("%w: unknown API key %d", ErrRegister, key)
	case key == keyApiVersions || key == keySaslHandshake || key == keySaslAuthenticate:
		return fmt.Errorf("%w: %s is the server's own", ErrRegister, kmsg.NameForKey(key))
	case minVersion < 0 || minVersion > maxVersion || maxVersion > req.MaxVersion():
		return fmt.Errorf("%w: %s versions %d to %d, want 0 <= min <= max <= %d", ErrRegister, kmsg.NameForKey(key), minVersion, maxVersion, req.MaxVersion())
	case h == nil:
		return fmt.Errorf("%w: %s without a handler", ErrRegister, kmsg.NameForKey(key))
	}
	if _, ok := r.entries[key]; ok {
		return fmt.Errorf("%w: %s registered twice", ErrRegister, kmsg.NameForKey(key))
	}
	r.entries[key] = registration{minVersion: minVersion, maxVersion: maxVersion, handler: h}
	return nil
}

// routes is a Server's frozen copy of the registry plus its own keys.
type routes struct {
	entries map[int16]registration // own keys have a nil handler
	// advertised is the ApiVersions answer's ApiKeys, sorted by key.
	advertised []kmsg.ApiVersionsResponseApiKey
}

func newRoutes(r *Registry, sasl bool) routes {
	rt := routes{entries: map[int16]registration{keyApiVersions: {maxVersion: apiVersionsMaxVersion}}}
	for k, e := range r.entries {
		rt.entries[k] = e
	}
	if sasl {
		rt.entries[keySaslHandshake] = registration{maxVersion: saslHandshakeMaxVersion}
		rt.entries[keySaslAuthenticate] = registration{maxVersion: saslAuthenticateMaxVersion}
	}
	for k, e := range rt.entries {
		key := kmsg.NewApiVersionsResponseApiKey()
		key.ApiKey, key.MinVersion, key.MaxVersion = k, e.minVersion, e.maxVersion
		rt.advertised = append(rt.advertised, key)
	}
	slices.SortFunc(rt.advertised, func(a, b kmsg.ApiVersionsResponseApiKey) int { return int(a.ApiKey) - int(b.ApiKey) })
	return rt
}

// apiVersionsFallback is the KIP-511 answer to an ApiVersions version
// above the one served: a v0 response with UNSUPPORTED_VERSION listing
// only ApiVersions's range, so the client retries at a version served.
// The request's body is not parsed (it may be of a shape this server does
// not know).
func apiVersionsFallback() *kmsg.ApiVersionsResponse {
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.Version = 0
	resp.ErrorCode = kerr.UnsupportedVersion.Code
	key := kmsg.NewApiVersionsResponseApiKey()
	key.ApiKey, key.MinVersion, key.MaxVersion = keyApiVersions, 0, apiVersionsMaxVersion
	resp.ApiKeys = []kmsg.ApiVersionsResponseApiKey{key}
	return resp
}

// apiVersions answers a request of a version served: every registered
// key, or INVALID_REQUEST for a v3+ client software name or version that
// does not match Kafka's pattern.
func (rt *routes) apiVersions(req *kmsg.ApiVersionsRequest) *kmsg.ApiVersionsResponse {
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.Version = req.Version
	if req.Version >= 3 && (!validSoftware(req.ClientSoftwareName) || !validSoftware(req.ClientSoftwareVersion)) {
		resp.ErrorCode = kerr.InvalidRequest.Code
		return resp
	}
	resp.ApiKeys = slices.Clone(rt.advertised)
	return resp
}

// validSoftware matches [a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?, the
// pattern Kafka checks KIP-511's client software name and version
// against.
func validSoftware(s string) bool {
	alnum := func(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' }
	if s == "" || !alnum(s[0]) || !alnum(s[len(s)-1]) {
		return false
	}
	for i := 1; i < len(s)-1; i++ {
		if c := s[i]; !alnum(c) && c != '-' && c != '.' {
			return false
		}
	}
	return true
}
