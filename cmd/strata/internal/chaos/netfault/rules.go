package netfault

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// The chains every host's namespace gets, in its filter table. INPUT jumps
// to chainIn and then chainDelay, OUTPUT to chainOut; faults only ever add
// rules to these chains, so flushing them heals a host. Delay has a chain of
// its own after chainIn because NFQUEUE's verdict ends the packet's walk
// through INPUT: a drop rule behind it would never be reached.
const (
	chainIn    = "NETFAULT-IN"
	chainOut   = "NETFAULT-OUT"
	chainDelay = "NETFAULT-DELAY"
)

// hostIface is the name of a host's link to the bridge inside its
// namespace; lo is the only other interface there.
const hostIface = "eth0"

// delayQueue is the NFQUEUE number Delay uses. Queue numbers are per
// network namespace, so every host can use the same one.
const delayQueue = 0

// chainSetup creates the chains in a new host's namespace and hooks them up.
const chainSetup = "*filter\n" +
	":" + chainIn + " - [0:0]\n" +
	":" + chainOut + " - [0:0]\n" +
	":" + chainDelay + " - [0:0]\n" +
	"-A INPUT -j " + chainIn + "\n" +
	"-A INPUT -j " + chainDelay + "\n" +
	"-A OUTPUT -j " + chainOut + "\n" +
	"COMMIT\n"

// chainFlush removes every fault rule from a host's namespace.
const chainFlush = "*filter\n" +
	"-F " + chainIn + "\n" +
	"-F " + chainOut + "\n" +
	"-F " + chainDelay + "\n" +
	"COMMIT\n"

// endpoint is one end of a link: a host, or the root namespace.
type endpoint struct {
	name string
	ip   netip.Addr
	root bool
}

// rule is one iptables rule in one host's namespace: spec is the rule as
// iptables prints it after -A, chain first.
type rule struct {
	host string
	spec string
}

// blockRules returns the rules that drop every packet from from to to.
//
// A packet between two hosts is dropped where it arrives (INPUT of to), so
// the sender's send succeeds and the packet is lost on the way, as in a
// real partition. The root namespace is not the package's to change, so a
// packet to it is dropped where it leaves its host (OUTPUT), which local
// UDP and ICMP senders see as EPERM; TCP retransmits as if it were lost.
func blockRules(from, to endpoint) []rule {
	if to.root {
		return []rule{{host: from.name, spec: chainOut + " -d " + to.ip.String() + " -j DROP"}}
	}
	return []rule{{host: to.name, spec: chainIn + " -s " + from.ip.String() + " -j DROP"}}
}

// cutRules returns the rules that drop every packet between a and b.
func cutRules(a, b endpoint) []rule {
	return append(blockRules(a, b), blockRules(b, a)...)
}

// isolateRules returns the rules that drop every packet into and out of
// host h except on its loopback, whoever the peer is, including hosts
// added later and the root namespace.
func isolateRules(h string) []rule {
	return []rule{
		{host: h, spec: chainIn + " -i " + hostIface + " -j DROP"},
		{host: h, spec: chainOut + " -o " + hostIface + " -j DROP"},
	}
}

// lossRules returns the rules that drop each packet into or out of host h,
// except on its loopback, with probability p, each packet drawn
// independently.
func lossRules(h string, p float64) []rule {
	stat := " -m statistic --mode random --probability " + strconv.FormatFloat(p, 'f', -1, 64) + " -j DROP"
	return []rule{
		{host: h, spec: chainIn + " -i " + hostIface + stat},
		{host: h, spec: chainOut + " -o " + hostIface + stat},
	}
}

// delayRules returns the rule that hands every packet arriving at host h
// to the delay queue. --queue-bypass lets packets through when no program
// listens on the queue, so a delayer that died cannot become a cut.
func delayRules(h string) []rule {
	return []rule{{host: h, spec: fmt.Sprintf("%s -i %s -j NFQUEUE --queue-num %d --queue-bypass", chainDelay, hostIface, delayQueue)}}
}

// splitRules returns the rules that cut every pair across sideA and sideB.
func splitRules(sideA, sideB []endpoint) []rule {
	var rules []rule
	for _, a := range sideA {
		for _, b := range sideB {
			rules = append(rules, cutRules(a, b)...)
		}
	}
	return rules
}

// restoreScripts groups rules by host, keeping their order, into one
// iptables-restore script per host that adds them (op "-A") or deletes them
// (op "-D"). hosts lists the hosts in the order of their first rule.
func restoreScripts(rules []rule, op string) (hosts []string, scripts map[string]string) {
	scripts = make(map[string]string)
	for _, r := range rules {
		if _, ok := scripts[r.host]; !ok {
			hosts = append(hosts, r.host)
			scripts[r.host] = "*filter\n"
		}
		scripts[r.host] += op + " " + r.spec + "\n"
	}
	for h := range scripts {
		scripts[h] += "COMMIT\n"
	}
	return hosts, scripts
}

// describeSplit is Faults' text for a split.
func describeSplit(sideA, sideB []string) string {
	return "split [" + strings.Join(sideA, " ") + "] | [" + strings.Join(sideB, " ") + "]"
}
