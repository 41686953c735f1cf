package netfault

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// servers are the echo servers of a test: a TCP echo server and a UDP
// socket on every host and on the root namespace's address.
type servers struct {
	udp map[string]*net.UDPConn

	mu        sync.Mutex
	listeners []net.Listener
	conns     []net.Conn
	wg        sync.WaitGroup
}

// startServers starts the servers on hosts, Root included if named, and
// stops them when the test ends.
func startServers(t *testing.T, n *Net, hosts ...string) *servers {
	t.Helper()
	s := &servers{udp: make(map[string]*net.UDPConn)}
	t.Cleanup(s.close)
	for _, h := range hosts {
		ip, err := n.IP(h)
		if err != nil {
			t.Fatal(err)
		}
		var ln net.Listener
		var pc *net.UDPConn
		if err := n.Do(h, func() error {
			var err error
			if ln, err = net.Listen("tcp", net.JoinHostPort(ip, echoPort)); err != nil {
				return err
			}
			pc, err = net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(ip), Port: udpPort})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		s.mu.Lock()
		s.listeners = append(s.listeners, ln)
		s.mu.Unlock()
		s.udp[h] = pc
		s.wg.Go(func() { s.serve(ln) })
	}
	return s
}

func (s *servers) serve(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.conns = append(s.conns, c)
		s.mu.Unlock()
		s.wg.Go(func() { _, _ = io.Copy(c, c) })
	}
}

func (s *servers) close() {
	s.mu.Lock()
	for _, ln := range s.listeners {
		ln.Close()
	}
	for _, c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	for _, pc := range s.udp {
		pc.Close()
	}
}

// dial connects from host from to the echo server of to.
func dial(n *Net, from, to string, timeout time.Duration) (net.Conn, error) {
	ip, err := n.IP(to)
	if err != nil {
		return nil, err
	}
	var c net.Conn
	err = n.Do(from, func() error {
		var err error
		c, err = net.DialTimeout("tcp", net.JoinHostPort(ip, echoPort), timeout)
		return err
	})
	return c, err
}

// echo sends msg through c and reads it back within timeout.
func echo(c net.Conn, msg []byte, timeout time.Duration) error {
	if err := c.SetDeadline(time.Now().Add(timeout)); err != nil {
		return err
	}
	if _, err := c.Write(msg); err != nil {
		return err
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		return err
	}
	if !bytes.Equal(got, msg) {
		return fmt.Errorf("echoed %d bytes differ", len(msg))
	}
	return nil
}

// echoOnce connects from from to to's echo server and echoes a line.
func echoOnce(n *Net, from, to string, timeout time.Duration) error {
	c, err := dial(n, from, to, timeout)
	if err != nil {
		return err
	}
	defer c.Close()
	return echo(c, []byte("ping\n"), timeout)
}

// reaches fails the test unless from can connect to to, trying until
// reachWait has passed.
func reaches(t *testing.T, n *Net, from, to string) {
	t.Helper()
	deadline := time.Now().Add(reachWait)
	for {
		err := echoOnce(n, from, to, time.Second)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s -> %s: %v (faults %q)", from, to, err, n.Faults())
		}
		<-time.After(retryPause)
	}
}

// blocked fails the test unless a connection from from to to times out.
func blocked(t *testing.T, n *Net, from, to string) {
	t.Helper()
	err := echoOnce(n, from, to, blockedWait)
	if err == nil {
		t.Fatalf("%s -> %s connected (faults %q)", from, to, n.Faults())
	}
	if !isTimeout(err) {
		t.Fatalf("%s -> %s: %v, want a timeout (faults %q)", from, to, err, n.Faults())
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// sendUDP sends msg from host from to to's UDP socket.
func sendUDP(n *Net, from, to string, msg []byte) error {
	ip, err := n.IP(to)
	if err != nil {
		return err
	}
	return n.Do(from, func() error {
		c, err := net.DialUDP("udp", nil, &net.UDPAddr{IP: net.ParseIP(ip), Port: udpPort})
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write(msg)
		return err
	})
}

// receiveUDP reads from pc until msg arrives or timeout passes.
func receiveUDP(pc *net.UDPConn, msg []byte, timeout time.Duration) error {
	if err := pc.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return err
	}
	buf := make([]byte, 1500)
	for {
		k, err := pc.Read(buf)
		if err != nil {
			return err
		}
		if bytes.Equal(buf[:k], msg) {
			return nil
		}
	}
}

// delivered fails the test unless a datagram from from reaches to, sending
// one until reachWait has passed.
func delivered(t *testing.T, n *Net, s *servers, from, to string) {
	t.Helper()
	msg := fmt.Appendf(nil, "%s->%s %d", from, to, time.Now().UnixNano())
	deadline := time.Now().Add(reachWait)
	for {
		err := sendUDP(n, from, to, msg)
		if err == nil {
			err = receiveUDP(s.udp[to], msg, 200*time.Millisecond)
		}
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("udp %s -> %s: %v (faults %q)", from, to, err, n.Faults())
		}
		<-time.After(retryPause)
	}
}

// lost fails the test if a datagram from from reaches to.
func lost(t *testing.T, n *Net, s *servers, from, to string) {
	t.Helper()
	msg := fmt.Appendf(nil, "%s->%s %d", from, to, time.Now().UnixNano())
	for range 3 {
		if err := sendUDP(n, from, to, msg); err != nil {
			t.Fatalf("udp %s -> %s: send: %v", from, to, err)
		}
	}
	if err := receiveUDP(s.udp[to], msg, blockedWait); !isTimeout(err) {
		t.Fatalf("udp %s -> %s: %v, want nothing received (faults %q)", from, to, err, n.Faults())
	}
}

func wantFaults(t *testing.T, n *Net, want ...string) {
	t.Helper()
	got := n.Faults()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("Faults() = %q, want %q", got, want)
	}
}

func heal(t *testing.T, n *Net) {
	t.Helper()
	if err := n.Heal(); err != nil {
		t.Fatal(err)
	}
	wantFaults(t, n)
}

// echoBulk writes msg through c while reading the echo back.
func echoBulk(c net.Conn, msg []byte, timeout time.Duration) error {
	if err := c.SetDeadline(time.Now().Add(timeout)); err != nil {
		return err
	}
	errc := make(chan error, 1)
	go func() {
		_, err := c.Write(msg)
		errc <- err
	}()
	got := make([]byte, len(msg))
	_, err := io.ReadFull(c, got)
	if werr := <-errc; werr != nil {
		return werr
	}
	if err != nil {
		return err
	}
	if !bytes.Equal(got, msg) {
		return errors.New("bulk echo differs")
	}
	return nil
}

// procState returns the state letter of process pid (R, S, T, ...).
func procState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return err.Error()
	}
	// pid (comm) state ...; comm may hold spaces but not ") ".
	_, rest, _ := strings.Cut(string(b), ") ")
	st, _, _ := strings.Cut(rest, " ")
	return st
}

// waitFor polls cond until it holds, failing the test after reachWait.
func waitFor(t *testing.T, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(reachWait)
	for {
		ok, what := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting: %s", what)
		}
		<-time.After(time.Millisecond)
	}
}

func mustIP(t *testing.T, n *Net, host string) string {
	t.Helper()
	ip, err := n.IP(host)
	if err != nil {
		t.Fatal(err)
	}
	return ip
}
