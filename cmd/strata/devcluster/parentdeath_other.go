//go:build !linux

package devcluster

import "os/exec"

// startTied starts cmd; see the Linux version.
func startTied(cmd *exec.Cmd) error { return cmd.Start() }
