package main

import (
	"os/exec"
	"strings"
	"testing"
)

// The CLI talks to brokers, metad and bookies over the network: it must
// not link a server's storage engine (Pebble, the bookie's journal and
// index), which it once did only to list bookies.
func TestNoStorageEngineLinked(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{"github.com/cockroachdb/pebble", "github.com/strata-log/strata/ledger/storage",
			"github.com/strata-log/strata/ledger/journal", "github.com/strata-log/strata/ledger/bookie"} {
			if dep == banned || strings.HasPrefix(dep, banned+"/") {
				t.Errorf("bin/strata links %s", dep)
			}
		}
	}
}
