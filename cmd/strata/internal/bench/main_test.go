package bench

import (
	"testing"

	"go.uber.org/goleak"
)

// Benchmarks start producers, a consumer and a progress line (B3).
// The in-process metad's proposals wait on a Raft future from a goroutine
// of their own; a future that Raft's FSM had queued when it shut down is
// never answered, so that goroutine outlives the server.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/hashicorp/raft.(*deferError).Error"))
}
