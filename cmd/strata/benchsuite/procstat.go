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

// HostTimes is the machine's CPU time from the "cpu" line of /proc/stat,
// in seconds summed over CPUs: Busy is everything but idle and iowait
// (user, nice, system, irq, softirq, steal: the kernel's work for the
// nodes, such as loopback TCP and block I/O, shows here and not in any
// /proc/PID/stat).
type HostTimes struct {
	Busy, Total float64
}

// ParseHostStat returns the HostTimes of the content of /proc/stat.
func ParseHostStat(data []byte) (HostTimes, error) {
	line, _, _ := bytes.Cut(data, []byte("\n"))
	f := bytes.Fields(line)
	if len(f) < 5 || string(f[0]) != "cpu" {
		return HostTimes{}, fmt.Errorf("benchsuite: /proc/stat: first line %q is not the cpu total", line)
	}
	var busy, total uint64 // ticks
	// user nice system idle iowait irq softirq steal (guest times are
	// already counted in user and nice).
	for i, s := range f[1:min(len(f), 9)] {
		v, err := strconv.ParseUint(string(s), 10, 64)
		if err != nil {
			return HostTimes{}, fmt.Errorf("benchsuite: /proc/stat: %w", err)
		}
		total += v
		if i != 3 && i != 4 { // idle, iowait
			busy += v
		}
	}
	return HostTimes{Busy: float64(busy) / ClockTicks, Total: float64(total) / ClockTicks}, nil
}

// ReadHostTimes reads /proc/stat.
func ReadHostTimes() (HostTimes, error) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return HostTimes{}, fmt.Errorf("benchsuite: %w", err)
	}
	return ParseHostStat(data)
}

// BusyFraction is the share of the machine's CPU time that was busy
// between two readings (0 when nothing passed).
func BusyFraction(before, after HostTimes) float64 {
	total := after.Total - before.Total
	if total <= 0 {
		return 0
	}
	return (after.Busy - before.Busy) / total
}
