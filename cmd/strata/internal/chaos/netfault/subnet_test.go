package netfault

import (
	"net/netip"
	"slices"
	"testing"
)

const routesOut = `default via 192.0.2.1 dev eth0 
172.17.0.0/16 dev docker0 proto kernel scope link src 172.17.0.1 linkdown 
10.7.0.0/16 via 192.0.2.9 dev eth0 
unreachable 10.9.9.0/24 
local 127.0.0.0/8 dev lo table local proto kernel scope host src 127.0.0.1 
local 127.0.0.1 dev lo table local proto kernel scope host src 127.0.0.1 
broadcast 127.255.255.255 dev lo table local proto kernel scope link src 127.0.0.1 
`

const addrsOut = `1: lo    inet 127.0.0.1/8 scope host lo\       valid_lft forever preferred_lft forever
4: eth0    inet 192.0.2.2/24 brd 192.0.2.255 scope global eth0\       valid_lft forever preferred_lft forever
9: wg0    inet 10.200.3.4/22 scope global wg0\       valid_lft forever preferred_lft forever
`

func TestParseRoutes(t *testing.T) {
	got := parseRoutes(routesOut)
	want := []netip.Prefix{
		netip.MustParsePrefix("172.17.0.0/16"),
		netip.MustParsePrefix("10.7.0.0/16"),
		netip.MustParsePrefix("10.9.9.0/24"),
		netip.MustParsePrefix("127.0.0.0/8"),
		netip.MustParsePrefix("127.0.0.1/32"),
		netip.MustParsePrefix("127.255.255.255/32"),
	}
	if !slices.Equal(got, want) {
		t.Fatalf("parseRoutes = %v, want %v", got, want)
	}
}

func TestParseAddrs(t *testing.T) {
	got := parseAddrs(addrsOut)
	want := []netip.Prefix{
		netip.MustParsePrefix("127.0.0.0/8"),
		netip.MustParsePrefix("192.0.2.0/24"),
		netip.MustParsePrefix("10.200.0.0/22"),
	}
	if !slices.Equal(got, want) {
		t.Fatalf("parseAddrs = %v, want %v", got, want)
	}
}

func TestPickSubnet(t *testing.T) {
	index := func(a, b byte) int { return int(a)<<8 | int(b) }
	tests := []struct {
		name  string
		used  []string
		start int
		want  string
	}{
		{"free", nil, index(3, 4), "10.3.4.0/24"},
		{"skips a /16", []string{"10.7.0.0/16"}, index(7, 9), "10.8.0.0/24"},
		{"skips an address", []string{"10.1.1.77/32"}, index(1, 1), "10.1.2.0/24"},
		{"skips a wider /22", []string{"10.200.0.0/22"}, index(200, 1), "10.200.4.0/24"},
		{"wraps around", []string{"10.255.255.0/24"}, index(255, 255), "10.0.0.0/24"},
		{"the routes of a machine", parsed(parseRoutes(routesOut)), index(7, 0), "10.8.0.0/24"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var used []netip.Prefix
			for _, u := range tt.used {
				used = append(used, netip.MustParsePrefix(u))
			}
			got, ok := pickSubnet(used, tt.start)
			if !ok || got.String() != tt.want {
				t.Fatalf("pickSubnet = %v, %v; want %s", got, ok, tt.want)
			}
		})
	}
	if p, ok := pickSubnet([]netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, 5); ok {
		t.Fatalf("pickSubnet with 10/8 taken = %v", p)
	}
	if p, ok := pickSubnet([]netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}, 5); ok {
		t.Fatalf("pickSubnet with everything taken = %v", p)
	}
}

func parsed(ps []netip.Prefix) []string {
	var s []string
	for _, p := range ps {
		s = append(s, p.String())
	}
	return s
}

func TestSubnetStart(t *testing.T) {
	for _, name := range []string{"a", "sc1", "nf1234zz"} {
		if s := subnetStart(name); s < 0 || s >= subnetCount {
			t.Fatalf("subnetStart(%q) = %d", name, s)
		}
	}
	if subnetStart("sc1") == subnetStart("sc2") {
		t.Fatal("sc1 and sc2 start at the same subnet")
	}
}

func TestParseNames(t *testing.T) {
	if got := parseNetnsList("sc1-a (id: 0)\nsc1-b\n\n"); !slices.Equal(got, []string{"sc1-a", "sc1-b"}) {
		t.Errorf("parseNetnsList = %q", got)
	}
	links := "1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536\n" +
		"9: sc1-v2@if2: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 master sc1-br\n" +
		"8: sc1-br: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500\n"
	if got := parseLinks(links); !slices.Equal(got, []string{"lo", "sc1-v2", "sc1-br"}) {
		t.Errorf("parseLinks = %q", got)
	}
}
