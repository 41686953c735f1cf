package node

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
)

// MemoryLimitShare is the part of its container's memory limit a node
// gives the Go runtime as its soft limit: the rest covers what the
// runtime does not count (the kernel's socket buffers and page tables)
// and the page cache charged to the container.
const MemoryLimitShare = 0.9

// cgroupRoot is where the cgroup file systems are mounted.
const cgroupRoot = "/sys/fs/cgroup"

// SetMemoryLimit gives the Go runtime a soft memory limit of
// MemoryLimitShare of the memory limit of the node's cgroup (a
// container's), unless GOMEMLIMIT sets one or the cgroup has no limit.
// The collector then runs before the heap reaches the container's limit
// instead of letting it double (GOGC=100) past it into an OOM kill: a
// broker's memory budgets (tail cache, in-flight produce and fetch
// bytes, tier cache, compaction buffer) hold 1.1 GiB by default, which
// GOGC alone lets grow to twice that. GOGC stays the runtime's (100, or
// the environment's): the collector's cost is under 1% of a broker's or
// bookie's CPU at full load, so trading memory for it buys nothing. It
// logs what it decided and returns the limit set (0: none).
func SetMemoryLimit(log *slog.Logger) int64 {
	if v := os.Getenv("GOMEMLIMIT"); v != "" {
		log.Info("memory limit from GOMEMLIMIT", "gomemlimit", v, "bytes", debug.SetMemoryLimit(-1))
		return 0
	}
	limit, source, err := cgroupMemoryLimit(os.DirFS(cgroupRoot))
	switch {
	case err != nil:
		log.Warn("cannot read the cgroup's memory limit; the Go runtime has none", "err", err)
		return 0
	case limit == 0:
		log.Debug("no cgroup memory limit; the Go runtime has none")
		return 0
	}
	soft := int64(float64(limit) * MemoryLimitShare)
	debug.SetMemoryLimit(soft)
	log.Info("memory limit set from the cgroup's", "cgroup_limit_bytes", limit, "source", source, "go_limit_bytes", soft)
	return soft
}

// cgroupMemoryLimit reads the memory limit of the process's cgroup from
// root (the cgroup mount): cgroup v2's memory.max, else v1's
// memory/memory.limit_in_bytes. 0 means no limit ("max", or v1's
// page-rounded maximum); no cgroup file at all means no limit too.
func cgroupMemoryLimit(root fs.FS) (limit int64, source string, err error) {
	for _, name := range []string{"memory.max", filepath.Join("memory", "memory.limit_in_bytes")} {
		b, err := fs.ReadFile(root, name)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return 0, name, err
		}
		v := strings.TrimSpace(string(b))
		if v == "max" {
			return 0, name, nil
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			return 0, name, fmt.Errorf("%s: %q is not a memory limit", name, v)
		}
		if n >= math.MaxInt64&^(1<<12-1) {
			return 0, name, nil // v1's "no limit": the largest page multiple
		}
		return n, name, nil
	}
	return 0, "", nil
}
