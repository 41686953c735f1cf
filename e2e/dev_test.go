package e2e

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/strata-log/strata/cmd/strata/devcluster"
	"github.com/strata-log/strata/internal/proctest"
	"github.com/strata-log/strata/internal/testwait"
)

// freeBase finds a metad base port whose client, raft and admin ports
// (base..base+2, +100, +200) and bookie ports (+300, +400) are all free,
// in a span of 1,000 ports no other test binary draws from (proctest.Span),
// which also holds the brokers' (+500, +600) and MinIO's (+700, +701) of
// devPortFlags.
func freeBase(t *testing.T) int {
	t.Helper()
	for range 10 {
		base := proctest.Span(t, 1000)
		ok := true
		for _, off := range []int{0, 1, 2, 100, 101, 102, 200, 201, 202, 300, 301, 302, 400, 401, 402} {
			if !portFree(fmt.Sprintf("127.0.0.1:%d", base+off)) {
				ok = false
				break
			}
		}
		if ok {
			return base
		}
	}
	t.Fatal("no free port range")
	return 0
}

// devPortFlags returns `strata dev` flags that move every port off the
// defaults to free ones, so that tests do not collide with a developer's
// cluster (or MinIO) or with each other; the MinIO port is the returned int.
func devPortFlags(t *testing.T) ([]string, int) {
	t.Helper()
	base := freeBase(t)
	minioPort := freePorts(t, base+700, 1, 1) // S3 and console (+1)
	return []string{"--metad-port", fmt.Sprint(base), "--bookie-port", fmt.Sprint(base + 300),
		"--broker-port", fmt.Sprint(freePorts(t, base+500, 2, 100)), "--minio-port", fmt.Sprint(minioPort)}, minioPort
}

// devRun is a `strata dev` process whose output a test reads line by line.
type devRun struct {
	t      *testing.T
	cmd    *exec.Cmd
	dir    string // its --dir
	lines  chan string
	output []string // the lines read so far
}

// startDev starts `strata dev --dir dir` with the test's role binaries and
// env added to the environment; the test's cleanup interrupts it.
func startDev(t *testing.T, dir string, env []string, args ...string) *devRun {
	t.Helper()
	args = append([]string{"dev", "--dir", dir, "--bin-dir", filepath.Dir(bins["metad"])}, args...)
	d := &devRun{t: t, cmd: exec.Command(bins["strata"], args...), dir: dir, lines: make(chan string, 1000)}
	d.cmd.Env = append(d.cmd.Environ(), env...)
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	d.cmd.Stdout, d.cmd.Stderr = pw, pw
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	t.Cleanup(func() {
		_ = d.cmd.Process.Signal(syscall.SIGINT)
		_ = d.cmd.Wait()
	})
	go func() {
		defer pr.Close()
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			d.lines <- sc.Text()
		}
		close(d.lines)
	}()
	return d
}

// waitFor reads output until a line contains substr, and returns it.
func (d *devRun) waitFor(substr string, timeout time.Duration) string {
	d.t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case l, ok := <-d.lines:
			if !ok {
				d.t.Fatalf("strata dev exited before %q:\n%s", substr, strings.Join(d.output, "\n"))
			}
			d.output = append(d.output, l)
			if strings.Contains(l, substr) {
				return l
			}
		case <-deadline:
			d.t.Fatalf("no %q within %s:\n%s", substr, timeout, strings.Join(d.output, "\n"))
		}
	}
}

// interrupt sends Ctrl-C's SIGINT and checks that every node listed in
// the state file has stopped.
func (d *devRun) interrupt() {
	d.t.Helper()
	if err := d.cmd.Process.Signal(syscall.SIGINT); err != nil {
		d.t.Fatal(err)
	}
	d.waitFor("stopped", 30*time.Second)
	st, err := devcluster.LoadState(d.dir)
	if err != nil {
		d.t.Fatal(err)
	}
	for _, n := range st.Nodes {
		if devcluster.Signal(n, 0) == nil {
			d.t.Errorf("%s (pid %d) still running after Ctrl-C", n.Name, n.PID)
		}
	}
}

// brokerLogsSay waits until the log of every broker of the cluster in dir
// has a line holding all of substrs.
func brokerLogsSay(t *testing.T, dir string, substrs ...string) {
	t.Helper()
	st, err := devcluster.LoadState(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range st.Nodes {
		if n.Role != devcluster.RoleBroker {
			continue
		}
		testwait.UntilNil(t, 10*time.Second, n.Name+" logs "+strings.Join(substrs, " "), func() error {
			data, err := os.ReadFile(n.LogFile)
			if err != nil {
				return err
			}
		lines:
			for _, l := range strings.Split(string(data), "\n") {
				for _, s := range substrs {
					if !strings.Contains(l, s) {
						continue lines
					}
				}
				return nil
			}
			return fmt.Errorf("no line with %q in %s", substrs, n.LogFile)
		})
	}
}

// TestDevCluster runs `strata dev` as a user would: the cluster comes up,
// the CLI works with no flags through the profile, a node can be killed and
// started again, and Ctrl-C stops every process. No minio binary can be
// found (PATH and GOPATH are empty directories), so the brokers tier to a
// local directory and strata dev says so. TestDevMinIO runs it with MinIO.
func TestDevCluster(t *testing.T) {
	skipShort(t)
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	env := []string{"STRATA_PROFILE=" + filepath.Join(dir, "profile.json"), "STRATA_METAD=", "PATH=" + empty, "GOPATH=" + empty}
	clusterDir := filepath.Join(dir, "cluster")
	ports, _ := devPortFlags(t)
	start := time.Now()
	d := startDev(t, clusterDir, env, ports...)
	tierURL := "file://" + filepath.Join(clusterDir, "tier")
	if l := d.waitFor("no minio binary", 10*time.Second); !strings.Contains(l, tierURL) || !strings.Contains(l, "make minio") {
		t.Fatalf("fallback line %q: want the directory %s and how to get MinIO", l, tierURL)
	}
	d.waitFor("cluster ready", 10*time.Second)
	t.Logf("strata dev ready in %s", time.Since(start).Round(time.Millisecond))
	d.waitFor("objects: "+tierURL+" (local directory", 5*time.Second)
	brokerLogsSay(t, clusterDir, `msg="tiered storage"`, tierURL)

	if out, errOut, code := strata(t, env, "meta", "put", "/dev", "works"); code != 0 {
		t.Fatalf("put through the profile: %d %s %s", code, out, errOut)
	}
	st, err := devcluster.LoadState(clusterDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Nodes) != 8 {
		t.Fatalf("state lists %d nodes, want 3 metad, 3 bookies and 2 brokers (no minio)", len(st.Nodes))
	}
	out, _, code := strata(t, env, "cluster", "bookies")
	if code != 0 || strings.Count(out, "writable") != 3 {
		t.Fatalf("cluster bookies: exit %d\n%s", code, out)
	}
	devDir := []string{"--dir", clusterDir}
	if _, errOut, code := strata(t, env, append([]string{"dev", "kill", "metad-1"}, devDir...)...); code != 0 {
		t.Fatalf("dev kill: %s", errOut)
	}
	d.waitFor("metad-1", 5*time.Second) // the supervisor notices
	if _, errOut, code := strata(t, env, append([]string{"dev", "start", "metad-1"}, devDir...)...); code != 0 {
		t.Fatalf("dev start: %s", errOut)
	}
	if out, _, code := strata(t, env, "meta", "get", "/dev"); code != 0 || out != "works\n" {
		t.Fatalf("get after restart: %d %q", code, out)
	}
	d.interrupt()
}
