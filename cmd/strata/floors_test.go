package main

import (
	"bytes"
	"maps"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/strata-log/strata"

// floors are Strata's packages from the ground up, each floor a list of
// rooms, each room a list of top-level directories. A package imports
// only packages of its own room or of a lower floor: the plumbing knows
// no domain, the client library no server, a server no application.
//
//   - ground: internal/ is plumbing only (config, TLS, codecs, test
//     harnesses) and imports no domain package (broker, ledger, metad,
//     tiering, client); beside it the wire formats (proto, recordbatch)
//     and the file-system seam (vfs), which import nothing else.
//   - metad, and the client, which talks to brokers over gRPC and links
//     no server.
//   - ledger (on metad) and tiering (object storage), neither of which
//     knows the other.
//   - broker, which keeps partitions on ledgers and segment objects.
//   - the applications: the binaries (cmd/, the strata command's own
//     packages under cmd/strata) and the tests that run them (e2e,
//     deploy).
//
// Only what a package links counts: tests may reach up (the client's
// tests run against real brokers from broker/brokertest).
var floors = []struct {
	name  string
	rooms [][]string
}{
	{"ground", [][]string{{"internal", "proto", "recordbatch", "vfs"}}},
	{"metad and client", [][]string{{"metad"}, {"client"}}},
	{"ledger and tiering", [][]string{{"ledger"}, {"tiering"}}},
	{"broker", [][]string{{"broker"}}},
	{"applications", [][]string{{"cmd", "e2e", "deploy"}}},
}

// place returns the floor and room of a package path relative to the
// module, or ok false when no room holds it.
func place(rel string) (floor, room int, ok bool) {
	top, _, _ := strings.Cut(rel, "/")
	for f, fl := range floors {
		for r, dirs := range fl.rooms {
			if slices.Contains(dirs, top) {
				return f, r, true
			}
		}
	}
	return 0, 0, false
}

// goList runs `go list ARGS` and returns its output; a failure fails the
// test, since a rule that cannot be checked is not kept.
func goList(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}

// modulePackages lists every package of the module, by its path relative
// to the module, with the paths go list gives as its field (Imports: what
// it imports; Deps: everything it links).
func modulePackages(t *testing.T, field string) map[string][]string {
	t.Helper()
	out := goList(t, "-f", "{{.ImportPath}}{{range ."+field+"}} {{.}}{{end}}", module+"/...")
	pkgs := map[string][]string{}
	for line := range strings.Lines(out) {
		if fields := strings.Fields(line); len(fields) > 0 {
			pkgs[strings.TrimPrefix(fields[0], module+"/")] = fields[1:]
		}
	}
	return pkgs
}

// TestFloors checks every import of every package of the module against
// the floors.
func TestFloors(t *testing.T) {
	pkgs := modulePackages(t, "Imports")
	checked := 0
	for _, pkg := range slices.Sorted(maps.Keys(pkgs)) {
		pf, pr, ok := place(pkg)
		if !ok {
			t.Errorf("%s is on no floor: add its directory to floors", pkg)
			continue
		}
		checked++
		for _, imp := range pkgs[pkg] {
			dep, inModule := strings.CutPrefix(imp, module+"/")
			if !inModule {
				continue
			}
			df, dr, ok := place(dep)
			switch {
			case !ok:
				t.Errorf("%s imports %s, which is on no floor", pkg, dep)
			case df > pf && strings.HasPrefix(pkg, "internal/"):
				t.Errorf("%s imports %s: internal/ is plumbing only and imports no domain package", pkg, dep)
			case df > pf:
				t.Errorf("%s (floor %q) imports %s from the higher floor %q", pkg, floors[pf].name, dep, floors[df].name)
			case df == pf && dr != pr:
				t.Errorf("%s imports %s, a neighbour on floor %q: rooms of one floor stay apart", pkg, dep, floors[pf].name)
			}
		}
	}
	// The module has about eighty packages: a handful means the listing
	// went wrong, not that the rules hold.
	if checked < 50 {
		t.Fatalf("go list named %d packages of %s; want the whole module", checked, module)
	}
}

// The CLI talks to brokers, metad and bookies over the network: it must
// not link a server's storage engine (Pebble, the bookie's journal and
// index), which it once did only to list bookies, nor a partition's log
// and compaction, which it once did for one metad key prefix.
func TestStrataLinksNoServer(t *testing.T) {
	deps := strings.Fields(goList(t, "-deps", "."))
	if !slices.Contains(deps, module+"/client") {
		t.Fatalf("go list -deps . lists no %s/client: not bin/strata's dependencies", module)
	}
	banned := []string{"github.com/cockroachdb/pebble", module + "/ledger/storage", module + "/ledger/journal",
		module + "/ledger/bookie", module + "/broker/partlog", module + "/tiering/compact"}
	for _, dep := range deps {
		for _, b := range banned {
			if dep == b || strings.HasPrefix(dep, b+"/") {
				t.Errorf("bin/strata links %s", dep)
			}
		}
	}
}

// Configuration structs are plain; only the commands fill them with viper
// (cmd/internal/nodeconfig). No package outside cmd/ links viper, so the
// roles' packages (metad, the bookie, the broker) stay loader-free.
func TestViperOnlyInCmd(t *testing.T) {
	const viper = "github.com/spf13/viper"
	pkgs := modulePackages(t, "Deps")
	checked := 0
	for _, pkg := range slices.Sorted(maps.Keys(pkgs)) {
		if pkg == "cmd" || strings.HasPrefix(pkg, "cmd/") {
			continue
		}
		checked++
		for _, dep := range pkgs[pkg] {
			if dep == viper || strings.HasPrefix(dep, viper+"/") {
				t.Errorf("%s links %s: viper belongs in cmd/ only", pkg, dep)
				break
			}
		}
	}
	if checked < 50 {
		t.Fatalf("go list named %d packages of %s outside cmd/; want the whole module", checked, module)
	}
}
