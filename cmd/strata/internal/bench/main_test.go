package bench

import (
	"testing"

	"go.uber.org/goleak"
)

// Benchmarks start producers, a consumer and a progress line (B3).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
