package stream

import (
	"testing"

	"go.uber.org/goleak"
)

// Produce reads input in a goroutine; none may outlive a test.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
