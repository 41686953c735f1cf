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
