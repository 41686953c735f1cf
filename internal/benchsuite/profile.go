package benchsuite

import (
	"context"
	"fmt"
	"os"
	"time"
)

// maxProfileBytes bounds one downloaded CPU profile.
const maxProfileBytes = 64 << 20

// CPUProfile fetches a CPU profile of d (whole seconds, at least one)
// from the node whose admin address is addr (it must run with
// --enable-pprof) and writes it to path. It returns when the profile is
// complete, d after the call, or when ctx ends.
func CPUProfile(ctx context.Context, addr string, d time.Duration, path string) error {
	url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, max(1, int(d/time.Second)))
	body, err := get(ctx, url, maxProfileBytes)
	if err != nil {
		return fmt.Errorf("benchsuite: profile %s (is pprof enabled?): %w", addr, err)
	}
	return os.WriteFile(path, body, 0o644)
}

// FlightTrace fetches the last seconds of execution trace of the node
// whose admin address is addr (its flight recorder, /debug/pprof/flight:
// it must run with --enable-pprof) and writes it to path.
func FlightTrace(ctx context.Context, addr, path string) error {
	body, err := get(ctx, fmt.Sprintf("http://%s/debug/pprof/flight", addr), maxProfileBytes)
	if err != nil {
		return fmt.Errorf("benchsuite: flight trace %s (is pprof enabled?): %w", addr, err)
	}
	return os.WriteFile(path, body, 0o644)
}
