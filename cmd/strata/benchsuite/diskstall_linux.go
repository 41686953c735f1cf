package benchsuite

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// DiskDevice returns the major and minor numbers of the device holding
// dir.
func DiskDevice(dir string) (major, minor uint32, err error) {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return 0, 0, fmt.Errorf("benchsuite: stat %s: %w", dir, err)
	}
	return unix.Major(st.Dev), unix.Minor(st.Dev), nil
}

// ReadDiskCounters reads device major:minor's name and counters from
// /proc/diskstats.
func ReadDiskCounters(major, minor uint32) (string, DiskCounters, error) {
	data, err := os.ReadFile("/proc/diskstats")
	if err != nil {
		return "", DiskCounters{}, fmt.Errorf("benchsuite: %w", err)
	}
	return ParseDiskstats(data, major, minor)
}
