package netfault

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Errors. Every method wraps one of these with %w; match with errors.Is.
var (
	// ErrInvalid is returned for a malformed network or host name, a host
	// named twice in one fault, an empty or overlapping Split side, a loss
	// probability outside [0, 1], a negative delay, and Loss, Delay or
	// Isolate of Root.
	ErrInvalid = errors.New("netfault: invalid argument")
	// ErrExists is returned by New when a bridge or namespace of that name
	// is already there (a live network, or leftovers of a crashed run: see
	// Cleanup), and by AddHost for a host added before.
	ErrExists = errors.New("netfault: already exists")
	// ErrUnknownHost is returned for a host that AddHost did not add.
	ErrUnknownHost = errors.New("netfault: unknown host")
	// ErrNoSubnet is returned by New when every /24 of 10.0.0.0/8 is in
	// use, and by AddHost when the subnet has no address left.
	ErrNoSubnet = errors.New("netfault: no free addresses")
	// ErrClosed is returned, once Close has been called, by every method
	// that returns an error except Close.
	ErrClosed = errors.New("netfault: closed")
)

// Root names the root network namespace wherever a host name is expected:
// the test and its clients, which reach the hosts from the bridge's
// address. AddHost refuses it.
const Root = "root"

// maxOctet is the last host address of the /24: .255 is the broadcast.
const maxOctet = 254

var (
	netName  = regexp.MustCompile(`^[a-z][a-z0-9]{0,9}$`)
	hostName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,31}$`)
)

// lockPath is the file New locks while it picks a subnet and claims it, so
// two networks created at the same moment do not take the same one.
const lockPath = "/run/strata-netfault.lock"

// Net is one emulated network: a bridge in the root namespace and a network
// namespace per host linked to it. Its methods are safe for concurrent use;
// changes (AddHost, the faults, Heal, Close) take effect one at a time.
type Net struct {
	name   string
	bridge string
	subnet netip.Prefix
	rootIP netip.Addr

	// ops serializes changes. A change holds it across the commands it
	// runs, so two changes never interleave their rules and the fault list
	// always follows the rule set. The loss and delay fields of every host
	// are guarded by ops.
	ops sync.Mutex

	mu struct {
		sync.Mutex
		closed    bool
		hosts     map[string]*host
		order     []string // host names in the order they were added
		nextOctet int
		faults    []fault
	}
}

// host is one network namespace.
type host struct {
	name  string
	netns string
	veth  string // the root namespace's end of the link to the bridge
	ip    netip.Addr

	loss  float64  // the probability of the current Loss; 0 when none
	delay *delayer // the current Delay; nil when none
}

// fault is one entry of Faults. Loss and Delay are keyed by their host so
// that a new value replaces the old; the other faults add up and have no
// key.
type fault struct {
	key  string
	text string
}

// New creates the network name: a Linux bridge name-br in the root
// namespace with the address .1 of a free /24 in 10.0.0.0/8, and two
// FORWARD rules that let traffic in and out of the bridge. No global
// setting (ip_forward, bridge-nf-call-iptables) is changed.
//
// name is 1 to 10 lowercase letters and digits, starting with a letter;
// every namespace and link of the network begins with name and a dash,
// which is how Cleanup finds them. New fails with ErrExists while leftovers
// of a network of that name remain.
func New(name string) (*Net, error) {
	if !netName.MatchString(name) {
		return nil, fmt.Errorf("%w: network name %q (want 1-10 of [a-z0-9], a letter first)", ErrInvalid, name)
	}
	lock, err := os.OpenFile(lockPath, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("netfault: %w", err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return nil, fmt.Errorf("netfault: lock %s: %w", lockPath, err)
	}
	// The lock is released when lock is closed.

	if left, err := leftovers(name); err != nil {
		return nil, err
	} else if len(left) > 0 {
		return nil, fmt.Errorf("%w: %s (Cleanup(%q) removes them)", ErrExists, strings.Join(left, ", "), name)
	}
	routes, err := run("", "ip", "-4", "route", "show", "table", "all")
	if err != nil {
		return nil, err
	}
	addrs, err := run("", "ip", "-4", "-o", "addr", "show")
	if err != nil {
		return nil, err
	}
	subnet, ok := pickSubnet(append(parseRoutes(routes), parseAddrs(addrs)...), subnetStart(name))
	if !ok {
		return nil, fmt.Errorf("%w: no /24 of 10.0.0.0/8 is free", ErrNoSubnet)
	}
	n := &Net{
		name:   name,
		bridge: name + "-br",
		subnet: subnet,
		rootIP: hostAddr(subnet, 1),
	}
	n.mu.hosts = make(map[string]*host)
	n.mu.nextOctet = 2

	steps := [][]string{
		{"ip", "link", "add", n.bridge, "type", "bridge"},
		{"ip", "addr", "add", netip.PrefixFrom(n.rootIP, 24).String(), "dev", n.bridge},
		{"ip", "link", "set", n.bridge, "up"},
	}
	for _, spec := range forwardRules(name) {
		steps = append(steps, append([]string{"iptables", "-w", "-I", "FORWARD", "1"}, spec...))
	}
	for _, s := range steps {
		if _, err := run("", s[0], s[1:]...); err != nil {
			return nil, errors.Join(err, Cleanup(name))
		}
	}
	return n, nil
}

// forwardRules are the rules New puts first in the root namespace's FORWARD
// chain: with br_netfilter loaded, frames crossing the bridge from one host
// to another go through FORWARD, whose policy may be DROP (Docker sets it
// so). The comment ties them to the network for Cleanup.
func forwardRules(name string) [][]string {
	comment := []string{"-m", "comment", "--comment", "strata-netfault:" + name, "-j", "ACCEPT"}
	return [][]string{
		append([]string{"-i", name + "-br"}, comment...),
		append([]string{"-o", name + "-br"}, comment...),
	}
}

// AddHost adds the host name: a namespace <network>-<name> with its
// loopback up and a veth to the bridge, eth0 inside, with the next free
// address of the subnet (.2, .3, ...), which it returns. The namespace has
// no default route: it reaches the other hosts and the root namespace (the
// bridge's address), nothing else. name is 1 to 32 of [A-Za-z0-9_.-],
// starting with a letter or digit, and not Root.
func (n *Net) AddHost(name string) (ip string, err error) {
	if !hostName.MatchString(name) || name == Root {
		return "", fmt.Errorf("%w: host name %q", ErrInvalid, name)
	}
	n.ops.Lock()
	defer n.ops.Unlock()
	n.mu.Lock()
	closed, exists, octet := n.mu.closed, n.mu.hosts[name] != nil, n.mu.nextOctet
	n.mu.Unlock()
	switch {
	case closed:
		return "", ErrClosed
	case exists:
		return "", fmt.Errorf("%w: host %s", ErrExists, name)
	case octet > maxOctet:
		return "", fmt.Errorf("%w: subnet %s is full", ErrNoSubnet, n.subnet)
	}
	h := &host{
		name:  name,
		netns: n.name + "-" + name,
		veth:  n.name + "-v" + strconv.Itoa(octet),
		ip:    hostAddr(n.subnet, octet),
	}
	steps := [][]string{
		{"ip", "netns", "add", h.netns},
		{"ip", "link", "add", h.veth, "type", "veth", "peer", "name", hostIface, "netns", h.netns},
		{"ip", "link", "set", h.veth, "master", n.bridge, "up"},
		{"ip", "-n", h.netns, "addr", "add", netip.PrefixFrom(h.ip, 24).String(), "dev", hostIface},
		{"ip", "-n", h.netns, "link", "set", "lo", "up"},
		{"ip", "-n", h.netns, "link", "set", hostIface, "up"},
	}
	for _, s := range steps {
		if _, err := run("", s[0], s[1:]...); err != nil {
			return "", errors.Join(err, removeHost(h))
		}
	}
	if err := iptablesRestore(h.netns, chainSetup); err != nil {
		return "", errors.Join(err, removeHost(h))
	}
	n.mu.Lock()
	n.mu.hosts[name] = h
	n.mu.order = append(n.mu.order, name)
	n.mu.nextOctet++
	n.mu.Unlock()
	return h.ip.String(), nil
}

// removeHost undoes a half-made AddHost.
func removeHost(h *host) error {
	var errs []error
	if _, err := run("", "ip", "link", "del", h.veth); err != nil && !isNoDevice(err) {
		errs = append(errs, err)
	}
	if _, err := run("", "ip", "netns", "del", h.netns); err != nil && !strings.Contains(err.Error(), "No such file") {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// IP returns the address of host; IP(Root) is the bridge's address, the
// source of every connection the root namespace makes to a host.
func (n *Net) IP(host string) (string, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	ep, err := n.endpointLocked(host)
	if err != nil {
		return "", err
	}
	return ep.ip.String(), nil
}

// Hosts returns the hosts in the order they were added.
func (n *Net) Hosts() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.mu.order...)
}

// Command returns a command that runs bin with args inside host's network
// namespace, through `ip netns exec NS bin args...`. ip execs bin in place
// of itself, so once started the process's PID is bin's own, and SIGKILL
// or SIGSTOP sent to cmd.Process reach bin. Only the network (and, as ip
// netns exec does, a private mount namespace with /sys remounted) differs
// from the caller's; the file system, user and environment are shared.
// Command(Root, ...) runs bin in the root namespace. For an unknown host or
// a closed Net, cmd.Err is set and Start returns it.
func (n *Net) Command(host string, bin string, args ...string) *exec.Cmd {
	n.mu.Lock()
	ep, err := n.endpointLocked(host)
	var netns string
	if err == nil && !ep.root {
		netns = n.mu.hosts[host].netns
	}
	n.mu.Unlock()
	if err == nil && ep.root {
		return exec.Command(bin, args...)
	}
	cmd := exec.Command("ip", append([]string{"netns", "exec", netns, bin}, args...)...)
	if err != nil {
		cmd.Err = err
	}
	return cmd
}

// Do calls fn on an OS thread that has joined host's network namespace, and
// returns its error. Sockets fn opens belong to the namespace for their
// whole life, so a listener or connection made in fn can be used anywhere
// afterwards; goroutines fn starts do not run in the namespace. Do(Root,
// fn) calls fn directly.
func (n *Net) Do(host string, fn func() error) error {
	n.mu.Lock()
	ep, err := n.endpointLocked(host)
	var netns string
	if err == nil && !ep.root {
		netns = n.mu.hosts[host].netns
	}
	n.mu.Unlock()
	if err != nil {
		return err
	}
	if ep.root {
		return fn()
	}
	target, err := os.Open("/run/netns/" + netns)
	if err != nil {
		return fmt.Errorf("netfault: %w", err)
	}
	defer target.Close()
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		self, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("netfault: %w", err)
			return
		}
		defer self.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("netfault: setns %s: %w", netns, err)
			return
		}
		fnErr := fn()
		if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
			// The thread stays locked, so the runtime ends it with this
			// goroutine instead of reusing it in the wrong namespace.
			done <- errors.Join(fnErr, fmt.Errorf("netfault: setns back: %w", err))
			return
		}
		runtime.UnlockOSThread()
		done <- fnErr
	}()
	return <-done
}

// endpointLocked returns the endpoint named name.
// REQUIRES: n.mu held.
func (n *Net) endpointLocked(name string) (endpoint, error) {
	if n.mu.closed {
		return endpoint{}, ErrClosed
	}
	if name == Root {
		return endpoint{name: Root, ip: n.rootIP, root: true}, nil
	}
	h := n.mu.hosts[name]
	if h == nil {
		return endpoint{}, fmt.Errorf("%w: %q", ErrUnknownHost, name)
	}
	return endpoint{name: name, ip: h.ip}, nil
}

// Close stops the delays, deletes the namespaces, the veths, the bridge and
// the FORWARD rules. Processes still running in a namespace keep it alive,
// but with no link: stop them first. Close may be called again, which
// retries whatever failed to be removed the first time.
func (n *Net) Close() error {
	n.ops.Lock()
	defer n.ops.Unlock()
	n.mu.Lock()
	n.mu.closed = true
	hosts := n.mu.hosts
	n.mu.faults = nil
	n.mu.Unlock()
	var errs []error
	for _, h := range hosts {
		if h.delay != nil {
			errs = append(errs, h.delay.close())
			h.delay = nil
		}
	}
	errs = append(errs, Cleanup(n.name))
	return errors.Join(errs...)
}

// Cleanup removes everything a network called name may have left behind,
// for instance after its process was killed: the namespaces and links whose
// names begin with name and a dash, and its FORWARD rules. It must not be
// called while a network of that name is in use elsewhere.
func Cleanup(name string) error {
	if !netName.MatchString(name) {
		return fmt.Errorf("%w: network name %q", ErrInvalid, name)
	}
	var errs []error
	prefix := name + "-"
	// Links first: deleting a veth takes its peer with it at once, while a
	// deleted namespace frees its devices later, in the background.
	out, err := run("", "ip", "-o", "link", "show")
	if err != nil {
		return err
	}
	for _, link := range parseLinks(out) {
		if strings.HasPrefix(link, prefix) {
			if _, err := run("", "ip", "link", "del", link); err != nil && !isNoDevice(err) {
				errs = append(errs, err)
			}
		}
	}
	out, err = run("", "ip", "netns", "list")
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, ns := range parseNetnsList(out) {
		if !strings.HasPrefix(ns, prefix) {
			continue
		}
		// A process left in the namespace (a node its runner lost track
		// of) would keep running, its ports and files held, once the
		// namespace is gone from the list.
		if err := killAll(ns); err != nil {
			errs = append(errs, err)
		}
		if _, err := run("", "ip", "netns", "del", ns); err != nil {
			errs = append(errs, err)
		}
	}
	for _, spec := range forwardRules(name) {
		// Delete every copy: a crashed New may have inserted a rule twice.
		for range 16 {
			if _, err := run("", "iptables", append([]string{"-w", "-C", "FORWARD"}, spec...)...); err != nil {
				break
			}
			if _, err := run("", "iptables", append([]string{"-w", "-D", "FORWARD"}, spec...)...); err != nil {
				errs = append(errs, err)
				break
			}
		}
	}
	return errors.Join(errs...)
}

// killAll sends SIGKILL to every process in namespace ns and waits up to
// 10 s for them to be gone.
func killAll(ns string) error {
	pids := func() ([]int, error) {
		out, err := run("", "ip", "netns", "pids", ns)
		if err != nil {
			return nil, err
		}
		var found []int
		for _, f := range strings.Fields(out) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
				found = append(found, pid)
			}
		}
		return found, nil
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		found, err := pids()
		if err != nil || len(found) == 0 {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("netfault: processes %v of namespace %s outlived SIGKILL", found, ns)
		}
		for _, pid := range found {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// leftovers returns the namespaces and links of network name that exist.
func leftovers(name string) ([]string, error) {
	prefix := name + "-"
	var found []string
	out, err := run("", "ip", "netns", "list")
	if err != nil {
		return nil, err
	}
	for _, ns := range parseNetnsList(out) {
		if strings.HasPrefix(ns, prefix) {
			found = append(found, "namespace "+ns)
		}
	}
	out, err = run("", "ip", "-o", "link", "show")
	if err != nil {
		return nil, err
	}
	for _, link := range parseLinks(out) {
		if strings.HasPrefix(link, prefix) {
			found = append(found, "link "+link)
		}
	}
	return found, nil
}

// parseNetnsList returns the names in the output of `ip netns list`
// ("name" or "name (id: 3)" per line).
func parseNetnsList(out string) []string {
	var names []string
	for line := range strings.Lines(out) {
		if f := strings.Fields(line); len(f) > 0 {
			names = append(names, f[0])
		}
	}
	return names
}

// parseLinks returns the link names in the output of `ip -o link show`
// ("7: name@if2: <...> ..." per line).
func parseLinks(out string) []string {
	var names []string
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
		names = append(names, name)
	}
	return names
}
