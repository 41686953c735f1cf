package objfault

import (
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/strata-log/strata/internal/proctest"
)

// Rule matches requests and says what to do to them. Empty match fields
// match everything; the zero action forwards the request untouched (a rule
// that only counts).
type Rule struct {
	// Method matches the HTTP method ("GET", "PUT", "POST", "HEAD",
	// "DELETE").
	Method string
	// KeyContains matches a substring of the object key (the path after
	// the bucket).
	KeyContains string
	// Query matches query parameters, each "name" (present, any value) or
	// "name=value": "uploadId" and "partNumber=2" pick one part of a
	// multipart upload; POST with "uploadId" is CompleteMultipartUpload.
	Query []string

	// Latency delays the request before anything else happens to it.
	Latency time.Duration
	// Hang holds the request until Release, Close, or the client gives up;
	// a released request then proceeds with the rest of the rule.
	Hang bool
	// Status, when non-zero, answers with an S3 XML error instead of
	// forwarding. Code is its S3 error code; "" picks the usual one
	// (500 InternalError, 503 SlowDown, 403 AccessDenied, ...).
	Status int
	Code   string
	// TruncateBody, when positive, cuts the response body after that many
	// bytes by breaking the connection (the client sees an unexpected
	// EOF); with CleanTruncate the body ends as if complete and without a
	// Content-Length (only a client that checks Content-Range notices).
	TruncateBody  int64
	CleanTruncate bool

	// Times limits the rule to its first Times matches; 0 is unlimited.
	Times int
}

// Handle is an added rule.
type Handle struct {
	p    *Proxy
	rule Rule
	// hits is guarded by p.mu.
	hits int
}

// Hits returns how many requests the rule has matched.
func (h *Handle) Hits() int {
	h.p.mu.Lock()
	defer h.p.mu.Unlock()
	return h.hits
}

// Remove removes the rule; requests it holds (Hang) stay held until
// Release.
func (h *Handle) Remove() {
	h.p.mu.Lock()
	defer h.p.mu.Unlock()
	for i, r := range h.p.mu.rules {
		if r == h {
			h.p.mu.rules = append(h.p.mu.rules[:i], h.p.mu.rules[i+1:]...)
			return
		}
	}
}

// Request is a request the proxy saw.
type Request struct {
	Method string
	Key    string
	Query  string
}

// maxRequests bounds the request log; older entries are dropped.
const maxRequests = 10000

// Proxy is a fault-injecting reverse proxy in front of an S3 server.
type Proxy struct {
	// Endpoint is the proxy's address, 127.0.0.1:PORT; point the S3
	// client here.
	Endpoint string

	target *url.URL
	proxy  *httputil.ReverseProxy
	server *http.Server

	mu struct {
		sync.Mutex
		rules    []*Handle
		requests []Request
		total    int
		release  chan struct{} // closed by Release; replaced after
		ln       net.Listener  // nil while down
		conns    map[net.Conn]bool
		serving  sync.WaitGroup // Serve goroutines
		closed   bool
	}
}

// truncationKey carries a matched rule's truncation to ModifyResponse.
type truncationKey struct{}

type truncation struct {
	after int64
	clean bool
}

// Start starts a proxy to target (HOST:PORT) on a free loopback port from
// 10000-31999; t's cleanup closes it.
func Start(t testing.TB, target string) *Proxy {
	t.Helper()
	p, err := New(proctest.FreeAddr(t), target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// New starts a proxy listening on addr in front of target (both
// HOST:PORT). Close stops it.
func New(addr, target string) (*Proxy, error) {
	p := &Proxy{Endpoint: addr, target: &url.URL{Scheme: "http", Host: target}}
	p.mu.release = make(chan struct{})
	p.mu.conns = map[net.Conn]bool{}
	p.proxy = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(p.target)
			// The client signed the request for the Host it dialled.
			pr.Out.Host = pr.In.Host
		},
		Transport:      &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 16, IdleConnTimeout: 30 * time.Second},
		FlushInterval:  -1,
		ModifyResponse: truncate,
		// Broken bodies and refused upstreams are the point here.
		ErrorLog: log.New(io.Discard, "", 0),
	}
	p.server = &http.Server{
		Handler:           http.HandlerFunc(p.serveHTTP),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          log.New(io.Discard, "", 0),
		ConnState:         p.connState,
	}
	if err := p.listen(); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *Proxy) listen() error {
	ln, err := net.Listen("tcp", p.Endpoint)
	if err != nil {
		return fmt.Errorf("objfault: %w", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.closed {
		ln.Close()
		return errors.New("objfault: closed")
	}
	p.mu.ln = ln
	p.mu.serving.Add(1)
	go func() {
		defer p.mu.serving.Done()
		_ = p.server.Serve(ln)
	}()
	return nil
}

func (p *Proxy) connState(c net.Conn, state http.ConnState) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch state {
	case http.StateNew:
		p.mu.conns[c] = true
	case http.StateClosed, http.StateHijacked:
		delete(p.mu.conns, c)
	}
}

// Add adds a rule after the existing ones. A request gets the first rule
// that matches it and has Times left.
func (p *Proxy) Add(r Rule) *Handle {
	h := &Handle{p: p, rule: r}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mu.rules = append(p.mu.rules, h)
	return h
}

// Clear removes every rule.
func (p *Proxy) Clear() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mu.rules = nil
}

// Release lets every request held by a Hang rule proceed.
func (p *Proxy) Release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.closed {
		return // Close released everything for good
	}
	close(p.mu.release)
	p.mu.release = make(chan struct{})
}

// Requests returns the requests seen (the latest maxRequests).
func (p *Proxy) Requests() []Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Request(nil), p.mu.requests...)
}

// Total returns how many requests the proxy has seen.
func (p *Proxy) Total() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mu.total
}

// SetDown makes the server look down (true): the listener closes, so new
// connections are refused, and open connections are cut; or up again
// (false), listening on the same address.
func (p *Proxy) SetDown(down bool) error {
	if !down {
		p.mu.Lock()
		up := p.mu.ln != nil
		p.mu.Unlock()
		if up {
			return nil
		}
		return p.listen()
	}
	p.mu.Lock()
	ln := p.mu.ln
	p.mu.ln = nil
	if ln != nil {
		ln.Close()
	}
	for c := range p.mu.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.mu.serving.Wait()
	return nil
}

// Close stops the proxy, releasing held requests, and waits for its
// goroutines.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.mu.closed {
		p.mu.Unlock()
		return
	}
	p.mu.closed = true
	close(p.mu.release)
	p.mu.Unlock()
	_ = p.server.Close()
	p.mu.serving.Wait()
	p.proxy.Transport.(*http.Transport).CloseIdleConnections()
}

// objectKey returns the key of a path-style request path (/bucket/key).
func objectKey(path string) string {
	_, key, _ := strings.Cut(strings.TrimPrefix(path, "/"), "/")
	return key
}

// matches reports whether r's match fields accept a request.
func (r *Rule) matches(method, key string, query url.Values) bool {
	if r.Method != "" && !strings.EqualFold(r.Method, method) {
		return false
	}
	if r.KeyContains != "" && !strings.Contains(key, r.KeyContains) {
		return false
	}
	for _, q := range r.Query {
		name, value, hasValue := strings.Cut(q, "=")
		if !query.Has(name) || hasValue && query.Get(name) != value {
			return false
		}
	}
	return true
}

// pick records the request and returns the rule it gets (nil: none) and
// the channel Release closes.
func (p *Proxy) pick(req Request, query url.Values) (*Rule, chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mu.total++
	if len(p.mu.requests) == maxRequests {
		p.mu.requests = append(p.mu.requests[:0], p.mu.requests[1:]...)
	}
	p.mu.requests = append(p.mu.requests, req)
	for _, h := range p.mu.rules {
		if h.rule.Times > 0 && h.hits >= h.rule.Times {
			continue
		}
		if h.rule.matches(req.Method, req.Key, query) {
			h.hits++
			r := h.rule
			return &r, p.mu.release
		}
	}
	return nil, p.mu.release
}

func (p *Proxy) serveHTTP(w http.ResponseWriter, r *http.Request) {
	req := Request{Method: r.Method, Key: objectKey(r.URL.Path), Query: r.URL.RawQuery}
	rule, release := p.pick(req, r.URL.Query())
	if rule == nil {
		p.proxy.ServeHTTP(w, r)
		return
	}
	if rule.Latency > 0 {
		t := time.NewTimer(rule.Latency)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	if rule.Hang {
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
	}
	if rule.Status != 0 {
		// The client may still be sending a body; S3 reads it before
		// answering too, and not reading it can reset the connection
		// under the client's feet before it sees the answer.
		_, _ = io.Copy(io.Discard, r.Body)
		writeError(w, r, req.Key, rule.Status, rule.Code)
		return
	}
	if rule.TruncateBody > 0 {
		r = r.WithContext(context.WithValue(r.Context(), truncationKey{}, truncation{after: rule.TruncateBody, clean: rule.CleanTruncate}))
	}
	p.proxy.ServeHTTP(w, r)
}

// s3Error is S3's XML error body.
type s3Error struct {
	XMLName   xml.Name `xml:"Error"`
	Code      string
	Message   string
	Key       string `xml:",omitempty"`
	Resource  string
	RequestID string `xml:"RequestId"`
}

var defaultCodes = map[int]string{
	400: "InvalidRequest", 403: "AccessDenied", 404: "NoSuchKey", 412: "PreconditionFailed",
	500: "InternalError", 501: "NotImplemented", 503: "SlowDown",
}

func writeError(w http.ResponseWriter, r *http.Request, key string, status int, code string) {
	if code == "" {
		code = defaultCodes[status]
	}
	if code == "" {
		code = "InjectedError"
	}
	w.Header().Set("x-amz-request-id", "objfault")
	if r.Method == http.MethodHead {
		// HEAD answers have no body; the client classifies by status.
		w.WriteHeader(status)
		return
	}
	body, _ := xml.Marshal(s3Error{Code: code, Message: "objfault: injected " + code, Key: key, Resource: r.URL.Path, RequestID: "objfault"})
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(xml.Header))
	_, _ = w.Write(body)
}

// truncate is the proxy's ModifyResponse: it cuts the body of responses
// whose request matched a TruncateBody rule.
func truncate(resp *http.Response) error {
	tr, ok := resp.Request.Context().Value(truncationKey{}).(truncation)
	if !ok {
		return nil
	}
	if tr.clean {
		resp.Body = struct {
			io.Reader
			io.Closer
		}{io.LimitReader(resp.Body, tr.after), resp.Body}
		resp.ContentLength = -1
		resp.Header.Del("Content-Length")
		return nil
	}
	resp.Body = &breakingBody{rc: resp.Body, left: tr.after}
	return nil
}

// errCut is the error a breaking body ends with; the reverse proxy then
// aborts the connection mid-body.
var errCut = errors.New("objfault: body cut")

type breakingBody struct {
	rc   io.ReadCloser
	left int64
}

func (b *breakingBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, errCut
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *breakingBody) Close() error { return b.rc.Close() }
