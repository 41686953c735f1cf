package kafka

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-log/strata/internal/bufpool"
)

// errTruncated: fewer bytes than the request header needs.
var errTruncated = errors.New("kafka: truncated request header")

// readRequestStart reads the fields every request header version
// starts with: api key, api version, correlation id (int16, int16,
// int32, big-endian). The rest (client id, tags, body) stays unread.
func readRequestStart(body []byte) (key, version int16, correlationID int32, rest []byte, err error) {
	if len(body) < requestStartBytes {
		return 0, 0, 0, nil, errTruncated
	}
	r := kbin.Reader{Src: body}
	key, version, correlationID = r.Int16(), r.Int16(), r.Int32()
	return key, version, correlationID, r.Src, nil
}

// decodeRequest reads the rest of the request header (a nullable int16
// string client id, then, for flexible versions, a tag section) and
// decodes the body with kmsg. kmsg bounds every array and string by the
// bytes left, so a declared length allocates nothing beyond the frame's
// size times a constant.
func decodeRequest(key, version int16, rest []byte) (kmsg.Request, *string, error) {
	req := kmsg.RequestForKey(key)
	if req == nil || version < 0 || version > req.MaxVersion() {
		return nil, nil, fmt.Errorf("kafka: no decoder for API key %d version %d", key, version)
	}
	r := kbin.Reader{Src: rest}
	clientID := r.NullableString()
	req.SetVersion(version)
	if req.IsFlexible() {
		kmsg.SkipTags(&r)
	}
	if err := r.Complete(); err != nil {
		return nil, nil, errTruncated
	}
	if err := req.ReadFrom(r.Src); err != nil {
		return nil, nil, err
	}
	return req, clientID, nil
}

// request serves one request frame: stop reports a response queued that
// closes the connection once written.
func (c *Conn) request(body []byte, start time.Time) (stop bool, err error) {
	key, version, correlationID, rest, err := readRequestStart(body)
	if err != nil {
		return false, closing(reasonMalformed, err)
	}
	name := kmsg.NameForKey(key)
	if key == keyApiVersions && version > apiVersionsMaxVersion {
		c.srv.metrics.request(key, version)
		resp := apiVersionsFallback()
		c.ErrorCode(key, resp.ErrorCode)
		return false, c.respond(&outbound{key: key, correlationID: correlationID, start: start, fixedVersion: true, resp: resp})
	}
	reg, ok := c.srv.routes.entries[key]
	if !ok {
		return false, closing(reasonUnknownAPI, fmt.Errorf("API key %d (%s) is not served", key, name))
	}
	if version < reg.minVersion || version > reg.maxVersion {
		return false, closing(reasonUnsupportedVersion, fmt.Errorf("%s version %d, served %d to %d", name, version, reg.minVersion, reg.maxVersion))
	}
	if err := c.admit(key); err != nil {
		return false, err
	}
	req, clientID, err := decodeRequest(key, version, rest)
	if err != nil {
		return false, closing(reasonMalformed, fmt.Errorf("%s v%d: %w", name, version, err))
	}
	c.clientID.Store(clientID)
	c.srv.metrics.request(key, version)
	o := &outbound{key: key, version: version, correlationID: correlationID, start: start}
	if reg.handler == nil {
		return c.serveOwn(req, o)
	}
	return false, c.handle(reg.handler, req, o)
}

// admit applies the authentication gate: during a SASL exchange only
// ApiVersions and SaslAuthenticate are served; on a listener requiring
// authentication, before it, only those and SaslHandshake.
func (c *Conn) admit(key int16) error {
	switch {
	case c.sasl.stage == saslExchange && key != keyApiVersions && key != keySaslAuthenticate:
		return closing(reasonUnauthenticated, fmt.Errorf("%s during a SASL exchange", kmsg.NameForKey(key)))
	case c.srv.authRequired && !c.authenticated && key != keyApiVersions && key != keySaslHandshake && key != keySaslAuthenticate:
		return closing(reasonUnauthenticated, fmt.Errorf("%s before authentication", kmsg.NameForKey(key)))
	}
	return nil
}

// serveOwn answers the Server's own APIs, at once and in order.
func (c *Conn) serveOwn(req kmsg.Request, o *outbound) (stop bool, err error) {
	switch req := req.(type) {
	case *kmsg.ApiVersionsRequest:
		resp := c.srv.routes.apiVersions(req)
		c.ErrorCode(o.key, resp.ErrorCode)
		o.resp = resp
	case *kmsg.SASLHandshakeRequest:
		o.resp, o.closeAfter = c.saslHandshake(req)
		if o.closeAfter != "" {
			o.closeErr = fmt.Errorf("SaslHandshake for %q: %s", req.Mechanism, codeName(o.resp.(*kmsg.SASLHandshakeResponse).ErrorCode))
		}
	case *kmsg.SASLAuthenticateRequest:
		o.resp, o.closeAfter, o.closeErr = c.saslAuthenticate(req)
	default:
		return false, closing(reasonUnknownAPI, fmt.Errorf("%s has no handler", kmsg.NameForKey(o.key)))
	}
	return o.closeAfter != "", c.respond(o)
}

// rawToken serves a SASL token that follows a v0 handshake: the reply
// goes out as a bare frame; a failure closes without one (what Kafka
// does for v0 clients, which have no way to read an error).
func (c *Conn) rawToken(token []byte, start time.Time) error {
	reply, err := c.saslStep(token)
	if err != nil {
		return closing(reasonSASLFailed, err)
	}
	return c.respond(&outbound{key: keySaslAuthenticate, start: start, raw: true, token: reply})
}

// acquire takes an in-flight slot, waiting while the connection has
// InFlightPerConnection requests unanswered.
func (c *Conn) acquire() error {
	select {
	case c.slots <- struct{}{}:
		return nil
	case <-c.ctx.Done():
		return closing(reasonShutdown, c.ctx.Err())
	}
}

// respond queues a response already known.
func (c *Conn) respond(o *outbound) error {
	if err := c.acquire(); err != nil {
		return err
	}
	c.enqueue(o, closedChan)
	return nil
}

var closedChan = func() chan struct{} { ch := make(chan struct{}); close(ch); return ch }()

// handle calls the handler (in order, on the reader) and runs its Reply
// beside the connection.
func (c *Conn) handle(h Handler, req kmsg.Request, o *outbound) error {
	if err := c.acquire(); err != nil {
		return err
	}
	ctx := c.authCtx
	reply, err := c.callHandle(ctx, h, req)
	if err != nil {
		return err
	}
	if reply == nil {
		c.enqueue(o, closedChan)
		return nil
	}
	done := make(chan struct{})
	c.wg.Add(1)
	go c.runReply(ctx, o, reply, done)
	c.enqueue(o, done)
	return nil
}

// enqueue hands o to the writer; done is closed once o's response is
// known. It never blocks: the queue holds at most one entry per slot.
func (c *Conn) enqueue(o *outbound, done chan struct{}) {
	o.done = done
	c.queue <- o
}

func (c *Conn) callHandle(ctx context.Context, h Handler, req kmsg.Request) (reply Reply, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = closing(reasonHandlerPanic, fmt.Errorf("%s handler panicked: %v\n%s", kmsg.NameForKey(req.Key()), p, debug.Stack()))
		}
	}()
	reply, err = h.Handle(ctx, c, req)
	if err != nil {
		return nil, closing(reasonHandlerError, fmt.Errorf("%s handler: %w", kmsg.NameForKey(req.Key()), err))
	}
	return reply, nil
}

// runReply runs a Reply, turning an error or a panic into the
// connection's close.
func (c *Conn) runReply(ctx context.Context, o *outbound, reply Reply, done chan struct{}) {
	defer c.wg.Done()
	defer close(done)
	defer func() {
		if p := recover(); p != nil {
			o.err = closing(reasonHandlerPanic, fmt.Errorf("%s reply panicked: %v\n%s", kmsg.NameForKey(o.key), p, debug.Stack()))
		}
	}()
	resp, err := reply(ctx)
	if h, ok := resp.(Held); ok {
		resp, o.release = h.Response, h.Release
	}
	if err != nil {
		o.finish()
		o.err = closing(reasonHandlerError, fmt.Errorf("%s reply: %w", kmsg.NameForKey(o.key), err))
		return
	}
	o.resp = resp
}

// writeLoop writes responses in request order, each once its Reply is
// done; nil responses are skipped. It releases each response's hold
// (outbound.finish) once written; one it leaves unwritten it leaves in
// c.unwritten for serve to release after the Reply ended.
func (c *Conn) writeLoop() {
	defer c.wg.Done()
	var buf []byte
	for {
		var o *outbound
		select {
		case o = <-c.queue:
		case <-c.ctx.Done():
			return
		}
		select {
		case <-o.done:
		case <-c.ctx.Done():
			c.unwritten = o // its Reply may still be running
			return
		}
		if o.err != nil {
			c.fail(reasonOf(o.err), o.err)
			return
		}
		var err error
		if o.resp != nil || o.raw {
			buf, err = c.write(buf, o)
		}
		o.finish()
		if err != nil {
			c.fail(reasonOf(err), err)
			return
		}
		if !o.raw {
			c.srv.metrics.observe(o.key, o.start)
		}
		<-c.slots
		if o.closeAfter != "" {
			c.fail(o.closeAfter, o.closeErr)
			return
		}
	}
}

// write encodes o's response as a frame and writes it: int32 size, then
// for a Kafka response the correlation id, an empty tag section when the
// response is flexible (header v1) except for ApiVersions (always header
// v0), and the body; for a raw SASL token, the token alone. buf is the
// connection's encoding buffer, returned for the next response; a large
// response (a fetch's records) is encoded into a pooled buffer of its
// size instead, given back once written, so that it is neither grown by
// doubling nor left to the collector.
func (c *Conn) write(buf []byte, o *outbound) ([]byte, error) {
	kept := buf
	var pooled *[]byte
	if !o.raw {
		if n := responseSize(o.resp); n > maxKeptWriteBuffer {
			pooled = responseBuffers.Get(n)
			buf = *pooled
		}
	}
	buf, err := c.encode(buf[:0], o)
	if err == nil {
		_ = c.nc.SetWriteDeadline(time.Now().Add(c.srv.cfg.IdleTimeout))
		var n int
		n, err = c.nc.Write(buf)
		c.srv.metrics.sent.Add(float64(n))
		if err != nil && c.ctx.Err() != nil {
			err = closing(reasonShutdown, err)
		} else if err != nil {
			err = closing(reasonIO, err)
		}
	}
	if pooled != nil {
		if cap(buf) == cap(*pooled) {
			*pooled = buf[:0]
			responseBuffers.Put(pooled)
		}
		return kept, err
	}
	if cap(buf) > maxKeptWriteBuffer {
		buf = nil
	}
	return buf, err
}

// encode appends o's frame to buf.
func (c *Conn) encode(buf []byte, o *outbound) ([]byte, error) {
	buf = append(buf, 0, 0, 0, 0)
	if o.raw {
		buf = append(buf, o.token...)
	} else {
		if o.resp.Key() != o.key {
			return buf, closing(reasonHandlerError, fmt.Errorf("a %s response to a %s request", kmsg.NameForKey(o.resp.Key()), kmsg.NameForKey(o.key)))
		}
		if !o.fixedVersion {
			o.resp.SetVersion(o.version)
		}
		buf = kbin.AppendInt32(buf, o.correlationID)
		if o.resp.IsFlexible() && o.key != keyApiVersions {
			buf = append(buf, 0)
		}
		buf = o.resp.AppendTo(buf)
	}
	kbin.AppendInt32(buf[:0], int32(len(buf)-4))
	return buf, nil
}

// responseBuffers hold large responses while they are encoded and
// written: classes from 1 MiB to 128 MiB, four per doubling.
var responseBuffers = bufpool.New(bufpool.Steps(1<<20, 128<<20, 4)...)

// responseSize estimates a response's encoded size when records make it
// large (a Fetch's); 0 for the rest, whose size the kept buffer covers.
func responseSize(resp kmsg.Response) int {
	f, ok := resp.(*kmsg.FetchResponse)
	if !ok {
		return 0
	}
	n := 64
	for _, t := range f.Topics {
		n += 64 + len(t.Topic)
		for _, p := range t.Partitions {
			n += 128 + len(p.RecordBatches)
		}
	}
	return n
}
