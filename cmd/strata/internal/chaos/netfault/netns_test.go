package netfault

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// requireEnv makes the tests that need network namespaces fail instead of
// skipping when the machine cannot give them.
const requireEnv = "STRATA_REQUIRE_NETNS"

const (
	echoPort = "7000"
	udpPort  = 7001
	// blockedWait is how long a connection attempt that must fail is given.
	// Within the subnet a connection takes well under a millisecond; a
	// blocked one never completes, however long it is given.
	blockedWait = 300 * time.Millisecond
	// reachWait bounds the wait for something that must work, on a busy
	// machine.
	reachWait = 10 * time.Second
	// retryPause spaces the attempts of a poll that fail at once.
	retryPause = 10 * time.Millisecond
)

// requireNetns skips the test, or fails it under STRATA_REQUIRE_NETNS=1,
// unless this process can create network namespaces and iptables rules.
func requireNetns(t *testing.T) {
	t.Helper()
	why := ""
	switch {
	case runtime.GOOS != "linux":
		why = "not Linux"
	case os.Geteuid() != 0:
		why = "not root"
	default:
		for _, c := range [][]string{{"ip", "netns", "list"}, {"iptables", "-w", "-S", "FORWARD"}} {
			if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
				why = fmt.Sprintf("%s: %v: %s", strings.Join(c, " "), err, bytes.TrimSpace(out))
				break
			}
		}
	}
	if why == "" {
		return
	}
	if os.Getenv(requireEnv) == "1" {
		t.Fatalf("network namespaces are unavailable (%s) and %s=1", why, requireEnv)
	}
	t.Skipf("network namespaces are unavailable: %s (%s=1 fails instead)", why, requireEnv)
}

// testNetName returns a network name for a test, unique to this process so
// that two test runs on one machine do not collide.
func testNetName(suffix string) string {
	return fmt.Sprintf("nf%04x%s", os.Getpid()&0xffff, suffix)
}

// newNet creates a network with hosts, and removes it, checking nothing is
// left, when the test ends.
func newNet(t *testing.T, suffix string, hosts ...string) *Net {
	t.Helper()
	requireNetns(t)
	name := testNetName(suffix)
	if err := Cleanup(name); err != nil {
		t.Fatal(err)
	}
	n, err := New(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Error(err)
		}
		assertGone(t, name)
	})
	for _, h := range hosts {
		if _, err := n.AddHost(h); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

// assertGone fails the test if a namespace, link or FORWARD rule of
// network name exists.
func assertGone(t *testing.T, name string) {
	t.Helper()
	for _, c := range [][]string{{"ip", "netns", "list"}, {"ip", "-o", "link", "show"}} {
		out, err := exec.Command(c[0], c[1:]...).Output()
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.Lines(string(out)) {
			f := strings.Fields(line)
			if (len(f) > 0 && strings.HasPrefix(f[0], name+"-")) || (len(f) > 1 && strings.HasPrefix(f[1], name+"-")) {
				t.Errorf("%s: left behind: %s", strings.Join(c, " "), strings.TrimSpace(line))
			}
		}
	}
	out, err := exec.Command("iptables", "-w", "-S", "FORWARD").Output()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), `"strata-netfault:`+name+`"`) {
		t.Errorf("iptables FORWARD: rules left behind:\n%s", out)
	}
}

func TestHostsReachEachOther(t *testing.T) {
	n := newNet(t, "r", "a", "b")
	startServers(t, n, "a", "b", Root)
	for _, p := range [][2]string{{"a", "b"}, {"b", "a"}, {Root, "a"}, {Root, "b"}, {"a", Root}} {
		reaches(t, n, p[0], p[1])
	}
	if got := n.Hosts(); strings.Join(got, " ") != "a b" {
		t.Fatalf("Hosts() = %q", got)
	}
}

func TestCut(t *testing.T) {
	n := newNet(t, "c", "a", "b", "c")
	startServers(t, n, "a", "b", "c", Root)
	reaches(t, n, "a", "b")
	if err := n.Cut("a", "b"); err != nil {
		t.Fatal(err)
	}
	wantFaults(t, n, "cut a<->b")
	blocked(t, n, "a", "b")
	blocked(t, n, "b", "a")
	for _, p := range [][2]string{{"a", "c"}, {"c", "a"}, {"b", "c"}, {"c", "b"}, {Root, "a"}, {Root, "b"}, {"a", Root}} {
		reaches(t, n, p[0], p[1])
	}
	heal(t, n)
	reaches(t, n, "a", "b")
	reaches(t, n, "b", "a")
}

// An established connection stops moving data during a cut (packets are
// dropped, not refused: nothing resets it) and carries on after Heal.
func TestCutStallsEstablishedConnection(t *testing.T) {
	n := newNet(t, "e", "a", "b")
	startServers(t, n, "b")
	var c net.Conn
	deadline := time.Now().Add(reachWait)
	for {
		var err error
		if c, err = dial(n, "a", "b", time.Second); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		<-time.After(retryPause)
	}
	defer c.Close()
	if err := echo(c, []byte("before\n"), reachWait); err != nil {
		t.Fatal(err)
	}
	if err := n.Cut("a", "b"); err != nil {
		t.Fatal(err)
	}
	if err := echo(c, []byte("during\n"), blockedWait); !isTimeout(err) {
		t.Fatalf("echo during the cut: %v, want a timeout", err)
	}
	heal(t, n)
	// The bytes written during the cut are retransmitted; the echo arrives.
	if err := c.SetDeadline(time.Now().Add(reachWait)); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len("during\n"))
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "during\n" {
		t.Fatalf("after Heal: read %q, %v", got, err)
	}
	if err := echo(c, []byte("after\n"), reachWait); err != nil {
		t.Fatal(err)
	}
}

// A one-way cut loses datagrams one way only; over TCP it stops
// connections both ways, as the SYN-ACK of a connection from the far side
// is dropped.
func TestCutOneWay(t *testing.T) {
	n := newNet(t, "o", "a", "b")
	s := startServers(t, n, "a", "b", Root)
	delivered(t, n, s, "a", "b")
	if err := n.CutOneWay("a", "b"); err != nil {
		t.Fatal(err)
	}
	wantFaults(t, n, "cut a->b")
	lost(t, n, s, "a", "b")
	delivered(t, n, s, "b", "a")
	blocked(t, n, "a", "b")
	blocked(t, n, "b", "a")
	reaches(t, n, Root, "a")
	reaches(t, n, Root, "b")
	heal(t, n)
	delivered(t, n, s, "a", "b")
	reaches(t, n, "b", "a")

	// With the root namespace as the receiver, the packet is dropped as it
	// leaves the host.
	if err := n.CutOneWay("a", Root); err != nil {
		t.Fatal(err)
	}
	delivered(t, n, s, Root, "a")
	blocked(t, n, Root, "a")
	reaches(t, n, Root, "b")
	heal(t, n)
	reaches(t, n, Root, "a")
}

func TestIsolate(t *testing.T) {
	n := newNet(t, "i", "a", "b", "c")
	startServers(t, n, "a", "b", "c", Root)
	if err := n.Isolate("a"); err != nil {
		t.Fatal(err)
	}
	wantFaults(t, n, "isolate a")
	for _, p := range [][2]string{{"a", "b"}, {"b", "a"}, {"c", "a"}, {Root, "a"}, {"a", Root}} {
		blocked(t, n, p[0], p[1])
	}
	// Its own loopback still works.
	reaches(t, n, "a", "a")
	for _, p := range [][2]string{{"b", "c"}, {"c", "b"}, {Root, "b"}} {
		reaches(t, n, p[0], p[1])
	}
	heal(t, n)
	reaches(t, n, "a", "b")
	reaches(t, n, Root, "a")
}

func TestSplit(t *testing.T) {
	n := newNet(t, "s", "a", "b", "c", "d")
	startServers(t, n, "a", "b", "c", "d", Root)
	// d is on neither side and reaches both: the bridge shape.
	if err := n.Split([]string{"a"}, []string{"b", "c"}); err != nil {
		t.Fatal(err)
	}
	wantFaults(t, n, "split [a] | [b c]")
	for _, p := range [][2]string{{"a", "b"}, {"b", "a"}, {"a", "c"}, {"c", "a"}} {
		blocked(t, n, p[0], p[1])
	}
	for _, p := range [][2]string{{"b", "c"}, {"c", "b"}, {"d", "a"}, {"a", "d"}, {"d", "b"}, {"c", "d"}, {Root, "a"}, {Root, "c"}} {
		reaches(t, n, p[0], p[1])
	}
	heal(t, n)
	reaches(t, n, "a", "b")

	// The clients on the minority side.
	if err := n.Split([]string{"a", Root}, []string{"b", "c", "d"}); err != nil {
		t.Fatal(err)
	}
	blocked(t, n, Root, "b")
	blocked(t, n, "d", Root)
	reaches(t, n, Root, "a")
	reaches(t, n, "b", "d")
	heal(t, n)

	for _, sides := range [][2][]string{{{"a"}, nil}, {{"a", "b"}, {"b"}}, {{"a"}, {"x"}}} {
		if err := n.Split(sides[0], sides[1]); err == nil {
			t.Errorf("Split(%q, %q) succeeded", sides[0], sides[1])
		}
	}
	wantFaults(t, n)
}

func TestCutClients(t *testing.T) {
	n := newNet(t, "k", "a", "b")
	startServers(t, n, "a", "b", Root)
	if err := n.CutClients("a"); err != nil {
		t.Fatal(err)
	}
	wantFaults(t, n, "cut a<->root")
	blocked(t, n, Root, "a")
	blocked(t, n, "a", Root)
	reaches(t, n, "b", "a")
	reaches(t, n, "a", "b")
	reaches(t, n, Root, "b")
	heal(t, n)
	reaches(t, n, Root, "a")
}

func TestLoss(t *testing.T) {
	n := newNet(t, "l", "a", "b")
	startServers(t, n, "a", "b")
	if err := n.Loss("a", 0.5); err != nil {
		t.Fatal(err)
	}
	if err := n.Loss("a", 1); err != nil {
		t.Fatal(err)
	}
	wantFaults(t, n, "loss a p=1")
	blocked(t, n, Root, "a")
	blocked(t, n, "b", "a")
	blocked(t, n, "a", "b")
	reaches(t, n, Root, "b")
	if err := n.Loss("a", 0); err != nil {
		t.Fatal(err)
	}
	wantFaults(t, n)
	reaches(t, n, Root, "a")
	reaches(t, n, "b", "a")

	if err := n.Loss("b", 1); err != nil {
		t.Fatal(err)
	}
	heal(t, n)
	reaches(t, n, "a", "b")
	// After Heal a new Loss starts from nothing.
	if err := n.Loss("b", 0); err != nil {
		t.Fatal(err)
	}
	for _, p := range []float64{-0.1, 1.5} {
		if err := n.Loss("a", p); !errors.Is(err, ErrInvalid) {
			t.Errorf("Loss(a, %v) = %v, want ErrInvalid", p, err)
		}
	}
	if err := n.Loss(Root, 0.5); !errors.Is(err, ErrInvalid) {
		t.Errorf("Loss(Root) = %v, want ErrInvalid", err)
	}
}

func TestDelay(t *testing.T) {
	const d = 200 * time.Millisecond
	n := newNet(t, "d", "a", "b")
	startServers(t, n, "b")
	reaches(t, n, "a", "b")
	if err := n.Delay("b", d); err != nil {
		t.Fatal(err)
	}
	wantFaults(t, n, "delay b 200ms")

	start := time.Now()
	c, err := dial(n, "a", "b", reachWait)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The SYN waits at b.
	if took := time.Since(start); took < d {
		t.Fatalf("connect took %v, want at least %v", took, d)
	}
	start = time.Now()
	if err := echo(c, []byte("ping\n"), reachWait); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < d {
		t.Fatalf("echo took %v, want at least %v", took, d)
	}
	// Bulk data keeps its bytes and their order.
	bulk := make([]byte, 4<<20)
	for i := range bulk {
		bulk[i] = byte(i * 7 / 5)
	}
	if err := echoBulk(c, bulk, reachWait*3); err != nil {
		t.Fatal(err)
	}

	if err := n.Delay("b", d/2); err != nil {
		t.Fatal(err)
	}
	wantFaults(t, n, "delay b 100ms")
	if err := n.Delay("b", 0); err != nil {
		t.Fatal(err)
	}
	wantFaults(t, n)
	if err := echo(c, []byte("after\n"), reachWait); err != nil {
		t.Fatal(err)
	}

	if err := n.Delay("b", d); err != nil {
		t.Fatal(err)
	}
	heal(t, n)
	reaches(t, n, "a", "b")
	if err := n.Delay("a", -time.Second); !errors.Is(err, ErrInvalid) {
		t.Errorf("Delay(a, -1s) = %v, want ErrInvalid", err)
	}
}

// ip netns exec execs the program in place of itself: the PID Start
// returns is the program's, in the host's namespace, and signals sent to it
// reach the program.
func TestCommand(t *testing.T) {
	n := newNet(t, "x", "a")
	ip, _ := n.IP("a")
	out, err := n.Command("a", "ip", "-4", "-o", "addr", "show").Output()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), " "+ip+"/24 ") || strings.Count(string(out), "inet ") != 2 {
		t.Fatalf("addresses inside host a:\n%s", out)
	}

	cmd := n.Command("a", "sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	sleep, err := exec.LookPath("sleep")
	if err == nil {
		sleep, err = filepath.EvalSymlinks(sleep)
	}
	if err != nil {
		t.Fatal(err)
	}
	// Until the exec, the process is ip.
	waitFor(t, func() (bool, string) {
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		return exe == sleep, "exe " + exe
	})
	procNet, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pid))
	if err != nil {
		t.Fatal(err)
	}
	var hostNet string
	if err := n.Do("a", func() error {
		var err error
		hostNet, err = os.Readlink("/proc/thread-self/ns/net")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	selfNet, _ := os.Readlink("/proc/self/ns/net")
	if procNet != hostNet || procNet == selfNet {
		t.Fatalf("process in %s, host a is %s, the test in %s", procNet, hostNet, selfNet)
	}

	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() (bool, string) {
		st := procState(pid)
		return st == "T", "state " + st
	})
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ProcessState.String() != "signal: killed" {
		t.Fatalf("Wait() = %v, want signal: killed", err)
	}

	if err := n.Command("nobody", "true").Run(); !errors.Is(err, ErrUnknownHost) {
		t.Fatalf("Command(nobody).Run() = %v, want ErrUnknownHost", err)
	}
	if err := n.Command(Root, "true").Run(); err != nil {
		t.Fatalf("Command(Root).Run() = %v", err)
	}
}

func TestCloseLeavesNothing(t *testing.T) {
	requireNetns(t)
	name := testNetName("z")
	if err := Cleanup(name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = Cleanup(name) })
	n, err := New(name)
	if err != nil {
		t.Fatal(err)
	}
	other := newNet(t, "zz")
	if a, b := mustIP(t, n, Root), mustIP(t, other, Root); a == b {
		t.Fatalf("two networks share the address %s", a)
	}
	for _, h := range []string{"a", "b", "c"} {
		if _, err := n.AddHost(h); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := n.AddHost("a"); !errors.Is(err, ErrExists) {
		t.Fatalf("AddHost(a) again = %v, want ErrExists", err)
	}
	if err := n.Cut("a", "b"); err != nil {
		t.Fatal(err)
	}
	if err := n.Delay("c", time.Second); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	assertGone(t, name)
	if err := n.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := n.AddHost("d"); !errors.Is(err, ErrClosed) {
		t.Errorf("AddHost after Close = %v, want ErrClosed", err)
	}
	if err := n.Cut("a", "b"); !errors.Is(err, ErrClosed) {
		t.Errorf("Cut after Close = %v, want ErrClosed", err)
	}
	if err := n.Heal(); !errors.Is(err, ErrClosed) {
		t.Errorf("Heal after Close = %v, want ErrClosed", err)
	}
}

// A run that dies leaves its network behind; New refuses the name until
// Cleanup has removed it.
func TestCleanupAfterCrash(t *testing.T) {
	requireNetns(t)
	name := testNetName("y")
	if err := Cleanup(name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = Cleanup(name) })
	crashed, err := New(name)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"a", "b"} {
		if _, err := crashed.AddHost(h); err != nil {
			t.Fatal(err)
		}
	}
	if err := crashed.Isolate("a"); err != nil {
		t.Fatal(err)
	}
	// A process still running in a namespace (a node its runner lost
	// track of) would keep it alive after its name is gone: Cleanup kills
	// it.
	sleeper := crashed.Command("b", "sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- sleeper.Wait() }()
	defer func() {
		_ = sleeper.Process.Kill()
		<-waited
	}()
	if _, err := New(name); !errors.Is(err, ErrExists) {
		t.Fatalf("New over leftovers = %v, want ErrExists", err)
	}
	if err := Cleanup(name); err != nil {
		t.Fatal(err)
	}
	assertGone(t, name)
	select {
	case err := <-waited:
		waited <- err // for the deferred wait
		if err == nil || !strings.Contains(err.Error(), "killed") {
			t.Fatalf("the process left in a namespace ended with %v, want killed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Cleanup left a process of the network's namespace running")
	}
	n, err := New(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	assertGone(t, name)
}

func TestInvalidNames(t *testing.T) {
	for _, name := range []string{"", "Sc1", "1sc", "sc-1", "abcdefghijk"} {
		if _, err := New(name); !errors.Is(err, ErrInvalid) {
			t.Errorf("New(%q) = %v, want ErrInvalid", name, err)
		}
		if err := Cleanup(name); !errors.Is(err, ErrInvalid) {
			t.Errorf("Cleanup(%q) = %v, want ErrInvalid", name, err)
		}
	}
	n := newNet(t, "v", "a")
	for _, h := range []string{"", Root, "a b", "-a", strings.Repeat("h", 33)} {
		if _, err := n.AddHost(h); !errors.Is(err, ErrInvalid) {
			t.Errorf("AddHost(%q) = %v, want ErrInvalid", h, err)
		}
	}
	if err := n.Cut("a", "a"); !errors.Is(err, ErrInvalid) {
		t.Errorf("Cut(a, a) = %v, want ErrInvalid", err)
	}
	if err := n.Cut("a", "x"); !errors.Is(err, ErrUnknownHost) {
		t.Errorf("Cut(a, x) = %v, want ErrUnknownHost", err)
	}
	if err := n.Isolate(Root); !errors.Is(err, ErrInvalid) {
		t.Errorf("Isolate(Root) = %v, want ErrInvalid", err)
	}
	wantFaults(t, n)
}
