package bench

import "syscall"

// diskUsage is statfs(2) of dir: total bytes and bytes free to an
// unprivileged writer (as the bookies count them).
func diskUsage(dir string) (total, free uint64, err error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, 0, err
	}
	bsize := uint64(st.Bsize)
	return st.Blocks * bsize, st.Bavail * bsize, nil
}
