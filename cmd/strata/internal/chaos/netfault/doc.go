// Package netfault gives each process of a chaos test its own network and
// cuts the links between them: every Strata node (metad, bookie, broker,
// MinIO) runs in a Linux network namespace with an address of its own, the
// test and its clients stay in the root namespace, and faults are iptables
// rules inside the namespaces. It needs root, iproute2 and iptables.
//
// # Layout
//
// New(name) makes a network; for name "sc1" and a free subnet 10.A.B.0/24:
//
//	sc1-br           bridge in the root namespace, address 10.A.B.1/24
//	sc1-HOST         network namespace of each host (AddHost)
//	sc1-vN           root namespace's end of the veth of the host at .N
//	eth0             the host's end, inside its namespace, 10.A.B.N/24
//	FORWARD          two rules in the root namespace, -i/-o sc1-br -j ACCEPT,
//	                 commented "strata-netfault:sc1"
//
// Hosts get .2, .3, ... in the order they are added. The subnet is the
// first /24 of 10.0.0.0/8, from a point that depends on the name, that
// overlaps no route and no address of the root namespace; a lock file
// keeps two New calls from claiming the same one. The root namespace is
// .1, Root in this package's calls: connections from the test to a host
// come from .1. A host has lo and eth0, no default route: it reaches the
// other hosts and .1.
//
// # Running programs
//
// Command(host, bin, args...) is `ip netns exec sc1-HOST bin args...`. ip
// execs bin in place of itself, so the PID of the started process is
// bin's: SIGKILL and SIGSTOP sent to it reach the program itself (the
// tests check the PID's executable, its namespace and its stopped state).
// Do(host, fn) runs Go code in a host's namespace, for probes and servers.
//
// # Faults
//
// Each host's filter table has three chains, hooked when it is added:
// INPUT jumps to NETFAULT-IN then NETFAULT-DELAY, OUTPUT to NETFAULT-OUT.
//
//	Cut(a, b)            DROP in each one's NETFAULT-IN, -s the other
//	CutOneWay(f, t)      DROP in t's NETFAULT-IN, -s f
//	CutClients(h)        Cut(h, Root)
//	Split(A, B)          Cut for every pair across A and B
//	Isolate(h)           DROP everything on h's eth0, in and out
//	Loss(h, p)           DROP on h's eth0, in and out, -m statistic --probability p
//	Delay(h, d)          NFQUEUE on h's eth0 in; a goroutine accepts each packet d later
//	Heal()               flush the three chains of every host; stop the delays
//
// A packet to Root cannot be dropped where it arrives, the root namespace
// not being this package's to change, so it is dropped in the sender's
// NETFAULT-OUT.
//
// Delay is built on NFQUEUE because this kernel has no sch_netem (tc netem
// is how delay is usually made). The packets arriving at the host wait in
// the kernel while a goroutine of this process counts down their delay and
// accepts them, oldest first, so order is kept and the delay is fixed: no
// jitter, no reordering, no rate limit, and a cost of a trip to user space
// per packet (fine for a test, not for a benchmark). If this process dies
// the packets flow undelayed (--queue-bypass). Jitter, reordering,
// duplication and rate limits would need sch_netem
// (CONFIG_NET_SCH_NETEM), or a tc BPF program stamping departure times for
// the fq qdisc.
//
// # Invariants
//
//	N1 Everything made in the root namespace is a link named name-... or a
//	   FORWARD rule commented strata-netfault:name, and every namespace is
//	   named name-...; Cleanup(name) finds and removes all of it.
//	N2 Fault rules live only in the hosts' namespaces, in their three
//	   chains; flushing those chains of every host removes every fault.
//	N3 A fault matches the peer's address (10.A.B.N, the root namespace as
//	   .1) or the host's eth0: it is exact per pair of hosts and never
//	   touches a host's loopback.
//	N4 Faults DROP, never REJECT: neither end is told, as in a real
//	   partition. In-flight TCP connections stall, retransmit, and carry on
//	   after Heal if they have not timed out.
//	N5 No global setting changes: ip_forward, bridge-nf-call-iptables and
//	   the FORWARD policy stay as they are; the FORWARD rules let the
//	   bridge's frames through a DROP policy (Docker's).
//	N6 Faults lists exactly the faults in place; one whose rules failed
//	   part way is listed "(partly applied)" until Heal.
//
// # What the runner must know
//
//   - A node must listen on its host's address or 0.0.0.0, and advertise
//     its host's address: 127.0.0.1 inside a namespace is that namespace's
//     own loopback. Each namespace has its own ports, so every node may use
//     the same ones. MinIO is a host like the others.
//   - The test reaches every host directly at its address, from .1, as long
//     as it does not bind another source address.
//   - IPv4 only: the rules are iptables, not ip6tables; the hosts have only
//     IPv6 link-local addresses, which nothing should use.
//   - A packet dropped on its way out of a namespace (to Root, Isolate,
//     Loss) fails a UDP or ICMP send with EPERM; TCP treats it as lost.
//   - Loss applies on the way in and on the way out: a round trip through
//     one lossy host draws twice, and a packet between two lossy hosts
//     twice as well.
//   - Over TCP, CutOneWay stops new connections both ways (the SYN-ACK of
//     the far side's connection is dropped) and stalls established ones;
//     only datagrams show the one-way shape.
//   - Close does not stop processes: kill them first. A process left
//     running keeps its namespace alive, without a link.
//   - A run that crashed leaves its network; New refuses the name
//     (ErrExists) until Cleanup(name) has removed it. Cleanup must not be
//     called for a name in use by a live run.
//   - Rules are added with the iptables on PATH; it must be the backend
//     (nft or legacy) the machine's FORWARD policy lives in.
//   - ip netns exec also gives the program a private mount namespace with
//     /sys remounted for its network; the file system is otherwise shared.
package netfault
