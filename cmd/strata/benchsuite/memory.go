package benchsuite

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
)

// Memory is what the processes held at their peak during a workload
// (VmHWM of /proc/PID/status, reset before the workload through
// /proc/PID/clear_refs), against the memory each is configured to use
// for data.
type Memory struct {
	// PeakRSS per node name, and RoleClient for this process (the
	// producers and consumers); PeakRSSByRole: the largest per role.
	PeakRSS       map[string]int64 `json:"peak_rss_bytes"`
	PeakRSSByRole map[string]int64 `json:"peak_rss_by_role_bytes"`
	// The budgets the peaks are compared with: the broker's tail cache
	// (--tail-cache-bytes), the bookie's Pebble block cache, and the
	// client's producer buffers (MaxBufferedBytes x producers).
	BrokerTailCacheBytes   int64 `json:"broker_tail_cache_bytes"`
	BookiePebbleCacheBytes int64 `json:"bookie_pebble_cache_bytes"`
	ClientBufferBytes      int64 `json:"client_buffer_bytes"`
}

// Summary states the peaks against their budgets in one line.
func (m *Memory) Summary() string {
	r := m.PeakRSSByRole
	part := func(role string, budget int64, what string) string {
		if budget <= 0 {
			return fmt.Sprintf("%s %.0f MB", role, float64(r[role])/1e6)
		}
		return fmt.Sprintf("%s %.0f MB (%.2fx %s of %.0f MB)", role, float64(r[role])/1e6, float64(r[role])/float64(budget), what, float64(budget)/1e6)
	}
	return "peak RSS: " + part("broker", m.BrokerTailCacheBytes, "its tail cache") + ", " +
		part("bookie", m.BookiePebbleCacheBytes, "its Pebble cache") + ", " +
		part(RoleClient, m.ClientBufferBytes, "its producer buffers")
}

// ParseVmHWM returns the peak resident set size in bytes from the content
// of /proc/PID/status ("VmHWM:   123456 kB").
func ParseVmHWM(data []byte) (int64, error) { return statusKB(data, "VmHWM") }

// statusKB returns field's size in bytes from the content of
// /proc/PID/status.
func statusKB(data []byte, field string) (int64, error) {
	for line := range bytes.Lines(data) {
		rest, ok := bytes.CutPrefix(line, []byte(field+":"))
		if !ok {
			continue
		}
		f := bytes.Fields(rest)
		if len(f) != 2 || string(f[1]) != "kB" {
			return 0, fmt.Errorf("benchsuite: /proc status: %s line %q", field, bytes.TrimSpace(line))
		}
		kb, err := strconv.ParseInt(string(f[0]), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("benchsuite: /proc status %s: %w", field, err)
		}
		return kb << 10, nil
	}
	return 0, fmt.Errorf("benchsuite: /proc status: no %s", field)
}

// PeakRSS returns process pid's peak resident set size since it started
// or since ResetPeakRSS.
func PeakRSS(pid int) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("benchsuite: %w", err)
	}
	return ParseVmHWM(data)
}

// ResetPeakRSS sets process pid's peak resident set size to its current
// one (Linux 4.0+: "5" to /proc/PID/clear_refs; the caller must own the
// process).
func ResetPeakRSS(pid int) error {
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
		return fmt.Errorf("benchsuite: resetting the peak RSS of %d: %w", pid, err)
	}
	return nil
}
