//go:build !linux

package devcluster

// runParentHelper: the parent-death tests run on Linux only.
func runParentHelper() int { return 2 }
