package netfault

import (
	"net/netip"
	"slices"
	"testing"
)

func ep(name, ip string) endpoint {
	return endpoint{name: name, ip: netip.MustParseAddr(ip), root: name == Root}
}

var (
	hostA = ep("a", "10.1.2.2")
	hostB = ep("b", "10.1.2.3")
	hostC = ep("c", "10.1.2.4")
	root  = ep(Root, "10.1.2.1")
)

func TestRules(t *testing.T) {
	tests := []struct {
		name  string
		rules []rule
		want  []rule
	}{
		{"block host to host: at the receiver", blockRules(hostA, hostB), []rule{
			{"b", "NETFAULT-IN -s 10.1.2.2 -j DROP"},
		}},
		{"block root to host: at the receiver", blockRules(root, hostB), []rule{
			{"b", "NETFAULT-IN -s 10.1.2.1 -j DROP"},
		}},
		{"block host to root: at the sender", blockRules(hostA, root), []rule{
			{"a", "NETFAULT-OUT -d 10.1.2.1 -j DROP"},
		}},
		{"cut", cutRules(hostA, hostB), []rule{
			{"b", "NETFAULT-IN -s 10.1.2.2 -j DROP"},
			{"a", "NETFAULT-IN -s 10.1.2.3 -j DROP"},
		}},
		{"cut clients", cutRules(hostA, root), []rule{
			{"a", "NETFAULT-OUT -d 10.1.2.1 -j DROP"},
			{"a", "NETFAULT-IN -s 10.1.2.1 -j DROP"},
		}},
		{"isolate", isolateRules("a"), []rule{
			{"a", "NETFAULT-IN -i eth0 -j DROP"},
			{"a", "NETFAULT-OUT -o eth0 -j DROP"},
		}},
		{"loss", lossRules("a", 0.25), []rule{
			{"a", "NETFAULT-IN -i eth0 -m statistic --mode random --probability 0.25 -j DROP"},
			{"a", "NETFAULT-OUT -o eth0 -m statistic --mode random --probability 0.25 -j DROP"},
		}},
		{"delay", delayRules("a"), []rule{
			{"a", "NETFAULT-DELAY -i eth0 -j NFQUEUE --queue-num 0 --queue-bypass"},
		}},
		{"split", splitRules([]endpoint{hostA}, []endpoint{hostB, hostC}), []rule{
			{"b", "NETFAULT-IN -s 10.1.2.2 -j DROP"},
			{"a", "NETFAULT-IN -s 10.1.2.3 -j DROP"},
			{"c", "NETFAULT-IN -s 10.1.2.2 -j DROP"},
			{"a", "NETFAULT-IN -s 10.1.2.4 -j DROP"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !slices.Equal(tt.rules, tt.want) {
				t.Fatalf("got %q\nwant %q", tt.rules, tt.want)
			}
		})
	}
}

func TestRestoreScripts(t *testing.T) {
	hosts, scripts := restoreScripts(splitRules([]endpoint{hostA}, []endpoint{hostB, hostC}), "-A")
	if !slices.Equal(hosts, []string{"b", "a", "c"}) {
		t.Fatalf("hosts %q", hosts)
	}
	want := map[string]string{
		"a": "*filter\n-A NETFAULT-IN -s 10.1.2.3 -j DROP\n-A NETFAULT-IN -s 10.1.2.4 -j DROP\nCOMMIT\n",
		"b": "*filter\n-A NETFAULT-IN -s 10.1.2.2 -j DROP\nCOMMIT\n",
		"c": "*filter\n-A NETFAULT-IN -s 10.1.2.2 -j DROP\nCOMMIT\n",
	}
	for h, s := range want {
		if scripts[h] != s {
			t.Errorf("script for %s:\n%s\nwant:\n%s", h, scripts[h], s)
		}
	}
	_, scripts = restoreScripts(lossRules("a", 1), "-D")
	if got := scripts["a"]; got != "*filter\n"+
		"-D NETFAULT-IN -i eth0 -m statistic --mode random --probability 1 -j DROP\n"+
		"-D NETFAULT-OUT -o eth0 -m statistic --mode random --probability 1 -j DROP\n"+
		"COMMIT\n" {
		t.Errorf("delete script:\n%s", got)
	}
}
