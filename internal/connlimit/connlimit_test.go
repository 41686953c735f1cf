package connlimit

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/strata-log/strata/internal/proctest"
	"github.com/strata-log/strata/internal/testwait"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeListener hands out the connections a test pushes.
type fakeListener struct {
	conns     chan net.Conn
	closed    chan struct{}
	closeOnce sync.Once
}

func newFakeListener() *fakeListener {
	return &fakeListener{conns: make(chan net.Conn), closed: make(chan struct{})}
}

func (f *fakeListener) Accept() (net.Conn, error) {
	select {
	case c := <-f.conns:
		return c, nil
	case <-f.closed:
		return nil, net.ErrClosed
	}
}

func (f *fakeListener) Close() error {
	f.closeOnce.Do(func() { close(f.closed) })
	return nil
}

func (f *fakeListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1} }

// fakeConn is the server end of a pipe whose peer is at ip; peer is the
// client end. It records the last deadline set.
type fakeConn struct {
	net.Conn
	remote net.Addr
	peer   net.Conn

	mu   sync.Mutex
	last time.Time
}

func (c *fakeConn) RemoteAddr() net.Addr { return c.remote }

func (c *fakeConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	c.last = t
	c.mu.Unlock()
	return c.Conn.SetDeadline(t)
}

func (c *fakeConn) deadline() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last
}

func newFakeConn(t *testing.T, ip string) *fakeConn {
	server, client := net.Pipe()
	t.Cleanup(func() { server.Close(); client.Close() })
	return &fakeConn{Conn: server, remote: &net.TCPAddr{IP: net.ParseIP(ip), Port: 4000}, peer: client}
}

// isClosed reports whether the server end of c was closed (its peer reads
// EOF); c must not have been handed anything to send.
func isClosed(c *fakeConn) bool {
	_ = c.peer.SetReadDeadline(time.Now().Add(time.Millisecond))
	_, err := c.peer.Read(make([]byte, 1))
	return errors.Is(err, io.EOF)
}

// clock is a settable time for the full-sweep rate limit.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func wrapFake(t *testing.T, cfg Config) (*Listener, *fakeListener) {
	t.Helper()
	fl := newFakeListener()
	if cfg.Name == "" {
		cfg.Name = "test"
	}
	cfg.Logger = slog.New(slog.DiscardHandler)
	l, err := Wrap(fl, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l, fl
}

// acceptAll runs Accept in a loop and sends what it returns on the
// channel, closed once the listener is.
func acceptAll(l *Listener) <-chan net.Conn {
	out := make(chan net.Conn)
	go func() {
		defer close(out)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			out <- c
		}
	}()
	return out
}

func refused(l *Listener, reason string) float64 {
	return testutil.ToFloat64(l.refused.WithLabelValues(reason))
}

// L1: the caps count admitted connections, per IP and in total; a
// connection over either is closed and counted, never returned; a closed
// connection frees its place: at once for its own IP, for others once a
// full sweep may run again (fullSweepInterval).
func TestCaps(t *testing.T) {
	clk := &clock{t: time.Unix(1000, 0)}
	l, fl := wrapFake(t, Config{MaxConnections: 3, MaxConnectionsPerIP: 2, now: clk.now})
	accepted := acceptAll(l)
	admit := func(c *fakeConn) net.Conn {
		t.Helper()
		fl.conns <- c
		got := testwait.Recv(t, 5*time.Second, "Accept", accepted)
		if got.RemoteAddr() != c.remote {
			t.Fatalf("accepted %v, want %v", got.RemoteAddr(), c.remote)
		}
		return got
	}
	refuse := func(c *fakeConn, reason string, n float64) {
		t.Helper()
		fl.conns <- c
		testwait.Until(t, 5*time.Second, reason+" refusal counted", func() bool { return refused(l, reason) == n })
		if !isClosed(c) {
			t.Fatalf("a connection refused (%s) is open", reason)
		}
	}
	const ip1, ip2, ip3 = "10.0.0.1", "10.0.0.2", "10.0.0.3"
	a1, a2 := admit(newFakeConn(t, ip1)), admit(newFakeConn(t, ip1))
	refuse(newFakeConn(t, ip1), ReasonMaxConnectionsPerIP, 1)
	admit(newFakeConn(t, ip2))
	refuse(newFakeConn(t, ip3), ReasonMaxConnections, 1)
	if l.Open() != 3 {
		t.Fatalf("open %d, want 3", l.Open())
	}

	// a1 closes: another IP's connection within fullSweepInterval of the
	// last full sweep does not see it; after the interval it does.
	if err := a1.Close(); err != nil {
		t.Fatal(err)
	}
	refuse(newFakeConn(t, ip3), ReasonMaxConnections, 2)
	clk.advance(fullSweepInterval)
	admit(newFakeConn(t, ip3))

	// a2 closes: a connection of its own IP sees it at once.
	if err := a2.Close(); err != nil {
		t.Fatal(err)
	}
	admit(newFakeConn(t, ip1))
	if l.Open() != 3 || refused(l, ReasonMaxConnections) != 2 || refused(l, ReasonMaxConnectionsPerIP) != 1 {
		t.Fatalf("open %d, refusals %v at the total, %v per IP", l.Open(), refused(l, ReasonMaxConnections), refused(l, ReasonMaxConnectionsPerIP))
	}
}

// Real sockets: an accepted *net.TCPConn is handed out as is, and counts
// as open until the server closes it (the client going away does not
// free its place: the server still holds the descriptor).
func TestFileDescriptorProbe(t *testing.T) {
	l, err := Wrap(proctest.Listen(t), Config{MaxConnections: 10, MaxConnectionsPerIP: 1, Name: "test", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			t.Error(err)
		}
		accepted <- c
	}()
	client, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server := testwait.Recv(t, 5*time.Second, "Accept", accepted)
	if _, ok := server.(*net.TCPConn); !ok {
		t.Fatalf("handed out %T, want the *net.TCPConn itself", server)
	}
	client.Close()
	if l.Open() != 1 {
		t.Fatalf("open %d after the client closed, want 1", l.Open())
	}
	server.Close()
	if l.Open() != 0 {
		t.Fatalf("open %d after the server closed, want 0", l.Open())
	}
	// A second client from the same IP now fits the per-IP cap of 1.
	go func() {
		c, err := l.Accept()
		if err == nil {
			c.Close()
		}
		accepted <- c
	}()
	c2, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if testwait.Recv(t, 5*time.Second, "second Accept", accepted) == nil {
		t.Fatal("the second connection was not accepted")
	}
}

// L3: with a Handshake, Accept returns only connections whose handshake
// completed, in the order they complete (a slow one holds up no other);
// a failed one is closed and counted.
func TestHandshakeHoldsConnectionsBack(t *testing.T) {
	release := map[net.Addr]chan error{}
	var mu sync.Mutex
	gate := func(addr net.Addr) chan error {
		mu.Lock()
		defer mu.Unlock()
		if release[addr] == nil {
			release[addr] = make(chan error, 1)
		}
		return release[addr]
	}
	l, fl := wrapFake(t, Config{MaxConnections: 10, MaxConnectionsPerIP: 10, HandshakeTimeout: time.Minute,
		Handshake: func(ctx context.Context, c net.Conn) (net.Conn, error) {
			select {
			case err := <-gate(c.RemoteAddr()):
				return c, err
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}})
	slow, fast, bad := newFakeConn(t, "10.0.0.1"), newFakeConn(t, "10.0.0.2"), newFakeConn(t, "10.0.0.3")
	for _, c := range []*fakeConn{slow, fast, bad} {
		fl.conns <- c
	}
	gate(bad.remote) <- errors.New("bad certificate")
	gate(fast.remote) <- nil
	got, err := l.Accept()
	if err != nil || got.RemoteAddr() != fast.remote {
		t.Fatalf("Accept: %v %v, want the fast connection first", got, err)
	}
	testwait.Until(t, 5*time.Second, "the failed handshake counted", func() bool { return refused(l, ReasonHandshake) == 1 })
	if !isClosed(bad) {
		t.Fatal("the connection that failed its handshake is open")
	}
	gate(slow.remote) <- nil
	if got, err := l.Accept(); err != nil || got.RemoteAddr() != slow.remote {
		t.Fatalf("Accept: %v %v, want the slow connection", got, err)
	}
}

// A connection that sends nothing is closed at HandshakeTimeout, and
// counted; one that completes in time has its deadline cleared and reads
// its first byte again.
func TestHandshakeTimeout(t *testing.T) {
	l, fl := wrapFake(t, Config{MaxConnections: 10, MaxConnectionsPerIP: 10, Handshake: FirstByte, HandshakeTimeout: 20 * time.Millisecond})
	idle, talker := newFakeConn(t, "10.0.0.1"), newFakeConn(t, "10.0.0.2")
	fl.conns <- idle
	testwait.Until(t, 5*time.Second, "the idle connection timed out", func() bool { return refused(l, ReasonHandshake) == 1 })
	if !isClosed(idle) {
		t.Fatal("the idle connection is open after the handshake timeout")
	}
	fl.conns <- talker
	go func() { _, _ = talker.peer.Write([]byte("hi")) }()
	got, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	if d := talker.deadline(); !d.IsZero() {
		t.Fatalf("deadline %v left on a connection that completed its handshake", d)
	}
	buf := make([]byte, 2)
	if _, err := io.ReadFull(got, buf); err != nil || string(buf) != "hi" {
		t.Fatalf("read %q %v after the handshake, want the first byte again, then the rest", buf, err)
	}
}

// L4: Close ends the handshakes in flight (their connections closed) and
// every goroutine; Accept then says the listener is closed.
func TestCloseEndsHandshakes(t *testing.T) {
	l, fl := wrapFake(t, Config{MaxConnections: 10, MaxConnectionsPerIP: 10, Handshake: FirstByte, HandshakeTimeout: time.Hour})
	pending := []*fakeConn{newFakeConn(t, "10.0.0.1"), newFakeConn(t, "10.0.0.2")}
	for _, c := range pending {
		fl.conns <- c
	}
	testwait.Until(t, 5*time.Second, "both admitted", func() bool { return l.Open() == 2 })
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for _, c := range pending {
		if !isClosed(c) {
			t.Fatal("a connection still handshaking survived Close")
		}
	}
	if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after Close: %v", err)
	}
	// goleak (TestMain) checks that no goroutine outlived the test.
}

func TestConfigValidate(t *testing.T) {
	ok := Config{MaxConnections: 1, MaxConnectionsPerIP: 1, Name: "x"}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []Config{
		{MaxConnectionsPerIP: 1, Name: "x"},
		{MaxConnections: 1, Name: "x"},
		{MaxConnections: 1, MaxConnectionsPerIP: 1},
		{MaxConnections: 1, MaxConnectionsPerIP: 1, Name: "x", Handshake: FirstByte},
	} {
		if err := bad.Validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: %v, want ErrConfig", bad, err)
		}
	}
}
