package proctest

import (
	"net"
	"strconv"
	"testing"
)

// Listen and FreeAddr stay below the ephemeral range and never hand out a
// port twice.
func TestPortsBelowEphemeralRange(t *testing.T) {
	seen := map[string]bool{}
	check := func(addr string) {
		t.Helper()
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatal(err)
		}
		p, _ := strconv.Atoi(port)
		if host != "127.0.0.1" || p < 10000 || p > 31999 || seen[port] {
			t.Fatalf("address %s: want a new 127.0.0.1 port in 10000-31999", addr)
		}
		ports.mu.Lock()
		mine := ports.claimed[p/portBlock]
		ports.mu.Unlock()
		if !mine {
			t.Fatalf("address %s: not from a block this binary claimed", addr)
		}
		seen[port] = true
	}
	for range 20 {
		check(Listen(t).Addr().String())
		check(FreeAddr(t))
	}
}

// A block of ports one holder has locked cannot be claimed by another
// (another test binary, or here another open of its lock file) until the
// holder lets it go.
func TestPortBlocksAreExclusive(t *testing.T) {
	const k = 100 // ports 50000-50499: no test binary draws from there
	f, ok := lockPortBlock(k)
	if !ok || f == nil {
		t.Skip("no lock directory usable here")
	}
	if g, ok := lockPortBlock(k); ok {
		if g != nil {
			g.Close()
		}
		t.Fatal("a held block was claimed again")
	}
	f.Close()
	g, ok := lockPortBlock(k)
	if !ok {
		t.Fatal("a released block could not be claimed")
	}
	if g != nil {
		g.Close()
	}
}

// Span reserves whole blocks that FreeAddr and Listen never hand out from,
// and two spans do not overlap.
func TestSpan(t *testing.T) {
	a, b := Span(t, 1000), Span(t, 10)
	if a%portBlock != 0 || a < 10000 || a+999 > 31999 || b+portBlock-1 > 31999 {
		t.Fatalf("spans at %d and %d: want whole blocks inside 10000-31999", a, b)
	}
	if b+portBlock > a && b < a+1000 {
		t.Fatalf("span %d (%d ports) overlaps span %d (1000 ports)", b, portBlock, a)
	}
	for range 200 {
		_, port, _ := net.SplitHostPort(FreeAddr(t))
		p, _ := strconv.Atoi(port)
		if (p >= a && p < a+1000) || (p >= b && p < b+portBlock) {
			t.Fatalf("FreeAddr handed out %d, inside a span", p)
		}
	}
}
