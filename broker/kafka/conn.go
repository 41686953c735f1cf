package kafka

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-log/strata/broker"
)

// Why a connection closed: the reason label of
// strata_broker_kafka_connections_closed_total and of its log line.
const (
	reasonClientClosed       = "client_closed"
	reasonShutdown           = "shutdown"
	reasonIdle               = "idle"
	reasonIO                 = "io_error"
	reasonTLS                = "tls_handshake"
	reasonCertificate        = "certificate_refused"
	reasonFrameTooLarge      = "frame_too_large"
	reasonMalformed          = "malformed_request"
	reasonUnknownAPI         = "unknown_api"
	reasonUnsupportedVersion = "unsupported_version"
	reasonUnauthenticated    = "unauthenticated_request"
	reasonSASLState          = "sasl_state"
	reasonSASLMechanism      = "sasl_mechanism"
	reasonSASLFailed         = "sasl_failed"
	reasonHandlerError       = "handler_error"
	reasonHandlerPanic       = "handler_panic"
)

const (
	// firstReadChunk is the most a frame's buffer starts with; it doubles
	// as bytes arrive, so a peer declaring a large frame and sending
	// little makes the server hold about what it sent, not what it
	// declared.
	firstReadChunk = 64 << 10
	// maxKeptWriteBuffer: a larger encoding buffer is dropped after its
	// write rather than kept for the connection's life.
	maxKeptWriteBuffer = 1 << 20
	// requestStartBytes: api key, api version, correlation id.
	requestStartBytes = 8
)

// closeError is an error that closes the connection, with its reason.
type closeError struct {
	reason string
	err    error
}

func (e *closeError) Error() string { return e.reason + ": " + e.err.Error() }
func (e *closeError) Unwrap() error { return e.err }

func closing(reason string, err error) error { return &closeError{reason: reason, err: err} }

func reasonOf(err error) string {
	if ce, ok := errors.AsType[*closeError](err); ok {
		return ce.reason
	}
	return reasonIO
}

// Conn is one client connection, as handlers see it. Its methods are
// safe to call from Handle and from Replies.
type Conn struct {
	srv    *Server
	nc     net.Conn
	tls    *tls.ConnectionState // nil: plaintext; set before the first request
	ctx    context.Context      // cancelled when the connection closes
	cancel context.CancelFunc
	log    *slog.Logger

	clientID atomic.Pointer[string]

	slots  chan struct{}  // one per request read and not answered yet
	queue  chan *outbound // requests in order, for the writer
	wg     sync.WaitGroup // the writer and the running Replies
	closed sync.Once

	// Touched only by the reader goroutine.
	authCtx       context.Context // ctx plus what Security added
	authenticated bool
	sasl          saslSession
	// fetches: the connection's share of the broker's fetch budget, made
	// at its first Fetch (Adapter.fetchConn), closed when it ends.
	fetches *broker.FetchConn

	// unwritten: the response the writer held when the connection closed
	// (written by the writer, read by serve after it ended).
	unwritten *outbound
}

// outbound is a request on its way to its response.
type outbound struct {
	key, version  int16
	correlationID int32
	start         time.Time
	fixedVersion  bool   // resp's version is not the request's (the KIP-511 answer)
	raw           bool   // a SASL token after a v0 handshake: bare frame, no header
	token         []byte // the raw token
	resp          kmsg.Response
	err           error  // closes the connection instead of a response
	closeAfter    string // reason to close once the response is written
	closeErr      error
	done          chan struct{} // closed once resp or err is set
	// release: a Held response's, called once by finish.
	release func()
}

// finish releases what o's response holds (Held), once it is written or
// dropped. o is the writer's then, or serve's once the writer ended.
func (o *outbound) finish() {
	if o.release != nil {
		o.release()
		o.release = nil
	}
}

func newConn(s *Server, nc net.Conn) *Conn {
	ctx, cancel := context.WithCancel(s.ctx)
	c := &Conn{
		srv: s, nc: nc, ctx: ctx, cancel: cancel,
		log:   s.log.With("remote", nc.RemoteAddr().String()),
		slots: make(chan struct{}, s.cfg.InFlightPerConnection),
		queue: make(chan *outbound, s.cfg.InFlightPerConnection),
	}
	c.authCtx = ctx
	return c
}

// RemoteAddr is the client's address.
func (c *Conn) RemoteAddr() net.Addr { return c.nc.RemoteAddr() }

// ClientID is the client ID of the latest request header read (a null
// one is ""): during Handle, the request's.
func (c *Conn) ClientID() string {
	if p := c.clientID.Load(); p != nil {
		return *p
	}
	return ""
}

// TLS is the connection's TLS state (nil: plaintext).
func (c *Conn) TLS() *tls.ConnectionState { return c.tls }

// ErrorCode counts code (a Kafka error code; 0 is not counted) as set in
// a response of API key and returns it: handlers set every error code
// through it, so strata_broker_kafka_errors_total sees them all.
//
//	p.ErrorCode = c.ErrorCode(req.Key(), kerr.NotLeaderForPartition.Code)
func (c *Conn) ErrorCode(key, code int16) int16 { return c.srv.metrics.errorCode(key, code) }

// fail closes the connection once: cancels its context (Replies end),
// closes the socket (the reader and writer end), counts and logs why.
func (c *Conn) fail(reason string, err error) {
	c.closed.Do(func() {
		c.cancel()
		_ = c.nc.Close()
		level := slog.LevelInfo
		switch reason {
		case reasonClientClosed, reasonShutdown, reasonIdle:
			level = slog.LevelDebug
		case reasonSASLFailed:
			// Security logs failed logins with their source, rate
			// limited: a guessing loop must not write a line a guess.
			level = slog.LevelDebug
		case reasonHandlerError:
			level = slog.LevelWarn
		case reasonHandlerPanic:
			level = slog.LevelError
		}
		if ce, ok := errors.AsType[*closeError](err); ok {
			err = ce.err
		}
		c.log.Log(context.Background(), level, "kafka connection closed", "reason", reason, "client_id", c.ClientID(), "err", err)
		c.srv.metrics.closed.WithLabelValues(reason).Inc()
	})
}

// serve runs the connection to its end: the TLS handshake, then the
// reader here and the writer beside it; it returns once every goroutine
// of the connection has.
func (c *Conn) serve() {
	defer func() {
		if p := recover(); p != nil {
			c.fail(reasonHandlerPanic, fmt.Errorf("connection reader panicked: %v\n%s", p, debug.Stack()))
		}
		c.wg.Wait()
		c.fail(reasonClientClosed, io.EOF) // no-op unless nothing closed it yet
		c.dropUnwritten()
	}()
	if err := c.start(); err != nil {
		c.fail(reasonOf(err), err)
		return
	}
	c.wg.Add(1)
	go c.writeLoop()
	if err := c.readLoop(); err != nil {
		c.fail(reasonOf(err), err)
	}
}

// dropUnwritten releases the responses the connection will not write:
// the one the writer held and those still queued. It runs once the
// reader, the writer and every Reply have ended.
func (c *Conn) dropUnwritten() {
	if c.unwritten != nil {
		c.unwritten.finish()
	}
	for {
		select {
		case o := <-c.queue:
			o.finish()
		default:
			if c.fetches != nil {
				c.fetches.Close()
			}
			return
		}
	}
}

// start completes the TLS handshake and asks Security for a certificate
// principal.
func (c *Conn) start() error {
	tc, ok := c.nc.(*tls.Conn)
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(c.ctx, min(c.srv.cfg.IdleTimeout, tlsHandshakeTimeout))
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		return closing(reasonTLS, err)
	}
	cs := tc.ConnectionState()
	c.tls = &cs
	if sec := c.srv.cfg.Security; sec != nil {
		authed, ok, err := sec.CertificateContext(c.ctx, cs)
		if err != nil {
			return closing(reasonCertificate, err)
		}
		if ok {
			c.authCtx, c.authenticated = authed, true
			c.srv.metrics.authSuccess.WithLabelValues("certificate").Inc()
		}
	}
	return nil
}

// readLoop reads and dispatches frames until an error, or until a
// response that closes the connection is queued (nil: the writer closes
// after writing it).
func (c *Conn) readLoop() error {
	for {
		body, err := c.readFrame()
		if err != nil {
			return err
		}
		start := time.Now()
		var stop bool
		if c.sasl.stage == saslExchange && c.sasl.raw {
			err = c.rawToken(body, start)
		} else {
			stop, err = c.request(body, start)
		}
		if err != nil || stop {
			return err
		}
	}
}

// frameLimit is the largest frame accepted now.
func (c *Conn) frameLimit() int32 {
	if c.srv.authRequired && !c.authenticated {
		return c.srv.cfg.MaxUnauthenticatedRequestBytes
	}
	return c.srv.cfg.MaxRequestBytes
}

// readFrame reads one size-prefixed frame, refusing a declared size
// above the limit before reading (or allocating) any of it.
func (c *Conn) readFrame() ([]byte, error) {
	limit := c.frameLimit()
	_ = c.nc.SetReadDeadline(time.Now().Add(c.srv.cfg.IdleTimeout))
	var size [4]byte
	if err := c.readFull(size[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(size[:])
	if n > uint32(limit) {
		return nil, closing(reasonFrameTooLarge, fmt.Errorf("frame of %d bytes, limit %d", n, limit))
	}
	buf := make([]byte, min(int(n), firstReadChunk))
	for got := 0; ; {
		if err := c.readFull(buf[got:]); err != nil {
			return nil, err
		}
		if got == 0 && !(c.sasl.stage == saslExchange && c.sasl.raw) {
			if err := c.checkControlSize(buf, n); err != nil {
				return nil, err
			}
		}
		if len(buf) == int(n) {
			return buf, nil
		}
		got = len(buf)
		buf = append(buf, make([]byte, min(int(n), 2*got)-got)...)
	}
}

// checkControlSize refuses a frame of n bytes, whose first bytes are
// head, above MaxControlRequestBytes unless it is a Produce request.
func (c *Conn) checkControlSize(head []byte, n uint32) error {
	limit := c.srv.cfg.MaxControlRequestBytes
	if n <= uint32(limit) || len(head) < 2 || binary.BigEndian.Uint16(head) == uint16(keyProduce) {
		return nil
	}
	return closing(reasonFrameTooLarge, fmt.Errorf("a %s request of %d bytes, limit %d for every API but Produce",
		kmsg.NameForKey(int16(binary.BigEndian.Uint16(head))), n, limit))
}

// readFull fills buf. The read deadline set at the frame's start is the
// idle timeout: when it passes while requests are unanswered (a parked
// JoinGroup, a long-poll fetch) it is re-armed, since waiting for the
// server is not idleness; otherwise the connection is idle.
func (c *Conn) readFull(buf []byte) error {
	for got := 0; got < len(buf); {
		n, err := c.nc.Read(buf[got:])
		got += n
		c.srv.metrics.received.Add(float64(n))
		switch {
		case err == nil:
		case errors.Is(err, os.ErrDeadlineExceeded) && len(c.slots) > 0:
			_ = c.nc.SetReadDeadline(time.Now().Add(c.srv.cfg.IdleTimeout))
		case errors.Is(err, os.ErrDeadlineExceeded):
			return closing(reasonIdle, fmt.Errorf("nothing received for %v with no request unanswered", c.srv.cfg.IdleTimeout))
		case errors.Is(err, io.EOF):
			return closing(reasonClientClosed, err)
		case c.ctx.Err() != nil:
			return closing(reasonShutdown, err)
		default:
			return closing(reasonIO, err)
		}
	}
	return nil
}
