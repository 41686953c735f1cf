package authz_test

import (
	"testing"

	"github.com/strata-log/strata/broker/drain"
	"github.com/strata-log/strata/broker/partlog"
	"github.com/strata-log/strata/internal/acl"
	"github.com/strata-log/strata/internal/authz"
	"github.com/strata-log/strata/internal/pki"
	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/ledger/bookies"
	"github.com/strata-log/strata/ledger/replication"
)

// The table names the keys the owning packages really use: each exported
// key or prefix is open to the role whose code uses it, for what that code
// does with it (a prefix renamed in its package fails here, not in a TLS
// cluster).
func TestDefaultKeyPolicyMatchesLayout(t *testing.T) {
	b1 := pki.Identity{Role: pki.RoleBookie, Name: "b1"}
	k1 := pki.Identity{Role: pki.RoleBroker, Name: "k1"}
	for _, tc := range []struct {
		who    pki.Identity
		op     authz.KeyOp
		key    string
		prefix bool
	}{
		{k1, authz.KeyRead, acl.UserKey("alice"), false},
		{k1, authz.KeyWatch, acl.UsersPrefix, true},
		{k1, authz.KeyWatch, acl.ACLsPrefix, true},
		{k1, authz.KeyWrite, ledger.MetadataKey(42), false},
		{k1, authz.KeyRead, ledger.MetadataPrefix, true},
		{k1, authz.KeyWrite, ledger.NextIDKey, false},
		{k1, authz.KeyRead, bookies.RegistryPrefix, true},
		{k1, authz.KeyWrite, partlog.PartitionKey("orders", 3), false},
		{k1, authz.KeyRead, partlog.PartitionPrefix + "orders/", true},
		{k1, authz.KeyWrite, partlog.IndexKey(42), false},
		{k1, authz.KeyWatch, drain.Prefix, true},
		{k1, authz.KeyRead, drain.BrokersPrefix, true},
		{k1, authz.KeyRead, drain.AssignmentsPrefix, true},
		{k1, authz.KeyRead, drain.OwnersPrefix, true},
		{b1, authz.KeyRead, ledger.MetadataPrefix, true},
		{b1, authz.KeyWrite, ledger.MetadataKey(42), false},
		{b1, authz.KeyWrite, bookies.RegistryPrefix + "b1", false},
		{b1, authz.KeyWrite, bookies.CookiePrefix + "b1", false},
		{b1, authz.KeyRead, bookies.RegistryPrefix, true},
		{b1, authz.KeyRead, bookies.CookiePrefix, true},
		{b1, authz.KeyWatch, replication.DecommissionKey("b1"), true},
		{b1, authz.KeyRead, replication.DecommissionPrefix, true},
		{b1, authz.KeyWrite, replication.LeaderKey, false},
		{b1, authz.KeyRead, replication.LeaderKey, true},
		{b1, authz.KeyWrite, replication.MissingPrefix + "127.0.0.1%3A7301", false},
		{b1, authz.KeyWrite, replication.AddressPrefix + "b1", false},
	} {
		if !authz.DefaultKeyPolicy().Allowed(tc.who, tc.op, tc.key, tc.prefix) {
			t.Errorf("%s may not %s %q (prefix %t)", tc.who, tc.op, tc.key, tc.prefix)
		}
	}
}
