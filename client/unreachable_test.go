package client

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/strata-log/strata/internal/rpcerror"
)

// A broker that did not answer (a timeout, no connection) is passed over
// by the rotation that picks where metadata comes from, until it answers
// again or a RequestTimeout has passed; a broker that answered with an
// error of its own is not.
func TestNextAddrPassesOverUnreachableBrokers(t *testing.T) {
	c := &Client{cfg: Config{Brokers: []string{"a:1", "b:1", "c:1"}, RequestTimeout: time.Hour}}
	c.mu.unreachable = map[string]time.Time{}
	picks := func() map[string]int {
		n := map[string]int{}
		for range 6 {
			n[c.nextAddr()]++
		}
		return n
	}
	if n := picks(); n["b:1"] != 2 {
		t.Fatalf("healthy rotation: %v", n)
	}
	c.noteCall("b:1", status.Error(codes.DeadlineExceeded, "context deadline exceeded"))
	if n := picks(); n["b:1"] != 0 || n["a:1"] != 3 || n["c:1"] != 3 {
		t.Fatalf("after a timeout at b: %v, want b passed over", n)
	}
	// An answer from the broker, even an error, says it is reachable.
	c.noteCall("c:1", rpcerror.New(codes.Unavailable, rpcerror.ReasonReadOnly, true, "read-only"))
	if n := picks(); n["c:1"] != 3 {
		t.Fatalf("after an answered error at c: %v, want c still picked", n)
	}
	c.noteCall("b:1", nil)
	if n := picks(); n["b:1"] != 2 {
		t.Fatalf("after b answered: %v", n)
	}
	// When every broker is unreachable, the rotation goes on over all.
	for _, a := range []string{"a:1", "b:1", "c:1"} {
		c.noteCall(a, status.Error(codes.Unavailable, "connection refused"))
	}
	if n := picks(); len(n) != 3 {
		t.Fatalf("all unreachable: %v, want all tried", n)
	}
}
