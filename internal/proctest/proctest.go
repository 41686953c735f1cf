// Package proctest runs Strata's real programs as child processes for
// end-to-end tests: it builds the binaries once, starts them on loopback
// ports, and kills, pauses, resumes or restarts them. Every process a test
// starts is stopped by the test's cleanup, and its output is kept in a log
// file that is printed when the test fails.
//
// FreeAddr and Listen hand out loopback ports below the kernel's ephemeral
// range to any test, including one that serves in process.
package proctest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Build compiles the given main packages (import paths relative to the
// module root, e.g. "./cmd/metad") into dir and returns binary paths by base
// name ("metad").
func Build(dir string, pkgs ...string) (map[string]string, error) {
	root, err := ModuleRoot()
	if err != nil {
		return nil, err
	}
	bins := map[string]string{}
	args := []string{"build", "-o", dir + string(os.PathSeparator)}
	args = append(args, pkgs...)
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("proctest: go build %v: %w\n%s", pkgs, err, out)
	}
	for _, p := range pkgs {
		bins[filepath.Base(p)] = filepath.Join(dir, filepath.Base(p))
	}
	return bins, nil
}

// ModuleRoot finds the directory holding go.mod, from this source file.
func ModuleRoot() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("proctest: cannot locate source")
	}
	dir := filepath.Dir(file)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("proctest: go.mod not found")
		}
		dir = parent
	}
}

// FreeAddr returns a loopback address with a port that was free a moment
// ago. Ports come from 10000-31999, below Linux's ephemeral range
// (32768-60999), so the outgoing connections of other tests cannot take
// them between this check and the child process binding them; a port is
// never handed out twice by one test binary, and test binaries running at
// once draw from disjoint blocks of the range (portBlock). $STRATA_TEST_PORTS
// ("23000-23999") narrows the range, for a machine where several test runs
// share the loopback ports.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln := listen(t)
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// Listen listens on a loopback port from the same range as FreeAddr,
// trying other ports when one is taken; it is what a test that serves in
// process uses instead of "127.0.0.1:0", whose port the kernel picks from
// the ephemeral range. The listener is closed when the test ends, if the
// test has not closed it.
func Listen(t testing.TB) net.Listener {
	t.Helper()
	ln := listen(t)
	t.Cleanup(func() { _ = ln.Close() })
	return ln
}

// listen listens on a port of the test range that this test binary has
// not handed out before, and marks it handed out. Ports come from the
// blocks of the range this binary claimed (claimBlockLocked).
func listen(t testing.TB) net.Listener {
	t.Helper()
	lo, hi := testRange(t)
	ports.mu.Lock()
	defer ports.mu.Unlock()
	for range 2000 {
		if len(ports.free) == 0 && !ports.claimBlockLocked(lo, hi) {
			t.Fatalf("proctest: no free port: every block of %d-%d is used up or held by another test binary", lo, hi)
		}
		i := rand.IntN(len(ports.free))
		port := ports.free[i]
		ports.free[i] = ports.free[len(ports.free)-1]
		ports.free = ports.free[:len(ports.free)-1]
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue // taken by something else: never handed out
		}
		return ln
	}
	t.Fatal("proctest: no free port")
	return nil
}

// testRange is the range test ports come from: 10000-31999, or
// $STRATA_TEST_PORTS.
func testRange(t testing.TB) (lo, hi int) {
	t.Helper()
	lo, hi = 10000, 31999
	if r := os.Getenv("STRATA_TEST_PORTS"); r != "" {
		if _, err := fmt.Sscanf(r, "%d-%d", &lo, &hi); err != nil || lo < 1024 || hi < lo || hi > 65535 {
			t.Fatalf("proctest: STRATA_TEST_PORTS=%q, want a range like 23000-23999", r)
		}
	}
	return lo, hi
}

// Span reserves n consecutive ports of the test range for the test (whole
// blocks, claimed as Listen claims them, never handed out by FreeAddr or
// Listen) and returns the first, for a program given base ports
// (`strata dev --metad-port`). The caller still checks that the ports it
// uses are free: a process outside the tests may hold one.
func Span(t testing.TB, n int) int {
	t.Helper()
	lo, hi := testRange(t)
	blocks := (n + portBlock - 1) / portBlock
	first, last := (lo+portBlock-1)/portBlock, (hi+1)/portBlock-blocks // whole blocks inside lo-hi
	ports.mu.Lock()
	defer ports.mu.Unlock()
	k, ok := ports.claimLocked(first, last, blocks)
	if !ok {
		t.Fatalf("proctest: no %d consecutive ports free of other test binaries in %d-%d", n, lo, hi)
	}
	return k * portBlock
}

// claimLocked claims n consecutive blocks, the first of them one of
// first..last tried from a random one on, and returns that first block.
func (p *portState) claimLocked(first, last, n int) (int, bool) {
	if last < first {
		return 0, false
	}
	start := rand.IntN(last - first + 1)
	for i := range last - first + 1 {
		if k := first + (start+i)%(last-first+1); p.claimRunLocked(k, n) {
			return k, true
		}
	}
	return 0, false
}

// claimRunLocked claims blocks k..k+n-1, all or none.
func (p *portState) claimRunLocked(k, n int) bool {
	var files []*os.File
	for b := k; b < k+n; b++ {
		f, ok := lockPortBlock(b)
		if !ok || p.claimed[b] {
			if f != nil {
				f.Close()
			}
			for _, f := range files {
				f.Close()
			}
			return false
		}
		if f != nil {
			files = append(files, f)
		}
	}
	for b := k; b < k+n; b++ {
		p.claimed[b] = true
	}
	p.locks = append(p.locks, files...)
	return true
}

// portBlock is how many ports of the range a test binary claims at a
// time. go test runs several packages' test binaries at once, and a port
// a test checked free is bound by its child process only later: two
// binaries drawing from the whole range collided there (CI:
// "bind: address already in use" for a metad of TestBrokerZombieFenced).
// A block belongs to one binary at a time, through an exclusive flock on
// a file under os.TempDir() that the kernel drops when the binary exits,
// however it exits.
const portBlock = 500

type portState struct {
	mu      sync.Mutex
	free    []int        // ports of claimed blocks not handed out yet
	claimed map[int]bool // blocks this binary holds or used up
	locks   []*os.File   // held for the binary's life
}

var ports = portState{claimed: map[int]bool{}}

// claimBlockLocked adds to ports.free the ports of a block of lo-hi that
// no other test binary holds, and reports whether there was one.
func (p *portState) claimBlockLocked(lo, hi int) bool {
	k, ok := p.claimLocked(lo/portBlock, hi/portBlock, 1)
	if !ok {
		return false
	}
	for port := max(lo, k*portBlock); port <= min(hi, k*portBlock+portBlock-1); port++ {
		p.free = append(p.free, port)
	}
	return true
}

// lockPortBlock takes block k's lock file. Without a usable lock
// directory (another user's, say) the block is taken unlocked: the
// collision that locks avoid is rare, a test that cannot start is not.
func lockPortBlock(k int) (*os.File, bool) {
	dir := filepath.Join(os.TempDir(), "strata-test-ports")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return nil, true
	}
	f, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("block-%d.lock", k)), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, true
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, false
	}
	return f, true
}

// Process is one running (or stopped) child program.
type Process struct {
	Name    string
	Bin     string
	Args    []string
	LogPath string
	// Env is added to the test's environment at the next start (e.g.
	// STRATA_FAILPOINTS before a Restart).
	Env []string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// Start runs bin with args, logging to a file under t.TempDir(). The test's
// cleanup kills it if it still runs and prints its log on failure.
func Start(t testing.TB, name, bin string, args ...string) *Process {
	t.Helper()
	return StartEnv(t, name, bin, nil, args...)
}

// StartEnv is Start with env ("KEY=value") added to the test's
// environment; it stays in Env, so a Restart keeps it.
func StartEnv(t testing.TB, name, bin string, env []string, args ...string) *Process {
	t.Helper()
	p := &Process{Name: name, Bin: bin, Args: args, Env: env, LogPath: filepath.Join(t.TempDir(), name+".log")}
	if err := p.start(); err != nil {
		t.Fatalf("proctest: start %s: %v", name, err)
	}
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			if out, err := os.ReadFile(p.LogPath); err == nil {
				t.Logf("---- %s log (last 4 KiB) ----\n%s", name, tail(out, 4096))
			}
		}
	})
	return p
}

func tail(b []byte, n int) []byte {
	if len(b) <= n {
		return b
	}
	b = b[len(b)-n:]
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		b = b[i+1:]
	}
	return b
}

func (p *Process) start() error {
	f, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(p.Bin, p.Args...)
	cmd.Env = append(os.Environ(), p.Env...)
	cmd.Stdout, cmd.Stderr = f, f
	// Its own process group, so a signal to the test does not reach it and
	// Kill reaches all of it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return err
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(done)
	}()
	p.mu.Lock()
	p.cmd, p.done = cmd, done
	p.mu.Unlock()
	return nil
}

// Running reports whether the process has been started and not exited.
func (p *Process) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// ExitCode is the exit code of the latest start once it has exited; -1
// while it runs, or when a signal ended it.
func (p *Process) ExitCode() int {
	if p.Running() {
		return -1
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.ProcessState == nil {
		return -1
	}
	return p.cmd.ProcessState.ExitCode()
}

// Pid is the process id of the latest start.
func (p *Process) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd.Process.Pid
}

func (p *Process) signal(sig syscall.Signal) {
	p.mu.Lock()
	cmd := p.cmd
	p.mu.Unlock()
	if cmd != nil && cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, sig)
	}
}

func (p *Process) wait(timeout time.Duration) bool {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done == nil {
		return true
	}
	select {
	case <-done:
		return true
	case <-time.After(timeout):
		return false
	}
}

// Kill sends SIGKILL (kill -9) and waits for the process to exit.
func (p *Process) Kill() {
	if !p.Running() {
		return
	}
	p.signal(syscall.SIGCONT) // a stopped process must be able to die
	p.signal(syscall.SIGKILL)
	p.wait(10 * time.Second)
}

// Stop sends SIGTERM and waits up to timeout, then kills.
func (p *Process) Stop(timeout time.Duration) {
	if !p.Running() {
		return
	}
	p.signal(syscall.SIGTERM)
	if !p.wait(timeout) {
		p.Kill()
	}
}

// Pause sends SIGSTOP; Resume sends SIGCONT.
func (p *Process) Pause()  { p.signal(syscall.SIGSTOP) }
func (p *Process) Resume() { p.signal(syscall.SIGCONT) }

// Restart starts the process again with the same arguments (after Kill or
// Stop).
func (p *Process) Restart(t testing.TB) {
	t.Helper()
	if p.Running() {
		t.Fatalf("proctest: restart %s: still running", p.Name)
	}
	if err := p.start(); err != nil {
		t.Fatalf("proctest: restart %s: %v", p.Name, err)
	}
}

// WaitHTTP polls url until the process answers 200 there, failing at once
// if the process exits.
func (p *Process) WaitHTTP(ctx context.Context, url string) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	go func() {
		select {
		case <-done:
			cancel()
		case <-ctx.Done():
		}
	}()
	err := WaitHTTP(ctx, url)
	if err != nil && !p.Running() {
		return fmt.Errorf("proctest: %s exited during start-up (log %s): %w", p.Name, p.LogPath, err)
	}
	return err
}

// WaitHTTP polls url until it answers 200 or ctx ends.
func WaitHTTP(ctx context.Context, url string) error {
	client := &http.Client{Timeout: time.Second}
	for {
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("proctest: %s not ready: %w (last error %v)", url, ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
