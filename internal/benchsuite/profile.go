package benchsuite

import (
	"context"
	"fmt"
	"io"
	"net/http"
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
	secs := max(1, int(d/time.Second))
	url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, secs)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("benchsuite: profile %s: %w", addr, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("benchsuite: profile %s: %s (is pprof enabled?)", addr, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxProfileBytes))
	if err != nil {
		return fmt.Errorf("benchsuite: profile %s: %w", addr, err)
	}
	return os.WriteFile(path, body, 0o644)
}
