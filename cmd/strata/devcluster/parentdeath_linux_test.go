//go:build linux

package devcluster

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/strata-log/strata/internal/testwait"
)

// Settings of a parent helper (runParentHelper).
const (
	tiedEnv  = "DEVCLUSTER_TEST_TIED"  // "1": Start; else start free
	childEnv = "DEVCLUSTER_TEST_CHILD" // the node's binary: sleep
	dirEnv   = "DEVCLUSTER_TEST_DIR"   // for the node's log file
)

// TestNodeDiesWithParent: a node started by Start dies when the process
// that started it is killed with SIGKILL (a `strata dev` killed with
// kill -9), even though the goroutine that called Start had its thread
// exit before (golang/go#27505).
func TestNodeDiesWithParent(t *testing.T) {
	parent, n := startParentHelper(t, true)
	killParent(t, parent)
	testwait.Until(t, 10*time.Second, fmt.Sprintf("node pid %d to die with its parent", n.PID), func() bool { return Check(n) != nil })
}

// TestFreeNodeOutlivesParent: a node started free (what `strata dev start`
// does when no `strata dev` answers) keeps running when the command that
// started it is gone.
func TestFreeNodeOutlivesParent(t *testing.T) {
	parent, n := startParentHelper(t, false)
	killParent(t, parent)
	// The kernel sends the parent-death signal as the parent exits, before
	// the parent can be waited for: a node tied by mistake is dead or has
	// SIGKILL pending by now.
	if err := Check(n); err != nil || killPending(n.PID) {
		t.Fatalf("the free node died with the process that started it: %v (SIGKILL pending: %t)", err, killPending(n.PID))
	}
}

// startParentHelper starts this test binary as a parent helper that
// starts `sleep 60` as a node (tied with Start, or free), and returns the
// helper and the node. Both are killed when the test ends.
func startParentHelper(t *testing.T, tied bool) (*exec.Cmd, Node) {
	t.Helper()
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep binary")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), helperEnv+"=parent", tiedEnv+"="+map[bool]string{true: "1", false: "0"}[tied],
		childEnv+"="+sleep, dirEnv+"="+dir)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	n := Node{Name: "bookie-1", Bin: sleep}
	t.Cleanup(func() {
		stdin.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait() // a second Wait (after killParent) fails harmlessly
		if Signal(n, syscall.SIGKILL) == nil && !WaitGone(n, 10*time.Second) {
			t.Errorf("node pid %d still runs", n.PID)
		}
	})
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- l
	}()
	l := testwait.Recv(t, 30*time.Second, "the parent helper's node pid", line)
	pid, err := strconv.Atoi(strings.TrimSpace(l))
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("parent helper: %q, %v; stderr: %s", l, err, stderr.String())
	}
	n.PID = pid
	if err := Check(n); err != nil {
		t.Fatalf("the node is not running: %v", err)
	}
	return cmd, n
}

// killParent kills the parent helper with SIGKILL and waits for it.
func killParent(t *testing.T, parent *exec.Cmd) {
	t.Helper()
	if err := parent.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = parent.Wait()
}

// runParentHelper starts a node as devcluster does (Start, or free with
// $DEVCLUSTER_TEST_TIED other than 1), prints its pid and waits, reading
// stdin, until it is killed or stdin ends. The node is started from a
// goroutine whose thread then exits, as a goroutine that returns locked
// to its thread makes it: a tied node must survive that.
func runParentHelper() int {
	n := Node{Name: "bookie-1", Bin: os.Getenv(childEnv), Args: []string{"60"},
		LogFile: filepath.Join(os.Getenv(dirEnv), "logs", "bookie-1.log")}
	tied := os.Getenv(tiedEnv) == "1"
	tid, err := startOnExitingThread(&n, tied)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := testwait.Poll(10*time.Second, "the starting thread to exit", func() error {
		if _, err := os.Stat(fmt.Sprintf("/proc/self/task/%d", tid)); err == nil {
			return errors.New("it still runs")
		}
		return nil
	}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		_ = syscall.Kill(-n.PID, syscall.SIGKILL)
		return 1
	}
	if !alive(n.PID) || killPending(n.PID) {
		fmt.Fprintln(os.Stderr, "the node died with the thread that started it")
		_ = syscall.Kill(-n.PID, syscall.SIGKILL)
		return 1
	}
	fmt.Println(n.PID)
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// startOnExitingThread starts n from a goroutine that returns locked to
// its thread, which the runtime then ends, and returns that thread's id.
// The main thread is never ended (the runtime parks it instead), so a
// goroutine that finds itself there tries again.
func startOnExitingThread(n *Node, tied bool) (int, error) {
	type result struct {
		tid int
		err error
	}
	// Keep this goroutine on its thread (the main one, most likely), so
	// that the one below runs on another.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for range 100 {
		res := make(chan result, 1)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
			tid := syscall.Gettid()
			if tid == syscall.Getpid() {
				runtime.UnlockOSThread()
				res <- result{tid: 0}
				return
			}
			res <- result{tid, start(n, tied)}
		}()
		if r := <-res; r.tid != 0 || r.err != nil {
			return r.tid, r.err
		}
	}
	return 0, errors.New("no goroutine ran off the main thread")
}

// killPending reports whether pid has SIGKILL pending (sent, not yet
// acted on), from /proc/PID/status.
func killPending(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(data), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || (k != "SigPnd" && k != "ShdPnd") {
			continue
		}
		if mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64); err == nil && mask&(1<<(syscall.SIGKILL-1)) != 0 {
			return true
		}
	}
	return false
}
