package chaos

import (
	"os/exec"
	"syscall"
	"testing"

	"github.com/strata-log/strata/cmd/strata/devcluster"
)

// A node whose pid runs another program for now (`ip netns exec` just
// before it execs the node's binary) has not exited: the supervisor must
// not start a second copy of it. One whose process is gone has.
func TestExitedOnlyWhenTheProcessIsGone(t *testing.T) {
	sleeper := exec.Command("sleep", "60")
	sleeper.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = sleeper.Process.Kill()
		_ = sleeper.Wait()
	}()
	n := devcluster.Node{Name: "broker-1", PID: sleeper.Process.Pid, Bin: "/nonexistent/broker"}
	if err := devcluster.Check(n); err == nil {
		t.Fatal("Check took sleep for the broker")
	}
	if exited(n) {
		t.Fatal("a live process running another program was judged exited")
	}
	if err := sleeper.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = sleeper.Wait()
	if !exited(n) {
		t.Fatal("a node whose process is gone was not judged exited")
	}
}
