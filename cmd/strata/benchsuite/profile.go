package benchsuite

import (
	"context"
	"fmt"
	"os"
	"time"
)

// maxProfileBytes bounds one downloaded profile or trace.
const maxProfileBytes = 64 << 20

// CPUProfile fetches a CPU profile of d (whole seconds, at least one)
// from the node whose admin address is addr (it must run with
// --enable-pprof) and writes it to path. It returns when the profile is
// complete, d after the call, or when ctx ends.
func CPUProfile(ctx context.Context, addr string, d time.Duration, path string) error {
	return download(ctx, addr, fmt.Sprintf("profile?seconds=%d", max(1, int(d/time.Second))), "profile", path)
}

// FlightTrace fetches the last seconds of execution trace of the node
// whose admin address is addr (its flight recorder, /debug/pprof/flight:
// it must run with --enable-pprof) and writes it to path.
func FlightTrace(ctx context.Context, addr, path string) error {
	return download(ctx, addr, "flight", "flight trace", path)
}

// download writes what the node at addr serves at /debug/pprof/endpoint
// to path.
func download(ctx context.Context, addr, endpoint, what, path string) error {
	body, err := get(ctx, fmt.Sprintf("http://%s/debug/pprof/%s", addr, endpoint), maxProfileBytes)
	if err != nil {
		return fmt.Errorf("benchsuite: %s %s (is pprof enabled?): %w", what, addr, err)
	}
	return os.WriteFile(path, body, 0o644)
}
