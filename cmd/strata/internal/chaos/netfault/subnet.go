package netfault

import (
	"hash/fnv"
	"net/netip"
	"strings"
)

// routeTypes are the words `ip route` may print before a route's
// destination.
var routeTypes = map[string]bool{
	"unicast": true, "local": true, "broadcast": true, "multicast": true,
	"anycast": true, "blackhole": true, "unreachable": true,
	"prohibit": true, "throw": true, "nat": true,
}

// parseRoutes returns the destinations of the routes in the output of
// `ip -4 route show table all`, except the default route, which overlaps
// everything and says nothing about which addresses are taken.
func parseRoutes(out string) []netip.Prefix {
	var prefixes []netip.Prefix
	for line := range strings.Lines(out) {
		fields := strings.Fields(line)
		if len(fields) > 1 && routeTypes[fields[0]] {
			fields = fields[1:]
		}
		if len(fields) == 0 || fields[0] == "default" {
			continue
		}
		if p, ok := parsePrefix(fields[0]); ok {
			prefixes = append(prefixes, p)
		}
	}
	return prefixes
}

// parseAddrs returns the subnets of the addresses in the output of
// `ip -4 -o addr show`.
func parseAddrs(out string) []netip.Prefix {
	var prefixes []netip.Prefix
	for line := range strings.Lines(out) {
		fields := strings.Fields(line)
		for i := 0; i+1 < len(fields); i++ {
			if fields[i] != "inet" {
				continue
			}
			if p, ok := parsePrefix(fields[i+1]); ok {
				prefixes = append(prefixes, p.Masked())
			}
			break
		}
	}
	return prefixes
}

// parsePrefix parses "10.1.2.0/24" or a bare address, which stands for
// itself alone.
func parsePrefix(s string) (netip.Prefix, bool) {
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		if err != nil || !a.Is4() {
			return netip.Prefix{}, false
		}
		return netip.PrefixFrom(a, 32), true
	}
	p, err := netip.ParsePrefix(s)
	if err != nil || !p.Addr().Is4() {
		return netip.Prefix{}, false
	}
	return p, true
}

// subnetCount is the number of /24 subnets in 10.0.0.0/8.
const subnetCount = 1 << 16

// subnetStart is where the search for a free subnet begins for a network
// name: the same name usually gets the same subnet, which keeps the
// addresses in the logs of reruns alike, and different names spread out.
func subnetStart(name string) int {
	h := fnv.New32a()
	h.Write([]byte(name))
	return int(h.Sum32() % subnetCount)
}

// pickSubnet returns the first /24 in 10.0.0.0/8, searching from the
// start'th and wrapping around, that overlaps none of used.
func pickSubnet(used []netip.Prefix, start int) (netip.Prefix, bool) {
	for i := range subnetCount {
		k := (start + i) % subnetCount
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(k >> 8), byte(k), 0}), 24)
		free := true
		for _, u := range used {
			if u.Overlaps(p) {
				free = false
				break
			}
		}
		if free {
			return p, true
		}
	}
	return netip.Prefix{}, false
}

// hostAddr returns the address with last octet octet in subnet, a /24.
func hostAddr(subnet netip.Prefix, octet int) netip.Addr {
	b := subnet.Addr().As4()
	b[3] = byte(octet)
	return netip.AddrFrom4(b)
}
