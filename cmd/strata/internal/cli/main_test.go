package cli

import (
	"testing"

	"go.uber.org/goleak"
)

// CollectStatus probes in goroutines; none may outlive it.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
