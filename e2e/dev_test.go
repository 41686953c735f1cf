package e2e

import (
	"bufio"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/strata-log/strata/internal/devcluster"
)

// freeBase finds a metad base port whose client, raft and admin ports
// (base..base+2, +100, +200) and bookie ports (+300, +400) are all free.
func freeBase(t *testing.T) int {
	t.Helper()
	for base := 20001 + int(time.Now().UnixNano()%200)*50; base < 60000; base += 997 {
		ok := true
		for _, off := range []int{0, 1, 2, 100, 101, 102, 200, 201, 202, 300, 301, 302, 400, 401, 402} {
			ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", base+off))
			if err != nil {
				ok = false
				break
			}
			ln.Close()
		}
		if ok {
			return base
		}
	}
	t.Fatal("no free port range")
	return 0
}

// TestDevCluster runs `strata dev` as a user would: the cluster comes up,
// the CLI works with no flags through the profile, a node can be killed and
// started again, and Ctrl-C stops every process.
func TestDevCluster(t *testing.T) {
	skipShort(t)
	dir := t.TempDir()
	profile := filepath.Join(dir, "profile.json")
	env := []string{"STRATA_PROFILE=" + profile, "STRATA_METAD="}
	base := freeBase(t)
	dev := exec.Command(bins["strata"], "dev", "--dir", filepath.Join(dir, "cluster"),
		"--bin-dir", filepath.Dir(bins["metad"]), "--metad-port", fmt.Sprint(base), "--bookie-port", fmt.Sprint(base+300),
		"--broker-port", fmt.Sprint(freePorts(t, base+500, 2, 100)))
	dev.Env = append(dev.Environ(), env...)
	stdout, err := dev.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	dev.Stderr = dev.Stdout
	start := time.Now()
	if err := dev.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = dev.Process.Signal(syscall.SIGINT)
		_ = dev.Wait()
	})
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var output []string
	waitFor := func(substr string, timeout time.Duration) {
		t.Helper()
		deadline := time.After(timeout)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("strata dev exited before %q:\n%s", substr, strings.Join(output, "\n"))
				}
				output = append(output, l)
				if strings.Contains(l, substr) {
					return
				}
			case <-deadline:
				t.Fatalf("no %q within %s:\n%s", substr, timeout, strings.Join(output, "\n"))
			}
		}
	}
	waitFor("cluster ready", 10*time.Second)
	t.Logf("strata dev ready in %s", time.Since(start).Round(time.Millisecond))

	if out, errOut, code := strata(t, env, "meta", "put", "/dev", "works"); code != 0 {
		t.Fatalf("put through the profile: %d %s %s", code, out, errOut)
	}
	st, err := devcluster.LoadState(filepath.Join(dir, "cluster"))
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Nodes) != 8 {
		t.Fatalf("state lists %d nodes, want 3 metad, 3 bookies and 2 brokers", len(st.Nodes))
	}
	out, _, code := strata(t, env, "cluster", "bookies")
	if code != 0 || strings.Count(out, "writable") != 3 {
		t.Fatalf("cluster bookies: exit %d\n%s", code, out)
	}
	devDir := []string{"--dir", filepath.Join(dir, "cluster")}
	if _, errOut, code := strata(t, env, append([]string{"dev", "kill", "metad-1"}, devDir...)...); code != 0 {
		t.Fatalf("dev kill: %s", errOut)
	}
	waitFor("metad-1", 5*time.Second) // the supervisor notices
	if _, errOut, code := strata(t, env, append([]string{"dev", "start", "metad-1"}, devDir...)...); code != 0 {
		t.Fatalf("dev start: %s", errOut)
	}
	if out, _, code := strata(t, env, "meta", "get", "/dev"); code != 0 || out != "works\n" {
		t.Fatalf("get after restart: %d %q", code, out)
	}

	if err := dev.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	waitFor("stopped", 20*time.Second)
	st, err = devcluster.LoadState(filepath.Join(dir, "cluster"))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range st.Nodes {
		if devcluster.Signal(n, 0) == nil {
			t.Errorf("%s (pid %d) still running after Ctrl-C", n.Name, n.PID)
		}
	}
}
