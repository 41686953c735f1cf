package raftstore

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves goroutines behind: pebble's
// and raft's background work must all stop on Close and Shutdown.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
