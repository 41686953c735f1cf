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
		seen[port] = true
	}
	for range 20 {
		check(Listen(t).Addr().String())
		check(FreeAddr(t))
	}
}
