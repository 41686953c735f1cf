package replication_test

import (
	"testing"

	"github.com/strata-log/strata/ledger/bookie"
	"github.com/strata-log/strata/ledger/replication"
)

func TestPrefixesMatchBookie(t *testing.T) {
	if replication.RegistryPrefixForTest != bookie.RegistryPrefix || replication.CookiePrefixForTest != bookie.CookiePrefix {
		t.Fatalf("replication reads %q and %q, bookies write %q and %q", replication.RegistryPrefixForTest,
			replication.CookiePrefixForTest, bookie.RegistryPrefix, bookie.CookiePrefix)
	}
}
