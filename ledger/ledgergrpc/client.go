package ledgergrpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/strata-log/strata/internal/grpcopts"
	"github.com/strata-log/strata/internal/wirecodec"
	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/proto/bookiepb"
)

// Errors of Client, passed to add callbacks and returned by its
// calls. Every one of them leaves the outcome of an add unknown.
var (
	// ErrAddTimeout: the bookie did not answer an add within
	// Options.AddTimeout. A late answer is dropped.
	ErrAddTimeout = errors.New("ledgergrpc: add timed out")
	// ErrAddQueueFull: the bookie has Options.MaxQueuedAdds adds or
	// MaxQueuedBytes payload bytes outstanding; the add was not sent.
	ErrAddQueueFull = errors.New("ledgergrpc: too many adds outstanding to the bookie")
	// ErrAddStreamBroken: the add stream to the bookie broke (or could not
	// be opened) before the add was answered. It wraps the cause.
	ErrAddStreamBroken = errors.New("ledgergrpc: add stream broke")
	// ErrClosed: the Client was closed.
	ErrClosed = errors.New("ledgergrpc: bookie client closed")
)

// Defaults of Options.
const (
	DefaultAddTimeout     = 5 * time.Second
	DefaultDialTimeout    = 5 * time.Second
	DefaultMaxQueuedAdds  = 100_000
	DefaultMaxQueuedBytes = 64 << 20
)

// Options configures a Client. Zero fields take defaults.
type Options struct {
	// Credentials secure every connection to a bookie (a node's
	// mtls.Credentials.Transport). Default: plaintext.
	Credentials credentials.TransportCredentials
	// AddTimeout bounds the wait for a bookie's answer to one add, from
	// the call to Add. Default 5s.
	AddTimeout time.Duration
	// DialTimeout bounds connecting to a bookie and opening its add
	// stream. Default 5s.
	DialTimeout time.Duration
	// MaxQueuedAdds and MaxQueuedBytes bound the adds outstanding to one
	// bookie (queued for sending or sent and unanswered) and their payload
	// bytes. They are generous: in normal operation the writer's own
	// window is far smaller, and adds older than AddTimeout leave the count.
	// An add beyond either bound fails with ErrAddQueueFull at once.
	// Defaults 100 000 and 64 MiB.
	MaxQueuedAdds  int
	MaxQueuedBytes int64
	// Logger receives stream events at debug and warn level. Default:
	// discard.
	Logger *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.AddTimeout <= 0 {
		o.AddTimeout = DefaultAddTimeout
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	if o.MaxQueuedAdds <= 0 {
		o.MaxQueuedAdds = DefaultMaxQueuedAdds
	}
	if o.MaxQueuedBytes <= 0 {
		o.MaxQueuedBytes = DefaultMaxQueuedBytes
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Credentials == nil {
		o.Credentials = insecure.NewCredentials()
	}
	return o
}

// Validate reports the first problem with o.
func (o Options) Validate() error {
	switch {
	case o.AddTimeout < 0:
		return fmt.Errorf("%w: negative add timeout %v", ledger.ErrInvalid, o.AddTimeout)
	case o.DialTimeout < 0:
		return fmt.Errorf("%w: negative dial timeout %v", ledger.ErrInvalid, o.DialTimeout)
	case o.MaxQueuedAdds < 0:
		return fmt.Errorf("%w: negative max queued adds %d", ledger.ErrInvalid, o.MaxQueuedAdds)
	case o.MaxQueuedBytes < 0:
		return fmt.Errorf("%w: negative max queued bytes %d", ledger.ErrInvalid, o.MaxQueuedBytes)
	}
	return nil
}

func (o Options) String() string {
	return fmt.Sprintf("add-timeout=%v dial-timeout=%v max-queued-adds=%d max-queued-bytes=%d",
		o.AddTimeout, o.DialTimeout, o.MaxQueuedAdds, o.MaxQueuedBytes)
}

// Client is the ledger.BookieClient over gRPC. It keeps one connection
// per bookie address, made on first use, and on it one long-lived
// AddEntries stream that carries every add to that bookie.
//
// Adds: Add puts the request on the bookie's queue and returns. A sender
// goroutine per stream opens the stream (on the first add after the
// previous one broke) and sends the queue in order; a receiver goroutine
// matches answers to adds by request id. Each add ends exactly once, by
// the first of: its answer; AddTimeout passing (ErrAddTimeout; a late
// answer is dropped); the stream breaking (every outstanding add fails with
// ErrAddStreamBroken, and the next Add opens a new stream); Close
// (ErrClosed). Callbacks run on one dispatcher goroutine per bookie,
// in the order the adds ended, which is call order except for an add
// refused with ErrAddQueueFull (it ends at once, ahead of earlier adds still
// in flight). A callback may call Add again. After Close, Add calls cb with
// ErrClosed before returning.
//
// The other calls map straight onto the bookie's RPCs, wrapping errors with
// the bookie's address; status.Code and rpcerror.Info still see the
// bookie's status. A read the bookie refuses because its copy failed its
// checksum (codes.DataLoss) also matches ledger.ErrEntryCorrupt.
type Client struct {
	opts Options
	log  *slog.Logger

	// ctx is canceled by Close; every stream derives from it.
	ctx    context.Context
	cancel context.CancelFunc
	// wg counts every goroutine of the client; Close waits for them.
	wg sync.WaitGroup

	mu struct {
		sync.Mutex
		closed  bool
		bookies map[string]*bookieConn
	}
}

var _ ledger.BookieClient = (*Client)(nil)

// New returns a client; it connects to bookies as they are
// used. Zero or negative options take their defaults; call
// Options.Validate first to reject negative ones.
func New(opts Options) *Client {
	opts = opts.withDefaults()
	c := &Client{opts: opts, log: opts.Logger.With("component", "bookie-client")}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.mu.bookies = map[string]*bookieConn{}
	return c
}

// Close fails every outstanding add with ErrClosed, delivers every
// callback, stops every goroutine of the client and closes the
// connections. Calls made afterwards fail with ErrClosed.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.mu.closed {
		c.mu.Unlock()
		return nil
	}
	c.mu.closed = true
	bookies := c.mu.bookies
	c.mu.Unlock()
	for _, b := range bookies {
		b.close()
	}
	c.cancel()
	c.wg.Wait()
	var errs []error
	for addr, b := range bookies {
		if b.cc != nil {
			if err := b.cc.Close(); err != nil {
				errs = append(errs, fmt.Errorf("ledgergrpc: close connection to bookie %s: %w", addr, err))
			}
		}
	}
	return errors.Join(errs...)
}

// goAttach runs f on a goroutine that Close waits for.
// REQUIRES: the caller checked, under a lock that Close takes before it
// waits, that the client (or the bookie) is not closed.
func (c *Client) goAttach(f func()) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		f()
	}()
}

func (c *Client) dialOptions() []grpc.DialOption {
	bc := backoff.DefaultConfig
	// gRPC's default caps reconnect backoff at 2 minutes: a bookie that
	// restarts would stay unusable through this connection for that long.
	bc.BaseDelay = 100 * time.Millisecond
	bc.MaxDelay = 2 * time.Second
	return append([]grpc.DialOption{
		grpc.WithTransportCredentials(c.opts.Credentials),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: bc, MinConnectTimeout: c.opts.DialTimeout}),
		// Pings find a dead bookie under an idle add stream. 10s stays
		// above the servers' enforcement minimum (grpcserve: 5s).
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 5 * time.Second, PermitWithoutStream: true}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(grpcopts.MaxMessageBytes),
			grpc.MaxCallSendMsgSize(grpcopts.MaxMessageBytes)),
		wirecodec.DialOption(),
	}, grpcopts.BufferDialOptions()...)
}

// bookie returns the bookie's connection state, creating it on first use.
func (c *Client) bookie(addr string) (*bookieConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.closed {
		return nil, ErrClosed
	}
	if b, ok := c.mu.bookies[addr]; ok {
		return b, nil
	}
	b := &bookieConn{c: c, addr: addr, wake: make(chan struct{}, 1)}
	cc, err := grpc.NewClient(addr, c.dialOptions()...)
	if err != nil {
		return nil, fmt.Errorf("ledgergrpc: bookie %s: %w", addr, err)
	}
	b.cc, b.stub = cc, bookiepb.NewBookieClient(cc)
	c.mu.bookies[addr] = b
	c.goAttach(b.dispatch)
	return b, nil
}

// Add implements ledger.BookieClient.
func (c *Client) Add(addr string, req *bookiepb.AddRequest, cb func(*bookiepb.AddResponse, error)) {
	b, err := c.bookie(addr)
	if err != nil {
		cb(nil, err)
		return
	}
	b.add(req, cb)
}

// ReadEntry implements ledger.BookieClient.
func (c *Client) ReadEntry(ctx context.Context, addr string, req *bookiepb.ReadEntryRequest) (*bookiepb.ReadEntryResponse, error) {
	b, err := c.bookie(addr)
	if err != nil {
		return nil, err
	}
	resp, err := b.stub.ReadEntry(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("ledgergrpc: bookie %s: read entry %d/%d: %w", addr, req.GetLedgerId(), req.GetEntryId(), markCorrupt(err))
	}
	return resp, nil
}

// ReadEntries implements ledger.BookieClient. An error from fn ends the stream
// and is returned as is.
func (c *Client) ReadEntries(ctx context.Context, addr string, req *bookiepb.ReadEntriesRequest, fn func(*bookiepb.ReadEntryResponse) error) error {
	b, err := c.bookie(addr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := b.stub.ReadEntries(ctx, req)
	if err != nil {
		return fmt.Errorf("ledgergrpc: bookie %s: read entries %d/%d..%d: %w", addr, req.GetLedgerId(), req.GetFirstEntryId(), req.GetLastEntryId(), err)
	}
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("ledgergrpc: bookie %s: read entries %d/%d..%d: %w", addr, req.GetLedgerId(), req.GetFirstEntryId(), req.GetLastEntryId(), markCorrupt(err))
		}
		if err := fn(resp); err != nil {
			return err
		}
	}
}

// markCorrupt makes a bookie's "my copy is corrupt" (codes.DataLoss) match
// ledger.ErrEntryCorrupt, which is how the ledger package, knowing nothing
// of gRPC, tells it from other read failures.
func markCorrupt(err error) error {
	if status.Code(err) == codes.DataLoss {
		return fmt.Errorf("%w: %w", ledger.ErrEntryCorrupt, err)
	}
	return err
}

// ReadLAC implements ledger.BookieClient.
func (c *Client) ReadLAC(ctx context.Context, addr string, req *bookiepb.ReadLACRequest) (*bookiepb.ReadLACResponse, error) {
	b, err := c.bookie(addr)
	if err != nil {
		return nil, err
	}
	resp, err := b.stub.ReadLAC(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("ledgergrpc: bookie %s: read LAC of ledger %d: %w", addr, req.GetLedgerId(), err)
	}
	return resp, nil
}

// Fence implements ledger.BookieClient.
func (c *Client) Fence(ctx context.Context, addr string, ledgerID uint64) (*bookiepb.FenceResponse, error) {
	b, err := c.bookie(addr)
	if err != nil {
		return nil, err
	}
	resp, err := b.stub.Fence(ctx, &bookiepb.FenceRequest{LedgerId: ledgerID})
	if err != nil {
		return nil, fmt.Errorf("ledgergrpc: bookie %s: fence ledger %d: %w", addr, ledgerID, err)
	}
	return resp, nil
}

// WriteLAC implements ledger.BookieClient.
func (c *Client) WriteLAC(ctx context.Context, addr string, ledgerID uint64, lac int64) error {
	b, err := c.bookie(addr)
	if err != nil {
		return err
	}
	if _, err := b.stub.WriteLAC(ctx, &bookiepb.WriteLACRequest{LedgerId: ledgerID, Lac: lac}); err != nil {
		return fmt.Errorf("ledgergrpc: bookie %s: write LAC %d of ledger %d: %w", addr, lac, ledgerID, err)
	}
	return nil
}

// DeleteLedger implements ledger.BookieClient.
func (c *Client) DeleteLedger(ctx context.Context, addr string, ledgerID uint64) error {
	b, err := c.bookie(addr)
	if err != nil {
		return err
	}
	if _, err := b.stub.DeleteLedger(ctx, &bookiepb.DeleteLedgerRequest{LedgerId: ledgerID}); err != nil {
		return fmt.Errorf("ledgergrpc: bookie %s: delete ledger %d: %w", addr, ledgerID, err)
	}
	return nil
}

// bookieConn is the client's state for one bookie.
type bookieConn struct {
	c    *Client
	addr string
	cc   *grpc.ClientConn
	stub bookiepb.BookieClient
	// wake tells the dispatcher that callbacks are ready or the earliest
	// deadline changed.
	wake chan struct{}

	mu struct {
		sync.Mutex
		closed bool
		// stream carries the adds; nil when none is open (none yet, or
		// the last one broke).
		stream *addStream
		// nextRequestID numbers adds; unique per bookie, so per stream.
		nextRequestID uint64
		// queuedAdds and queuedBytes count the adds that have not ended,
		// over every stream (bounded by MaxQueuedAdds, MaxQueuedBytes).
		queuedAdds  int
		queuedBytes int64
		// ended holds adds that ended, in order, for the dispatcher;
		// spareEnded is the list the dispatcher emptied last, for reuse.
		ended, spareEnded []endedAdd
	}
}

// pendingAdd is one add that has not ended, or has just ended.
type pendingAdd struct {
	// req is the request sent: the caller's, with this bookie's
	// request id (the caller's may go to several bookies).
	req      bookiepb.AddRequest
	cb       func(*bookiepb.AddResponse, error)
	deadline time.Time
	done     bool // guarded by bookieConn.mu
}

// endedAdd is an add's outcome waiting for the dispatcher.
type endedAdd struct {
	cb   func(*bookiepb.AddResponse, error)
	resp *bookiepb.AddResponse
	err  error
}

// addStream is one AddEntries stream and the adds it carries. Every field
// but ctx, cancel and ready is guarded by bookieConn.mu.
type addStream struct {
	b      *bookieConn
	ctx    context.Context
	cancel context.CancelFunc
	broken bool
	// queue holds adds not yet handed to the sender, in call order.
	queue []*pendingAdd
	// pending holds the adds of this stream that have not ended, by
	// request id; order holds them (and ended ones, until trimmed) in
	// call order, which is deadline order, from order[head] on. Once
	// every add ended, order starts again at the front of its array.
	pending map[uint64]*pendingAdd
	order   []*pendingAdd
	head    int
	// ready is signalled when queue gains adds.
	ready chan struct{}
}

func (b *bookieConn) signal() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// addSize is the bytes of the entry req adds.
func addSize(req *bookiepb.AddRequest) int64 {
	return int64(len(req.GetPayload()) + len(req.GetPayloadTail()))
}

// add queues req on the current stream, opening one if needed.
func (b *bookieConn) add(req *bookiepb.AddRequest, cb func(*bookiepb.AddResponse, error)) {
	size := addSize(req)
	b.mu.Lock()
	if b.mu.closed {
		b.mu.Unlock()
		cb(nil, ErrClosed)
		return
	}
	opts := &b.c.opts
	if b.mu.queuedAdds+1 > opts.MaxQueuedAdds || b.mu.queuedBytes+size > opts.MaxQueuedBytes {
		b.mu.ended = append(b.mu.ended, endedAdd{cb: cb, err: fmt.Errorf("%w: bookie %s: %d adds, %d bytes outstanding",
			ErrAddQueueFull, b.addr, b.mu.queuedAdds, b.mu.queuedBytes)})
		b.mu.Unlock()
		b.signal()
		return
	}
	s := b.mu.stream
	if s == nil {
		s = b.newStreamLocked()
	}
	b.mu.nextRequestID++
	// A copy: the caller may send the same request to several bookies.
	// The payload is shared, read-only.
	p := &pendingAdd{
		req: bookiepb.AddRequest{RequestId: b.mu.nextRequestID, LedgerId: req.GetLedgerId(), EntryId: req.GetEntryId(),
			Lac: req.GetLac(), Payload: req.GetPayload(), PayloadTail: req.GetPayloadTail(), Recovery: req.GetRecovery()},
		cb:       cb,
		deadline: time.Now().Add(opts.AddTimeout),
	}
	b.mu.queuedAdds++
	b.mu.queuedBytes += size
	s.pending[p.req.RequestId] = p
	s.order = append(s.order, p)
	s.queue = append(s.queue, p)
	first := len(s.pending) == 1 // no earlier deadline is being waited for
	b.mu.Unlock()
	select {
	case s.ready <- struct{}{}:
	default:
	}
	if first {
		b.signal() // the dispatcher's next deadline changed
	}
}

// newStreamLocked creates the stream state and starts its sender, which
// opens the gRPC stream.
// REQUIRES: b.mu held, b not closed.
func (b *bookieConn) newStreamLocked() *addStream {
	s := &addStream{b: b, pending: map[uint64]*pendingAdd{}, ready: make(chan struct{}, 1)}
	s.ctx, s.cancel = context.WithCancel(b.c.ctx)
	b.mu.stream = s
	b.c.goAttach(s.send)
	return s
}

// endLocked ends p with (resp, err) unless it has ended already.
// REQUIRES: b.mu held.
func (b *bookieConn) endLocked(s *addStream, p *pendingAdd, resp *bookiepb.AddResponse, err error) {
	if p.done {
		return
	}
	p.done = true
	delete(s.pending, p.req.RequestId)
	b.mu.queuedAdds--
	b.mu.queuedBytes -= addSize(&p.req)
	b.mu.ended = append(b.mu.ended, endedAdd{cb: p.cb, resp: resp, err: err})
}

// maxIdleList bounds the capacity of a list kept for reuse once emptied
// (a stream's order, the ended adds), so one burst does not pin a large
// array.
const maxIdleList = 1 << 14

// oldestLocked is the oldest add in s.order, nil if there is none.
// REQUIRES: b.mu held.
func (s *addStream) oldestLocked() *pendingAdd {
	if s.head == len(s.order) {
		return nil
	}
	return s.order[s.head]
}

// trimLocked drops ended adds from the front of s.order.
// REQUIRES: b.mu held.
func (s *addStream) trimLocked() {
	for s.head < len(s.order) && s.order[s.head].done {
		s.order[s.head] = nil
		s.head++
	}
	switch {
	case s.head == len(s.order):
		s.order, s.head = s.order[:0], 0
		if cap(s.order) > maxIdleList {
			s.order = nil
		}
	case s.head >= minOrderCompact && 2*s.head >= len(s.order):
		// Under steady load the adds never all end at once: move the
		// live ones to the front, or order would keep a slot for every
		// add the stream ever carried. At most half are live, so the
		// copy costs less than one slot per add trimmed.
		n := copy(s.order, s.order[s.head:])
		clear(s.order[n:])
		s.order, s.head = s.order[:n], 0
	}
}

// minOrderCompact is the fewest ended adds at the front of a stream's
// order that trimLocked moves the live ones over.
const minOrderCompact = 1024

// expireLocked ends the adds of s whose deadline has passed with
// ErrAddTimeout. Deadlines grow in call order, so they are at the front.
// REQUIRES: b.mu held.
func (b *bookieConn) expireLocked(s *addStream, now time.Time) {
	s.trimLocked()
	for p := s.oldestLocked(); p != nil && !p.deadline.After(now); p = s.oldestLocked() {
		b.endLocked(s, p, nil, fmt.Errorf("%w: bookie %s did not answer the add of entry %d/%d within %v",
			ErrAddTimeout, b.addr, p.req.LedgerId, p.req.EntryId, b.c.opts.AddTimeout))
		s.trimLocked()
	}
}

// breakStream ends every add of s with ErrAddStreamBroken (cause err) and
// detaches s from the bookie, so the next add opens a new stream. It is
// idempotent.
func (b *bookieConn) breakStream(s *addStream, err error) {
	b.mu.Lock()
	b.breakLocked(s, err)
	b.mu.Unlock()
	b.signal()
}

// REQUIRES: b.mu held.
func (b *bookieConn) breakLocked(s *addStream, err error) {
	if s.broken {
		return
	}
	s.broken = true
	s.cancel()
	if b.mu.stream == s {
		b.mu.stream = nil
	}
	n := len(s.pending)
	var broke error
	if errors.Is(err, ErrClosed) {
		broke = err
	} else {
		broke = fmt.Errorf("%w: bookie %s: %w", ErrAddStreamBroken, b.addr, err)
	}
	for _, p := range s.order[s.head:] {
		b.endLocked(s, p, nil, broke)
	}
	s.order, s.head, s.queue = nil, 0, nil
	if n > 0 && !errors.Is(err, ErrClosed) {
		b.c.log.Warn("add stream to bookie broke", "bookie", b.addr, "failed_adds", n, "err", err)
	}
}

// send opens the stream, starts the receiver and sends queued adds in
// order until the stream breaks.
func (s *addStream) send() {
	b := s.b
	// The open must not wait forever for a connection; once open, the
	// stream lives as long as s.ctx.
	openTimer := time.AfterFunc(b.c.opts.DialTimeout, s.cancel)
	stream, err := b.stub.AddEntries(s.ctx)
	if !openTimer.Stop() && err == nil {
		err = fmt.Errorf("opening the stream took longer than %v", b.c.opts.DialTimeout)
	}
	if err != nil {
		b.breakStream(s, err)
		return
	}
	b.c.goAttach(func() { s.receive(stream) })
	var batch []*pendingAdd
	for {
		select {
		case <-s.ready:
		case <-s.ctx.Done():
			b.breakStream(s, context.Cause(s.ctx))
			return
		}
		b.mu.Lock()
		if s.broken {
			b.mu.Unlock()
			return
		}
		batch, s.queue = s.queue, batch[:0]
		b.mu.Unlock()
		for i, p := range batch {
			// p may have timed out meanwhile: sending it anyway is
			// harmless (its answer is dropped) and cheaper than locking.
			if err := stream.Send(&p.req); err != nil {
				// io.EOF: the stream ended; the receiver has the reason.
				b.breakStream(s, err)
				return
			}
			batch[i] = nil
		}
	}
}

// receive matches answers to adds until the stream ends.
func (s *addStream) receive(stream grpc.BidiStreamingClient[bookiepb.AddRequest, bookiepb.AddResponse]) {
	b := s.b
	for {
		resp, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("the bookie ended the stream")
			}
			b.breakStream(s, err)
			return
		}
		b.mu.Lock()
		// Adds whose time is up end first, so that outcomes stay in
		// call order however late the dispatcher runs.
		b.expireLocked(s, time.Now())
		if p, ok := s.pending[resp.GetRequestId()]; ok {
			b.endLocked(s, p, resp, nil)
			s.trimLocked()
		}
		// Otherwise a late answer to an add that timed out: dropped.
		b.mu.Unlock()
		b.signal()
	}
}

// dispatch runs the callbacks of ended adds in order and times adds out,
// until the bookie is closed and every callback has run.
func (b *bookieConn) dispatch() {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var spent []endedAdd // ended adds whose callbacks ran: the list, for reuse
	for {
		b.mu.Lock()
		if spent != nil {
			b.mu.spareEnded, spent = spent, nil
		}
		var next time.Time
		if s := b.mu.stream; s != nil {
			b.expireLocked(s, time.Now())
			if p := s.oldestLocked(); p != nil {
				next = p.deadline
			}
		}
		ended := b.mu.ended
		b.mu.ended, b.mu.spareEnded = b.mu.spareEnded, nil
		closed := b.mu.closed
		b.mu.Unlock()
		for i, e := range ended {
			e.cb(e.resp, e.err)
			ended[i] = endedAdd{}
		}
		if len(ended) > 0 {
			if cap(ended) <= maxIdleList {
				spent = ended[:0]
			}
			continue // callbacks may have added or ended adds
		}
		if closed {
			return
		}
		wait := time.Hour
		if !next.IsZero() {
			wait = max(time.Until(next), 0)
		}
		timer.Reset(wait)
		select {
		case <-b.wake:
		case <-timer.C:
		}
	}
}

// close ends every outstanding add with ErrClosed and makes the
// dispatcher return once their callbacks have run.
func (b *bookieConn) close() {
	b.mu.Lock()
	b.mu.closed = true
	if s := b.mu.stream; s != nil {
		b.breakLocked(s, ErrClosed)
	}
	b.mu.Unlock()
	b.signal()
}
