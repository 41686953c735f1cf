package benchsuite

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
)

// ClockTicks is USER_HZ, the unit of /proc/PID/stat's times: 100 on every
// Linux architecture Go supports (sysconf(_SC_CLK_TCK) needs cgo).
const ClockTicks = 100

// ParseProcStat returns utime+stime in seconds from the content of
// /proc/PID/stat. The command name (field 2) is parenthesised and may
// hold spaces and parentheses, so fields are counted after its last ')'.
func ParseProcStat(data []byte) (float64, error) {
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, fmt.Errorf("benchsuite: /proc stat: no command name in %q", data)
	}
	// After ')': state (field 3), ..., utime (14), stime (15).
	f := bytes.Fields(data[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("benchsuite: /proc stat: %d fields after the command name, want at least 13", len(f))
	}
	utime, err := strconv.ParseUint(string(f[11]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("benchsuite: /proc stat utime: %w", err)
	}
	stime, err := strconv.ParseUint(string(f[12]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("benchsuite: /proc stat stime: %w", err)
	}
	return float64(utime+stime) / ClockTicks, nil
}

// CPUSeconds returns the CPU time (user+system) process pid has used.
func CPUSeconds(pid int) (float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("benchsuite: %w", err)
	}
	return ParseProcStat(data)
}
