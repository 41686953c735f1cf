package broker

import (
	"strings"
	"testing"

	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/ledger/ledgertest"
	"github.com/strata-log/strata/metad/metaclient"
)

// New refuses missing dependencies before it builds anything.
func TestDepsValidate(t *testing.T) {
	fakes := ledgertest.NewCluster(3)
	full := ledger.Env{Meta: fakes.Meta, Bookies: fakes.Bookies, Registry: fakes.Registry}
	for _, tc := range []struct {
		name string
		deps Deps
		want string
	}{
		{"no metad client", Deps{Ledgers: full}, "Deps.Meta"},
		{"no bookies", Deps{Meta: &metaclient.Client{}, Ledgers: ledger.Env{Meta: fakes.Meta, Registry: fakes.Registry}}, "Deps.Ledgers"},
		{"complete", Deps{Meta: &metaclient.Client{}, Ledgers: full}, ""},
	} {
		err := tc.deps.Validate()
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	cfg := DefaultConfig()
	cfg.ID = "k1"
	if _, err := New(cfg, Deps{}); err == nil {
		t.Error("New accepted no dependencies")
	}
}
