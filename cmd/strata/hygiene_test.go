package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/strata-log/strata/cmd/strata/devcluster"
	"github.com/strata-log/strata/cmd/strata/internal/cli"
)

// run runs `strata ARGS` in-process as a user would (no --broker added).
func run(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	root := newRootCommand()
	var out, errOut bytes.Buffer
	root.SetIn(strings.NewReader(""))
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	_, err := root.ExecuteC()
	if msg := cli.Message(err); msg != "" {
		errOut.WriteString("strata: " + msg + "\n")
	}
	return out.String(), errOut.String(), cli.ExitCode(err)
}

// TestUntrustedProfileRefused: a ./.strata/profile.json that
// others may write to is refused with a message saying why and what to
// do, before anything connects; --broker and --metad do without it.
func TestUntrustedProfileRefused(t *testing.T) {
	work := t.TempDir()
	t.Chdir(work)
	for _, env := range []string{devcluster.EnvProfile, cli.EnvBroker, cli.EnvMetad} {
		t.Setenv(env, "")
	}
	t.Setenv("XDG_CONFIG_HOME", t.TempDir()) // no user profile
	if err := os.Mkdir(".strata", 0o755); err != nil {
		t.Fatal(err)
	}
	profile := filepath.Join(".strata", "profile.json")
	if err := os.WriteFile(profile, []byte(`{"metad": "127.0.0.1:1", "brokers": "127.0.0.1:1"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(profile, 0o666); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"topic", "list"}, {"meta", "get", "/k"}} {
		_, errOut, code := run(t, append(args, "--timeout", "2s")...)
		for _, want := range []string{"untrusted profile", ".strata/profile.json is writable by group or others", "--broker", "chmod go-w"} {
			if code != 1 || !strings.Contains(errOut, want) {
				t.Fatalf("strata %s: exit %d, %q; want exit 1 and %q", strings.Join(args, " "), code, errOut, want)
			}
		}
	}
	// Explicit endpoints do not read the profile (nothing listens on
	// port 1: the error is a connection's, not the profile's).
	_, errOut, _ := run(t, "meta", "get", "/k", "--metad", "127.0.0.1:1", "--timeout", "1s")
	if strings.Contains(errOut, "profile") {
		t.Fatalf("--metad still read the profile: %q", errOut)
	}
}

// TestDevKillStalePID: `strata dev kill` of a node whose
// recorded pid now runs another program signals nothing and says so.
func TestDevKillStalePID(t *testing.T) {
	if _, err := os.Readlink("/proc/self/exe"); err != nil {
		t.Skip("no /proc")
	}
	sleep := exec.Command("sleep", "60")
	sleep.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := sleep.Start(); err != nil {
		t.Skip(err)
	}
	exited := make(chan struct{})
	go func() { _ = sleep.Wait(); close(exited) }()
	t.Cleanup(func() { _ = sleep.Process.Kill(); <-exited })

	dir := t.TempDir()
	st := &devcluster.State{Dir: dir, Nodes: []devcluster.Node{
		{Name: "broker-1", Role: devcluster.RoleBroker, PID: sleep.Process.Pid, Bin: filepath.Join(dir, "bin", "broker")},
	}}
	if err := st.Save(); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := run(t, "dev", "kill", "broker-1", "--dir", dir)
	if code == 0 || !strings.Contains(errOut, "broker-1 has exited and its pid") || !strings.Contains(errOut, "not signalled") {
		t.Fatalf("dev kill: exit %d, %q", code, errOut)
	}
	select {
	case <-exited:
		t.Fatal("the unrelated process was killed")
	default:
	}
	// dev status counts it as not running.
	out, _, code := run(t, "dev", "status", "--dir", dir)
	if code != 0 || !strings.Contains(out, "false") {
		t.Fatalf("dev status: exit %d:\n%s", code, out)
	}
}
