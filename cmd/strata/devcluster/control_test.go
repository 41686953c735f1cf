package devcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestStartNodeThroughSupervisor: with a `strata dev` serving the
// directory (here, this test), `strata dev start` has it start the node,
// so that the node is its child (and dies with it); a node that runs, or
// that the state file does not list, is not started, and a second `strata
// dev` for the directory is refused.
func TestStartNodeThroughSupervisor(t *testing.T) {
	dir := t.TempDir()
	st := helperNodeState(t, dir)
	ctl, err := listenControl(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	n := &st.Nodes[0]
	stopAtEnd(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	if err := StartNode(ctx, &out, st, n); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("started broker-1 (pid %d), ready\n", n.PID); out.String() != want {
		t.Fatalf("dev start printed %q, want %q", out.String(), want)
	}
	if ppid := parentPID(t, n.PID); ppid != os.Getpid() {
		t.Fatalf("the node's parent is pid %d, not the supervisor's (%d)", ppid, os.Getpid())
	}
	if cur, err := LoadState(dir); err != nil || cur.Nodes[0].PID != n.PID {
		t.Fatalf("state file after dev start: %+v, %v; want pid %d", cur, err, n.PID)
	}

	if err := StartNode(ctx, &out, st, n); err == nil || !strings.Contains(err.Error(), "already running") {
		t.Fatalf("dev start of a running node: %v", err)
	}
	if _, err := askSupervisor(ctx, dir, "broker-1"); err == nil || !strings.Contains(err.Error(), "did not start broker-1: broker-1 is already running") {
		t.Fatalf("the supervisor asked to start a running node: %v", err)
	}
	if _, err := askSupervisor(ctx, dir, "broker-9"); err == nil || !strings.Contains(err.Error(), `no node "broker-9"`) {
		t.Fatalf("the supervisor asked to start an unknown node: %v", err)
	}
	if _, err := listenControl(dir); err == nil || !strings.Contains(err.Error(), "another 'strata dev' runs for") {
		t.Fatalf("a second supervisor for the directory: %v", err)
	}
	if err := ctl.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, ControlSocket)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the socket is left after Close: %v", err)
	}
}

// TestStartNodeWithoutSupervisor: with no `strata dev` answering (none
// ever ran, or one was killed and left its socket), `strata dev start`
// starts the node itself, records it and says that it runs on its own.
// The next `strata dev` replaces the dead socket.
func TestStartNodeWithoutSupervisor(t *testing.T) {
	dir := t.TempDir()
	st := helperNodeState(t, dir)
	// The socket of a supervisor killed with SIGKILL: nobody answers.
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(dir, ControlSocket), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
	n := &st.Nodes[0]
	stopAtEnd(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	if err := StartNode(ctx, &out, st, n); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("no 'strata dev' runs for %s: broker-1 (pid %d) runs on its own, until 'strata dev stop broker-1'\n"+
		"started broker-1 (pid %d), ready\n", dir, n.PID, n.PID)
	if out.String() != want {
		t.Fatalf("dev start printed %q, want %q", out.String(), want)
	}
	if cur, err := LoadState(dir); err != nil || cur.Nodes[0].PID != n.PID {
		t.Fatalf("state file after dev start: %+v, %v; want pid %d", cur, err, n.PID)
	}
	ctl, err := listenControl(dir)
	if err != nil {
		t.Fatalf("a supervisor where a dead one left its socket: %v", err)
	}
	if err := ctl.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestControlSocketLongPath: a directory whose socket path is longer than
// a socket address holds is served and reached through /proc/self/fd.
func TestControlSocketLongPath(t *testing.T) {
	if _, err := os.Stat("/proc/self/fd"); err != nil {
		t.Skip("no /proc/self/fd")
	}
	dir := filepath.Join(t.TempDir(), strings.Repeat("d", 120))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	helperNodeState(t, dir)
	ctl, err := listenControl(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	if fi, err := os.Stat(filepath.Join(dir, ControlSocket)); err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket %v, %v: want an owner-only socket in the directory", fi, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// An unknown node: the supervisor's own answer shows it was reached.
	if _, err := askSupervisor(ctx, dir, "metad-9"); err == nil || !strings.Contains(err.Error(), `no node "metad-9"`) {
		t.Fatalf("asking through a long path: %v", err)
	}
}

// parentPID is pid's parent, from /proc/PID/stat.
func parentPID(t *testing.T, pid int) int {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	// The fields after the parenthesised command name: state, ppid, ...
	f := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		t.Fatalf("/proc/%d/stat: %q", pid, data)
	}
	return ppid
}
