package netfault

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"
)

// Cut drops every packet between a and b, both ways. Either may be Root.
func (n *Net) Cut(a, b string) error {
	return n.addFault(func() (string, []rule, error) {
		ea, eb, err := n.pair(a, b)
		if err != nil {
			return "", nil, err
		}
		return fmt.Sprintf("cut %s<->%s", a, b), cutRules(ea, eb), nil
	})
}

// CutOneWay drops every packet from from to to; packets from to to from
// are still delivered. Either may be Root. Over TCP a one-way cut stops
// connecting both ways: a SYN from to arrives, but the SYN-ACK is dropped.
// An established connection stops moving data in both directions too, as
// the ACKs of one direction travel with the data of the other.
func (n *Net) CutOneWay(from, to string) error {
	return n.addFault(func() (string, []rule, error) {
		ef, et, err := n.pair(from, to)
		if err != nil {
			return "", nil, err
		}
		return fmt.Sprintf("cut %s->%s", from, to), blockRules(ef, et), nil
	})
}

// CutClients drops every packet between host and the root namespace (the
// test's clients); the other hosts still reach host. It is Cut(host, Root).
func (n *Net) CutClients(host string) error {
	return n.Cut(host, Root)
}

// Isolate drops every packet into or out of host, whoever the peer: the
// other hosts, hosts added later and the root namespace. Its loopback still
// works.
func (n *Net) Isolate(host string) error {
	return n.addFault(func() (string, []rule, error) {
		if _, err := n.host(host); err != nil {
			return "", nil, err
		}
		return "isolate " + host, isolateRules(host), nil
	})
}

// Split cuts every pair of hosts across sideA and sideB; hosts on the same
// side, and hosts on neither side, still reach everyone. Root may be on
// either side. A host on neither side that reaches both makes the bridge
// shape of a partition.
func (n *Net) Split(sideA, sideB []string) error {
	return n.addFault(func() (string, []rule, error) {
		if len(sideA) == 0 || len(sideB) == 0 {
			return "", nil, fmt.Errorf("%w: split with an empty side", ErrInvalid)
		}
		seen := make(map[string]bool)
		n.mu.Lock()
		defer n.mu.Unlock()
		endpoints := func(side []string) ([]endpoint, error) {
			var eps []endpoint
			for _, h := range side {
				if seen[h] {
					return nil, fmt.Errorf("%w: %s twice in a split", ErrInvalid, h)
				}
				seen[h] = true
				ep, err := n.endpointLocked(h)
				if err != nil {
					return nil, err
				}
				eps = append(eps, ep)
			}
			return eps, nil
		}
		a, err := endpoints(sideA)
		if err != nil {
			return "", nil, err
		}
		b, err := endpoints(sideB)
		if err != nil {
			return "", nil, err
		}
		return describeSplit(sideA, sideB), splitRules(a, b), nil
	})
}

// pair returns the endpoints named a and b, which must differ.
func (n *Net) pair(a, b string) (endpoint, endpoint, error) {
	if a == b {
		return endpoint{}, endpoint{}, fmt.Errorf("%w: %s with itself", ErrInvalid, a)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	ea, err := n.endpointLocked(a)
	if err != nil {
		return endpoint{}, endpoint{}, err
	}
	eb, err := n.endpointLocked(b)
	if err != nil {
		return endpoint{}, endpoint{}, err
	}
	return ea, eb, nil
}

// addFault plans a fault, applies its rules and records it. When applying
// fails part way, the rules of some namespaces may be in place; the fault
// is recorded as partly applied, and Heal removes it like any other.
func (n *Net) addFault(plan func() (string, []rule, error)) error {
	n.ops.Lock()
	defer n.ops.Unlock()
	text, rules, err := plan()
	if err != nil {
		return err
	}
	err = n.applyRules(rules, "-A")
	if err != nil {
		text += " (partly applied)"
	}
	n.mu.Lock()
	n.mu.faults = append(n.mu.faults, fault{text: text})
	n.mu.Unlock()
	return err
}

// applyRules adds (op "-A") or deletes (op "-D") rules, one atomic
// iptables-restore per namespace.
// REQUIRES: n.ops held.
func (n *Net) applyRules(rules []rule, op string) error {
	hosts, scripts := restoreScripts(rules, op)
	for _, h := range hosts {
		netns, err := n.Namespace(h)
		if err != nil {
			return err
		}
		if err := iptablesRestore(netns, scripts[h]); err != nil {
			return err
		}
	}
	return nil
}

// Namespace returns the name of host's network namespace, for programs
// started other than by Command (`ip netns exec NAME ...`).
func (n *Net) Namespace(host string) (string, error) {
	h, err := n.host(host)
	if err != nil {
		return "", err
	}
	return h.netns, nil
}

// host returns the host named name, which may not be Root.
func (n *Net) host(name string) (*host, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if name == Root {
		return nil, fmt.Errorf("%w: the root namespace is not a host", ErrInvalid)
	}
	if _, err := n.endpointLocked(name); err != nil {
		return nil, err
	}
	return n.mu.hosts[name], nil
}

// Loss drops each packet into or out of host (not on its loopback) with
// probability p, in [0, 1], each packet drawn independently: a round trip
// to a peer without loss fails with probability 1-(1-p)², and a packet
// between two lossy hosts is drawn twice. A later Loss of the same host
// replaces this one; Loss(host, 0) removes it.
func (n *Net) Loss(host string, p float64) error {
	if math.IsNaN(p) || p < 0 || p > 1 {
		return fmt.Errorf("%w: loss probability %v", ErrInvalid, p)
	}
	n.ops.Lock()
	defer n.ops.Unlock()
	h, err := n.host(host)
	if err != nil {
		return err
	}
	if h.loss > 0 {
		if err := n.applyRules(lossRules(host, h.loss), "-D"); err != nil {
			return err
		}
		h.loss = 0
		n.setFault("loss/"+host, "")
	}
	if p == 0 {
		return nil
	}
	if err := n.applyRules(lossRules(host, p), "-A"); err != nil {
		return err
	}
	h.loss = p
	n.setFault("loss/"+host, "loss "+host+" p="+strconv.FormatFloat(p, 'g', -1, 64))
	return nil
}

// Delay holds every packet arriving at host (not on its loopback) for d
// before the host receives it, in arrival order, so a round trip between
// host and any peer takes d longer, and 2d between two delayed hosts. A
// later Delay of the same host replaces this one; Delay(host, 0) removes
// it. The packets wait in the kernel's NFQUEUE for a goroutine of this
// package to let them through; at most 1024 wait at once per host, and
// packets beyond that are dropped, as a full router queue would.
func (n *Net) Delay(host string, d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("%w: delay %v", ErrInvalid, d)
	}
	n.ops.Lock()
	defer n.ops.Unlock()
	h, err := n.host(host)
	if err != nil {
		return err
	}
	key := "delay/" + host
	switch {
	case d == 0 && h.delay == nil:
		return nil
	case d == 0:
		err := n.applyRules(delayRules(host), "-D")
		err = errors.Join(err, h.delay.close())
		h.delay = nil
		n.setFault(key, "")
		return err
	case h.delay != nil:
		h.delay.setDelay(d)
		n.setFault(key, "delay "+host+" "+d.String())
		return nil
	}
	var dl *delayer
	if err := n.Do(host, func() error {
		var err error
		dl, err = newDelayer(delayQueue, d)
		return err
	}); err != nil {
		return err
	}
	if err := n.applyRules(delayRules(host), "-A"); err != nil {
		return errors.Join(err, dl.close())
	}
	h.delay = dl
	n.setFault(key, "delay "+host+" "+d.String())
	return nil
}

// setFault replaces the fault with key by one with text, or removes it
// when text is empty.
func (n *Net) setFault(key, text string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	i := slices.IndexFunc(n.mu.faults, func(f fault) bool { return f.key == key })
	switch {
	case i >= 0 && text == "":
		n.mu.faults = slices.Delete(n.mu.faults, i, i+1)
	case i >= 0:
		n.mu.faults[i].text = text
	case text != "":
		n.mu.faults = append(n.mu.faults, fault{key: key, text: text})
	}
}

// Heal removes every fault: it flushes the fault chains of every host and
// stops the delays. Connections that survived the faults carry on (TCP
// retransmits what was dropped); the namespaces and addresses stay.
func (n *Net) Heal() error {
	n.ops.Lock()
	defer n.ops.Unlock()
	n.mu.Lock()
	if n.mu.closed {
		n.mu.Unlock()
		return ErrClosed
	}
	var hosts []*host
	for _, name := range n.mu.order {
		hosts = append(hosts, n.mu.hosts[name])
	}
	n.mu.faults = nil
	n.mu.Unlock()
	var errs []error
	for _, h := range hosts {
		errs = append(errs, iptablesRestore(h.netns, chainFlush))
		h.loss = 0
		if h.delay != nil {
			errs = append(errs, h.delay.close())
			h.delay = nil
		}
	}
	return errors.Join(errs...)
}

// Faults describes the faults in place, oldest first, for logs: "cut
// a<->b", "cut a->b", "isolate a", "split [a b] | [c d]", "loss a p=0.3",
// "delay a 200ms". Root is written "root".
func (n *Net) Faults() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	texts := make([]string, len(n.mu.faults))
	for i, f := range n.mu.faults {
		texts[i] = f.text
	}
	return texts
}
