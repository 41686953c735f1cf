package metaclient

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/strata-log/strata/proto/metadpb"
)

// Grant creates a lease that expires ttl after its last keep-alive and
// returns its id. The server may round ttl; NewSession uses the granted one.
func (c *Client) Grant(ctx context.Context, ttl time.Duration) (int64, error) {
	resp, err := c.grant(ctx, ttl)
	if err != nil {
		return 0, err
	}
	return resp.GetId(), nil
}

func (c *Client) grant(ctx context.Context, ttl time.Duration) (*metadpb.LeaseGrantResponse, error) {
	o := op{name: "lease grant", kind: kindWrite, lease: true}
	if ttl < time.Millisecond {
		return nil, &callError{op: o.name, err: fmt.Errorf("ttl %v is below 1ms", ttl)}
	}
	var resp *metadpb.LeaseGrantResponse
	err := c.call(ctx, o, func(ctx context.Context, mc metadpb.MetadClient, co ...grpc.CallOption) error {
		var err error
		resp, err = mc.LeaseGrant(ctx, &metadpb.LeaseGrantRequest{TtlMs: ttl.Milliseconds()}, co...)
		return err
	})
	return resp, err
}

// KeepAlive renews the lease and returns its TTL. It fails with
// ErrLeaseNotFound when the lease has expired or was revoked. Renewing is
// idempotent, so KeepAlive retries like a read.
func (c *Client) KeepAlive(ctx context.Context, id int64) (time.Duration, error) {
	var resp *metadpb.LeaseKeepAliveResponse
	err := c.call(ctx, op{name: "lease keepalive", key: strconv.FormatInt(id, 10), kind: kindRead, lease: true},
		func(ctx context.Context, mc metadpb.MetadClient, co ...grpc.CallOption) error {
			var err error
			resp, err = mc.LeaseKeepAlive(ctx, &metadpb.LeaseKeepAliveRequest{Id: id}, co...)
			return err
		})
	if err != nil {
		return 0, err
	}
	return time.Duration(resp.GetTtlMs()) * time.Millisecond, nil
}

// Revoke deletes the lease and every key attached to it. It fails with
// ErrLeaseNotFound when the lease does not exist.
func (c *Client) Revoke(ctx context.Context, id int64) error {
	return c.call(ctx, op{name: "lease revoke", key: strconv.FormatInt(id, 10), kind: kindWrite, lease: true},
		func(ctx context.Context, mc metadpb.MetadClient, co ...grpc.CallOption) error {
			_, err := mc.LeaseRevoke(ctx, &metadpb.LeaseRevokeRequest{Id: id}, co...)
			return err
		})
}

// Session is a lease kept alive in the background: the liveness token of a
// broker or bookie. Keys written WithLease(s.Lease()) vanish when the
// session is lost or closed.
type Session struct {
	c   *Client
	id  int64
	ttl time.Duration

	cancel  context.CancelFunc
	stopped chan struct{} // closed when the keep-alive goroutine returns
	done    chan struct{} // closed when the lease is lost or the session closed
	// lost is set (before done closes) when the server said the lease is
	// gone or no keep-alive succeeded for a whole TTL.
	lost bool
	// expires is the latest time the lease can be assumed to live (see
	// run), for Valid.
	expires   atomic.Pointer[time.Time]
	closeOnce sync.Once
	closeErr  error
}

// NewSession grants a lease of ttl and keeps it alive every ttl/3 until
// Close, the client's Close, or the lease is lost (see Session.Done).
func (c *Client) NewSession(ctx context.Context, ttl time.Duration) (*Session, error) {
	sent := time.Now()
	resp, err := c.grant(ctx, ttl)
	if err != nil {
		return nil, err
	}
	granted := time.Duration(resp.GetTtlMs()) * time.Millisecond
	if granted <= 0 {
		granted = ttl
	}
	s := &Session{c: c, id: resp.GetId(), ttl: granted, stopped: make(chan struct{}), done: make(chan struct{})}
	expires := sent.Add(granted)
	s.expires.Store(&expires)
	sctx, cancel := context.WithCancel(c.ctx)
	s.cancel = cancel
	if err := c.goAttach(func() { s.run(sctx, sent.Add(granted)) }); err != nil {
		cancel()
		return nil, &callError{op: "session", kinds: []error{ErrClosed}}
	}
	return s, nil
}

// Lease is the session's lease id.
func (s *Session) Lease() int64 { return s.id }

// TTL is the lease's TTL as granted by the server.
func (s *Session) TTL() time.Duration { return s.ttl }

// Valid reports whether the lease can still be assumed alive: the session
// has not ended and the last successful keep-alive was sent less than a TTL
// ago. Unlike Done it needs no goroutine to notice: a process that was
// paused past its lease's expiry sees false at once when it resumes, before
// any timer fires. Cheap (an atomic load and a clock read).
func (s *Session) Valid() bool {
	select {
	case <-s.done:
		return false
	default:
	}
	e := s.expires.Load()
	return e != nil && time.Now().Before(*e)
}

// Done is closed when the session ends: the server reported the lease gone,
// no keep-alive succeeded for a whole TTL (so the lease must be assumed
// expired), or Close (of the session or the client) was called.
func (s *Session) Done() <-chan struct{} { return s.done }

// Close stops the keep-alives, waits for their goroutine and revokes the
// lease (best effort, within the client's RequestTimeout) unless it was
// already lost. It returns the revoke error, if any; a lease that is already
// gone is not an error.
func (s *Session) Close() error {
	s.closeOnce.Do(func() {
		s.cancel()
		<-s.stopped
		if s.lost {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.c.cfg.RequestTimeout)
		defer cancel()
		if err := s.c.Revoke(ctx, s.id); err != nil && !errors.Is(err, ErrLeaseNotFound) {
			s.closeErr = err
		}
	})
	return s.closeErr
}

// run keeps the lease alive until ctx ends or the lease is lost. expires is
// the latest time the lease can be assumed to live: the send time of the last
// successful grant or keep-alive plus the TTL (the server counts from when it
// received the request, which is no earlier).
func (s *Session) run(ctx context.Context, expires time.Time) {
	defer close(s.stopped)
	defer close(s.done)
	log := s.c.log.With("lease", s.id)
	interval := s.ttl / 3
	timer := time.NewTimer(interval)
	defer timer.Stop()
	b := newBackoff()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		sent := time.Now()
		kctx, cancel := context.WithDeadline(ctx, expires)
		ttl, err := s.c.KeepAlive(kctx, s.id)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			if ttl <= 0 {
				ttl = s.ttl
			}
			expires = sent.Add(ttl)
			published := expires // a new variable: Valid reads the stored one unlocked
			s.expires.Store(&published)
			b.reset()
			timer.Reset(ttl / 3)
			continue
		}
		if errors.Is(err, ErrLeaseNotFound) || !time.Now().Before(expires) {
			log.Warn("session lost", "err", err)
			s.lost = true
			return
		}
		// A failure that is not retried inside KeepAlive (e.g. an internal
		// error): try again soon, but not past the expiry.
		log.Debug("keepalive failed", "err", err)
		timer.Reset(min(b.next(), time.Until(expires)))
	}
}
