package devcluster

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// startSleeper starts `sleep 60`, in its own process group when
// groupLeader (as Start does for nodes), and kills it when the test ends.
func startSleeper(t *testing.T, groupLeader bool) (pid int, bin string) {
	t.Helper()
	bin, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep binary")
	}
	cmd := exec.Command(bin, "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: groupLeader}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	return cmd.Process.Pid, bin
}

// TestStalePIDNotSignalled: a pid recorded in cluster.json
// that now runs another program, or a process that leads no group of its
// own, gets no signal from Signal or Stop, and they say why; only the
// node's own process is signalled.
func TestStalePIDNotSignalled(t *testing.T) {
	if _, err := os.Readlink("/proc/self/exe"); err != nil {
		t.Skip("no /proc: only the process group is checked")
	}
	pid, _ := startSleeper(t, true)
	other := Node{Name: "broker-1", PID: pid, Bin: filepath.Join(t.TempDir(), "broker")}
	for _, sig := range []syscall.Signal{0, syscall.SIGTERM, syscall.SIGKILL} {
		if err := Signal(other, sig); !errors.Is(err, ErrOtherProgram) {
			t.Fatalf("Signal(%v) to a reused pid: %v, want ErrOtherProgram", sig, err)
		}
	}
	if err := Stop(other, time.Second); !errors.Is(err, ErrOtherProgram) {
		t.Fatalf("Stop of a reused pid: %v, want ErrOtherProgram", err)
	}
	if !alive(pid) {
		t.Fatal("the unrelated process was signalled")
	}
	if !WaitGone(other, 0) {
		t.Fatal("WaitGone: a reused pid is not the node, so the node is gone")
	}

	// The right binary, but not a group leader: its group is the test's.
	pid, bin := startSleeper(t, false)
	inOurGroup := Node{Name: "bookie-1", PID: pid, Bin: bin}
	if err := Stop(inOurGroup, time.Second); !errors.Is(err, ErrOtherProgram) {
		t.Fatalf("Stop of a process that leads no group: %v, want ErrOtherProgram", err)
	}
	if !alive(pid) {
		t.Fatal("a process that leads no group was signalled")
	}
}

func TestSignalExitedNode(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Skip(err)
	}
	// Its pid may have been reused already: then it is another program.
	gone := Node{Name: "metad-1", PID: cmd.Process.Pid, Bin: cmd.Path}
	notSignalled := func(err error) bool { return errors.Is(err, ErrNotRunning) || errors.Is(err, ErrOtherProgram) }
	if err := Signal(gone, syscall.SIGKILL); !notSignalled(err) {
		t.Fatalf("Signal of an exited node: %v, want ErrNotRunning", err)
	}
	if err := Stop(gone, time.Second); !notSignalled(err) {
		t.Fatalf("Stop of an exited node: %v, want ErrNotRunning", err)
	}
	if err := Stop(Node{Name: "metad-2"}, time.Second); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("Stop of a node with no pid: %v, want ErrNotRunning", err)
	}
}

// TestStopOwnNode: the node's own process (its binary, leading its group)
// is stopped.
func TestStopOwnNode(t *testing.T) {
	pid, bin := startSleeper(t, true)
	n := Node{Name: "broker-2", PID: pid, Bin: bin}
	if err := Check(n); err != nil {
		t.Fatalf("Check of the node's own process: %v", err)
	}
	if err := Stop(n, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if !WaitGone(n, 5*time.Second) {
		t.Fatal("the node still runs after Stop")
	}
}

func TestSameExecutable(t *testing.T) {
	for _, tc := range []struct {
		exe, want string
		same      bool
	}{
		{"/opt/strata/bin/broker", "/opt/strata/bin/broker", true},
		// Rebuilt while running (make build during strata dev).
		{"/opt/strata/bin/broker (deleted)", "/opt/strata/bin/broker", true},
		{"/usr/bin/vim", "/opt/strata/bin/broker", false},
		{"/opt/strata/bin/broker2", "/opt/strata/bin/broker", false},
	} {
		if got := sameExecutable(tc.exe, tc.want); got != tc.same {
			t.Errorf("sameExecutable(%q, %q) = %t", tc.exe, tc.want, got)
		}
	}
}
