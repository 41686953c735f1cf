package kafka

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"

	"github.com/strata-log/strata/internal/loginlimit"
	"github.com/strata-log/strata/internal/mtls/mtlstest"
	"github.com/strata-log/strata/internal/pki"
	"github.com/strata-log/strata/internal/scram"
	"github.com/strata-log/strata/internal/testwait"
)

// The in-process metad's proposals wait on a Raft future from a goroutine
// of their own; a future that Raft's FSM had queued when it shut down is
// never answered, so that goroutine outlives the server.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/hashicorp/raft.(*deferError).Error"))
}

const waitTimeout = 10 * time.Second

// principalKey carries the fake Security's principal; the test handler
// echoes it in Metadata's ClusterID.
type principalKey struct{}

func principalOf(ctx context.Context) string {
	p, _ := ctx.Value(principalKey{}).(string)
	return p
}

// fakeSecurity authenticates against an in-memory user table.
type fakeSecurity struct {
	required bool
	users    map[string]scram.User
	decoyKey []byte
	// throttled users' logins are refused as a throttled source's.
	throttled map[string]bool

	mu   sync.Mutex
	done []scramDone // ScramDone's calls
}

type scramDone struct {
	user string
	err  error
}

func (f *fakeSecurity) scramDone() []scramDone {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.done)
}

func newFakeSecurity(t *testing.T, required bool, users map[string]string) *fakeSecurity {
	t.Helper()
	f, err := buildFakeSecurity(required, users)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func buildFakeSecurity(required bool, users map[string]string) (*fakeSecurity, error) {
	f := &fakeSecurity{required: required, users: map[string]scram.User{}, decoyKey: []byte("decoy key")}
	for name, password := range users {
		u, err := scram.NewUser(name, password, 0)
		if err != nil {
			return nil, err
		}
		f.users[name] = u
	}
	return f, nil
}

func (f *fakeSecurity) AuthRequired() bool { return f.required }

func (f *fakeSecurity) CertificateContext(ctx context.Context, cs tls.ConnectionState) (context.Context, bool, error) {
	if len(cs.VerifiedChains) == 0 {
		return ctx, false, nil
	}
	cn := cs.VerifiedChains[0][0].Subject.CommonName
	if cn == "refused" {
		return nil, false, errors.New("certificate not allowed here")
	}
	return context.WithValue(ctx, principalKey{}, "cert:"+cn), true, nil
}

func (f *fakeSecurity) PasswordContext(ctx context.Context, _ net.Addr, user, password string) (context.Context, error) {
	if f.throttled[user] {
		return nil, &loginlimit.ThrottledError{RetryAfter: time.Second}
	}
	u, ok := f.users[user]
	if !ok || u.Verify(password) != nil {
		return nil, scram.ErrBadPassword
	}
	return context.WithValue(ctx, principalKey{}, "User:"+user), nil
}

func (f *fakeSecurity) ScramCredential(_ context.Context, _ net.Addr, user, mechanism string) (scram.Credential, error) {
	if f.throttled[user] {
		return scram.Credential{}, &loginlimit.ThrottledError{RetryAfter: time.Second}
	}
	if u, ok := f.users[user]; ok {
		if c, ok := u.Lookup(mechanism); ok {
			return c, nil
		}
	}
	return scram.Decoy(f.decoyKey, mechanism, user), nil
}

func (f *fakeSecurity) ScramDone(ctx context.Context, _ net.Addr, user, _ string, err error) context.Context {
	f.mu.Lock()
	f.done = append(f.done, scramDone{user: user, err: err})
	f.mu.Unlock()
	if err != nil {
		return nil
	}
	return context.WithValue(ctx, principalKey{}, "User:"+user)
}

// testHandler is the test-only handler set:
//   - Metadata answers this server as the only broker, each requested
//     topic with UNKNOWN_TOPIC_OR_PARTITION, and the principal in
//     ClusterID; a topic named "block:NAME" makes the Reply wait until
//     release(NAME); "handle-panic", "reply-panic", "handle-error",
//     "reply-error" and "wrong-key" misbehave as named.
//   - Produce answers each partition, or nothing with acks=0.
type testHandler struct {
	host    string
	port    int32
	handled atomic.Int32

	mu    sync.Mutex
	gates map[string]chan struct{}
}

func (h *testHandler) gate(name string) chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.gates == nil {
		h.gates = map[string]chan struct{}{}
	}
	if h.gates[name] == nil {
		h.gates[name] = make(chan struct{})
	}
	return h.gates[name]
}

func (h *testHandler) release(name string) { close(h.gate(name)) }

func (h *testHandler) register(t *testing.T, r *Registry) {
	t.Helper()
	for _, err := range []error{
		r.Register(3, 0, 12, HandlerFunc(h.metadata)),
		r.Register(0, 3, 9, HandlerFunc(h.produce)),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
}

func (h *testHandler) metadata(ctx context.Context, c *Conn, kreq kmsg.Request) (Reply, error) {
	h.handled.Add(1)
	req := kreq.(*kmsg.MetadataRequest)
	resp := kmsg.NewPtrMetadataResponse()
	b := kmsg.NewMetadataResponseBroker()
	b.NodeID, b.Host, b.Port = 1, h.host, h.port
	resp.Brokers = []kmsg.MetadataResponseBroker{b}
	resp.ControllerID = 1
	principal := principalOf(ctx)
	resp.ClusterID = &principal
	var wait chan struct{}
	for _, rt := range req.Topics {
		name := ""
		if rt.Topic != nil {
			name = *rt.Topic
		}
		switch {
		case name == "handle-panic":
			panic("test handler panics")
		case name == "handle-error":
			return nil, errors.New("test handler fails")
		case strings.HasPrefix(name, "block:"):
			wait = h.gate(strings.TrimPrefix(name, "block:"))
		}
		topic := kmsg.NewMetadataResponseTopic()
		topic.Topic = kmsg.StringPtr(name)
		topic.ErrorCode = c.ErrorCode(req.Key(), kerr.UnknownTopicOrPartition.Code)
		resp.Topics = append(resp.Topics, topic)
	}
	return func(ctx context.Context) (kmsg.Response, error) {
		if wait != nil {
			select {
			case <-wait:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		for _, t := range resp.Topics {
			switch *t.Topic {
			case "reply-panic":
				panic("test reply panics")
			case "reply-error":
				return nil, errors.New("test reply fails")
			case "wrong-key":
				return kmsg.NewPtrProduceResponse(), nil
			}
		}
		return resp, nil
	}, nil
}

func (h *testHandler) produce(_ context.Context, _ *Conn, kreq kmsg.Request) (Reply, error) {
	h.handled.Add(1)
	req := kreq.(*kmsg.ProduceRequest)
	if req.Acks == 0 {
		return nil, nil
	}
	resp := kmsg.NewPtrProduceResponse()
	for _, rt := range req.Topics {
		topic := kmsg.NewProduceResponseTopic()
		topic.Topic = rt.Topic
		for _, rp := range rt.Partitions {
			p := kmsg.NewProduceResponseTopicPartition()
			p.Partition = rp.Partition
			topic.Partitions = append(topic.Partitions, p)
		}
		resp.Topics = append(resp.Topics, topic)
	}
	return Respond(resp), nil
}

// testServer is a Server with the test handler, its own registry of
// metrics, and a log captured for assertions.
type testServer struct {
	*Server
	handler *testHandler
	reg     *prometheus.Registry
	logs    *logRecorder
}

// logRecorder is a slog.Handler keeping every record, with its
// attributes (those of With included) as strings.
type logRecorder struct {
	mu      *sync.Mutex
	records *[]logRecord
	attrs   []slog.Attr
}

type logRecord struct {
	level slog.Level
	msg   string
	attrs map[string]string
}

func newLogRecorder() *logRecorder { return &logRecorder{mu: &sync.Mutex{}, records: &[]logRecord{}} }

func (h *logRecorder) Enabled(context.Context, slog.Level) bool { return true }

func (h *logRecorder) Handle(_ context.Context, r slog.Record) error {
	rec := logRecord{level: r.Level, msg: r.Message, attrs: map[string]string{}}
	for _, a := range h.attrs {
		rec.attrs[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool {
		rec.attrs[a.Key] = a.Value.String()
		return true
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	*h.records = append(*h.records, rec)
	return nil
}

func (h *logRecorder) WithAttrs(as []slog.Attr) slog.Handler {
	return &logRecorder{mu: h.mu, records: h.records, attrs: append(slices.Clip(h.attrs), as...)}
}

func (h *logRecorder) WithGroup(string) slog.Handler { return h }

// closes are the records of the connection from remote closing.
func (h *logRecorder) closes(remote string) []logRecord {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []logRecord
	for _, r := range *h.records {
		if r.msg == "kafka connection closed" && r.attrs["remote"] == remote {
			out = append(out, r)
		}
	}
	return out
}

func startServer(t *testing.T, cfg Config) *testServer {
	t.Helper()
	ts := &testServer{handler: &testHandler{}, reg: prometheus.NewRegistry(), logs: newLogRecorder()}
	if cfg.Address == "" {
		cfg.Address = "127.0.0.1:0"
	}
	if cfg.Handlers == nil {
		cfg.Handlers = NewRegistry()
		ts.handler.register(t, cfg.Handlers)
	}
	m, err := NewMetrics(ts.reg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Metrics = m
	cfg.Logger = slog.New(ts.logs)
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	ts.Server = s
	host, port, _ := net.SplitHostPort(s.Addr().String())
	p, _ := strconv.Atoi(port)
	ts.handler.host, ts.handler.port = host, int32(p)
	return ts
}

// closedBy is how many connections closed for reason.
func (ts *testServer) closedBy(reason string) float64 {
	return testutil.ToFloat64(ts.metrics.closed.WithLabelValues(reason))
}

// waitClosedBy waits until n connections closed for reason.
func (ts *testServer) waitClosedBy(t *testing.T, reason string, n float64) {
	t.Helper()
	testwait.Until(t, waitTimeout, fmt.Sprintf("%v connections closed by %s", n, reason), func() bool { return ts.closedBy(reason) >= n })
}

// closeLines are the log records of c's connection closing (the
// server logs the client's address as remote).
func (ts *testServer) closeLines(c *rawClient) []logRecord {
	return ts.logs.closes(c.nc.LocalAddr().String())
}

// rawClient speaks the protocol over a socket, encoding and decoding with
// kmsg.
type rawClient struct {
	t    *testing.T
	nc   net.Conn
	corr int32
}

func dialRaw(t *testing.T, addr string) *rawClient {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	return &rawClient{t: t, nc: nc}
}

func dialTLS(t *testing.T, addr string, cfg *tls.Config) *rawClient {
	t.Helper()
	nc, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	return &rawClient{t: t, nc: nc}
}

// frame encodes req as a whole frame (size prefix included).
func frame(req kmsg.Request, corr int32) []byte {
	return kmsg.NewRequestFormatter(kmsg.FormatterClientID("raw-test")).AppendRequest(nil, req, corr)
}

// send writes req and returns its correlation id.
func (r *rawClient) send(req kmsg.Request) int32 {
	r.t.Helper()
	r.corr++
	r.write(frame(req, r.corr))
	return r.corr
}

func (r *rawClient) write(b []byte) {
	r.t.Helper()
	if _, err := r.nc.Write(b); err != nil {
		r.t.Fatal(err)
	}
}

// writeToken writes a bare size-prefixed frame (a SASL v0 token).
func (r *rawClient) writeToken(token []byte) {
	r.t.Helper()
	r.write(binary.BigEndian.AppendUint32(nil, uint32(len(token))))
	r.write(token)
}

func (r *rawClient) readFrame() ([]byte, error) {
	_ = r.nc.SetReadDeadline(time.Now().Add(waitTimeout))
	var size [4]byte
	if _, err := io.ReadFull(r.nc, size[:]); err != nil {
		return nil, err
	}
	b := make([]byte, binary.BigEndian.Uint32(size[:]))
	_, err := io.ReadFull(r.nc, b)
	return b, err
}

// recv reads the response to req (sent with corr) and decodes it; the
// response header is v0 for ApiVersions and for non-flexible versions,
// else v1 (an empty tag section).
func (r *rawClient) recv(req kmsg.Request, corr int32) kmsg.Response {
	r.t.Helper()
	b, err := r.readFrame()
	if err != nil {
		r.t.Fatalf("reading the response to correlation id %d: %v", corr, err)
	}
	if got := int32(binary.BigEndian.Uint32(b)); got != corr {
		r.t.Fatalf("correlation id %d, want %d", got, corr)
	}
	b = b[4:]
	resp := req.ResponseKind()
	if resp.IsFlexible() && req.Key() != keyApiVersions {
		if len(b) == 0 || b[0] != 0 {
			r.t.Fatalf("response header v1 without an empty tag section: % x", b[:min(len(b), 8)])
		}
		b = b[1:]
	}
	if err := resp.ReadFrom(b); err != nil {
		r.t.Fatalf("decoding %s v%d: %v", kmsg.NameForKey(req.Key()), req.GetVersion(), err)
	}
	return resp
}

// roundTrip sends req and returns its response.
func (r *rawClient) roundTrip(req kmsg.Request) kmsg.Response {
	r.t.Helper()
	return r.recv(req, r.send(req))
}

// expectClosed reads until the server closes the connection; any frame
// on the way fails the test.
func (r *rawClient) expectClosed() {
	r.t.Helper()
	b, err := r.readFrame()
	if err == nil {
		r.t.Fatalf("a frame of %d bytes where the connection should close", len(b))
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		r.t.Fatal("the connection stayed open")
	}
}

func metadataRequest(version int16, topics ...string) *kmsg.MetadataRequest {
	req := kmsg.NewPtrMetadataRequest()
	req.Version = version
	req.Topics = []kmsg.MetadataRequestTopic{}
	for _, name := range topics {
		t := kmsg.NewMetadataRequestTopic()
		t.Topic = kmsg.StringPtr(name)
		req.Topics = append(req.Topics, t)
	}
	return req
}

func apiVersionsRequest(version int16) *kmsg.ApiVersionsRequest {
	req := kmsg.NewPtrApiVersionsRequest()
	req.Version = version
	req.ClientSoftwareName, req.ClientSoftwareVersion = "raw-test", "1.0"
	return req
}

// testPKI is a CA, the TLS config a broker listens with (its
// certificate for 127.0.0.1; it would require client certificates) and a
// client config trusting the CA that presents none.
type testPKI struct {
	ca     *mtlstest.CA
	server *tls.Config
	client *tls.Config
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	ca := mtlstest.NewCA(t)
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	return &testPKI{
		ca:     ca,
		server: ca.Credentials(t, pki.RoleBroker, "broker").ServerTLS(nil),
		client: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12},
	}
}

// clientWithCert is a client config presenting a user certificate of
// p's CA named cn.
func (p *testPKI) clientWithCert(t *testing.T, cn string) *tls.Config {
	t.Helper()
	return p.ca.Credentials(t, pki.RoleUser, cn).ClientTLS("127.0.0.1", nil)
}
