package storage

import (
	"log/slog"
	"math"
	"sync"
	"sync/atomic"

	"github.com/strata-log/strata/ledger/journal"
	"github.com/strata-log/strata/vfs"
)

// diskGuard keeps adds off a full disk: it turns the storage read-only when
// the data directory's file system is used at ReadOnlyAbove (counting one
// journal file's reservation as used), writable again at WritableBelow,
// and between two checks lets adds spend a budget of bytes, so that a fast
// writer cannot fill the disk before the next check. It also answers the
// disk questions GC asks (pressed, reserve).
type diskGuard struct {
	fs      vfs.FS
	opts    Options // with defaults
	logger  *slog.Logger
	metrics *Metrics
	// sizes refreshes the storage's size gauges; every successful check
	// calls it (with checkMu held).
	sizes func()

	readOnly atomic.Bool
	// budget is how many more bytes adds may queue before the disk crosses
	// ReadOnlyAbove, as of the last check. Adds spend it; when it runs out
	// the disk is checked at once.
	budget atomic.Int64
	// checkMu keeps checks to one at a time.
	checkMu sync.Mutex

	mu struct {
		sync.Mutex
		hooks []func(readOnly bool)
		usage vfs.DiskUsage
	}
}

func newDiskGuard(o Options, logger *slog.Logger, metrics *Metrics, sizes func()) *diskGuard {
	return &diskGuard{fs: o.FS, opts: o, logger: logger, metrics: metrics, sizes: sizes}
}

// spend takes n bytes from the budget, checking the disk at once when the
// budget runs out. It reports whether the add may go ahead.
func (g *diskGuard) spend(n int64) bool {
	if g.budget.Add(-n) >= 0 {
		return true
	}
	g.checkMu.Lock()
	defer g.checkMu.Unlock()
	if g.budget.Load() < 0 {
		g.checkLocked()
	}
	return !g.readOnly.Load() && g.budget.Add(-n) >= 0
}

// addBytes bounds the journal bytes an add of payloadBytes takes: its
// record and, in the journal's aligned format, the pad of a group of its
// own. Charging the bound keeps the budget an overestimate, so the journal
// cannot run out of space between two checks.
func (g *diskGuard) addBytes(payloadBytes int) int64 {
	n := int64(journal.RecordHeaderSize + payloadBytes)
	if !g.opts.JournalBufferedWrites {
		n += journal.MaxPadBytes
	}
	return n
}

// usage is the file system usage as last checked.
func (g *diskGuard) usage() vfs.DiskUsage {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.mu.usage
}

// onStateChange registers fn, called (from a check, never concurrently
// with itself) when the storage turns read-only or writable.
func (g *diskGuard) onStateChange(fn func(readOnly bool)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.mu.hooks = append(g.mu.hooks, fn)
}

// reserve is the space the journal reserves when it starts a new file:
// without it, the rotation fails, and so does the storage.
func (g *diskGuard) reserve() int64 {
	if g.opts.JournalPreallocateBytes > 0 {
		return min(g.opts.JournalMaxFileBytes, g.opts.JournalPreallocateBytes)
	}
	return g.opts.JournalMaxFileBytes
}

// pressed reports whether the disk is used at or above
// MajorCompactAboveUsed (false when its usage cannot be read).
func (g *diskGuard) pressed() bool {
	du, err := g.fs.DiskUsage(g.opts.Dir)
	return err == nil && du.TotalBytes > 0 && 1-float64(du.FreeBytes)/float64(du.TotalBytes) >= g.opts.MajorCompactAboveUsed
}

// check reads the disk's usage and applies it: see checkLocked.
func (g *diskGuard) check() {
	g.checkMu.Lock()
	defer g.checkMu.Unlock()
	g.checkLocked()
}

// checkLocked turns the storage read-only when the disk's used fraction,
// counting one journal file's reservation as used, reaches ReadOnlyAbove,
// and writable again at WritableBelow; it refreshes the budget and the
// size gauges, and calls the hooks on a change.
// REQUIRES: g.checkMu held.
func (g *diskGuard) checkLocked() {
	du, err := g.fs.DiskUsage(g.opts.Dir)
	if err != nil {
		g.logger.Warn("disk usage unknown; keeping the current state", "err", err)
		return
	}
	// Room is counted net of one journal file's reservation: the next
	// rotation must still find space.
	free := int64(du.FreeBytes) - g.reserve()
	total := float64(du.TotalBytes)
	budget := free - int64((1-g.opts.ReadOnlyAbove)*total)
	was := g.readOnly.Load()
	now := was
	switch {
	case du.TotalBytes == 0:
	case !was && budget <= 0:
		now = true
	case was && float64(free) >= (1-g.opts.WritableBelow)*total:
		now = false
	}
	if du.TotalBytes == 0 {
		budget = math.MaxInt64 // size unknown: only the periodic check can act
	}
	g.budget.Store(max(budget, 0))
	used := 0.0
	if du.TotalBytes > 0 {
		used = 1 - float64(du.FreeBytes)/total
	}
	g.mu.Lock()
	g.mu.usage = du
	hooks := g.mu.hooks
	g.mu.Unlock()
	g.metrics.diskFreeBytes.Set(float64(du.FreeBytes))
	g.metrics.diskTotalBytes.Set(float64(du.TotalBytes))
	g.sizes()
	if now == was {
		return
	}
	g.readOnly.Store(now)
	g.metrics.readOnly.Set(boolGauge(now))
	g.logger.Warn("disk usage crossed a threshold", "read_only", now, "used", used,
		"free_bytes", du.FreeBytes, "total_bytes", du.TotalBytes)
	for _, fn := range hooks {
		fn(now)
	}
}
