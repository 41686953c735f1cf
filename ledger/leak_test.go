package ledger_test

import (
	"testing"

	"go.uber.org/goleak"
)

// verifyNoLeaks fails t if goroutines started during it outlive its cleanups
// (it runs last, as the first cleanup registered).
func verifyNoLeaks(t *testing.T) {
	t.Helper()
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
}
