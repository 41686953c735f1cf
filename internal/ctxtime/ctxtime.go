// Package ctxtime holds the waits that end with a context: Sleep, and
// the Pacer that holds background work to a rate.
package ctxtime

import (
	"context"
	"time"
)

// Sleep waits d, or until ctx ends (then it returns ctx.Err()).
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
