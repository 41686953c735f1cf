//go:build !linux

package bench

import "errors"

// diskUsage is not known here: the suite leaves the check to the bookies.
func diskUsage(string) (total, free uint64, err error) {
	return 0, 0, errors.New("bench: disk usage is read on Linux only")
}
