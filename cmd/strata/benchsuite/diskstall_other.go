//go:build !linux

package benchsuite

import "errors"

var errNoDiskstats = errors.New("benchsuite: device stalls are read from Linux's /proc/diskstats only")

// DiskDevice is not known here: the suite reports no device stalls.
func DiskDevice(string) (major, minor uint32, err error) { return 0, 0, errNoDiskstats }

// ReadDiskCounters is not known here.
func ReadDiskCounters(uint32, uint32) (string, DiskCounters, error) {
	return "", DiskCounters{}, errNoDiskstats
}
