package netfault

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// commandTimeout bounds every ip and iptables command. They finish in
// milliseconds; the bound only keeps a wedged command (an iptables waiting
// on the xtables lock held by a crashed process) from hanging the caller.
const commandTimeout = 30 * time.Second

// run runs a command with stdin as its input and returns its standard
// output. The error names the command and carries its standard error.
func run(stdin string, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), &commandError{
			command: strings.Join(append([]string{name}, args...), " "),
			stderr:  strings.TrimSpace(stderr.String()),
			err:     err,
		}
	}
	return stdout.String(), nil
}

// commandError is a failed ip or iptables command.
type commandError struct {
	command string
	stderr  string
	err     error
}

func (e *commandError) Error() string {
	if e.stderr == "" {
		return fmt.Sprintf("netfault: %s: %v", e.command, e.err)
	}
	return fmt.Sprintf("netfault: %s: %v: %s", e.command, e.err, e.stderr)
}

func (e *commandError) Unwrap() error { return e.err }

// isNoDevice reports whether err is ip's answer for a link that is already
// gone: a veth disappears by itself once its peer's namespace is destroyed.
func isNoDevice(err error) bool {
	ce, ok := err.(*commandError)
	return ok && (strings.Contains(ce.stderr, "Cannot find device") ||
		strings.Contains(ce.stderr, "No such device"))
}

// iptablesRestore applies script (iptables-restore syntax, filter table)
// inside the namespace netns, atomically, leaving every rule the script
// does not name in place.
func iptablesRestore(netns, script string) error {
	_, err := run(script, "ip", "netns", "exec", netns, "iptables-restore", "-w", "--noflush")
	return err
}
