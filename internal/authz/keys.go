package authz

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"

	"github.com/strata-log/strata/internal/pki"
	"github.com/strata-log/strata/internal/rpcerror"
)

// KeyOp is what a metad call does with one key, or with every key under a
// prefix (K1 in the package doc).
type KeyOp uint8

// Key operations; a KeyGrant holds a set of them.
const (
	// KeyRead: Get, a Txn's compare (a failed one answers the key's
	// value); over a prefix, List.
	KeyRead KeyOp = 1 << iota
	// KeyWrite: Put, Delete of one key, a Txn's put or one-key delete.
	KeyWrite
	// KeyWatch: Watch, always over a prefix.
	KeyWatch
	// KeyDeletePrefix: Delete, or a Txn's delete, of every key under a
	// prefix.
	KeyDeletePrefix
)

func (op KeyOp) String() string {
	var names []string
	for _, o := range []struct {
		op   KeyOp
		name string
	}{{KeyRead, "read"}, {KeyWrite, "write"}, {KeyWatch, "watch"}, {KeyDeletePrefix, "delete-prefix"}} {
		if op&o.op != 0 {
			names = append(names, o.name)
		}
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, "+")
}

// KeyGrant lets Role do Ops on the keys under Prefix; with Own, only on
// the one key Prefix + the certificate's name (a node's own record), and
// never over a prefix.
type KeyGrant struct {
	Role   string
	Prefix string
	Own    bool
	Ops    KeyOp
}

// covers reports whether g admits op by a certificate named name on key,
// or on every key under key when prefix.
func (g KeyGrant) covers(name string, op KeyOp, key string, prefix bool) bool {
	if g.Ops&op == 0 {
		return false
	}
	if g.Own {
		return !prefix && key == g.Prefix+name
	}
	return strings.HasPrefix(key, g.Prefix)
}

// KeyPolicy is metad's table of who may touch which keys. A call is
// allowed when the caller's role is Unrestricted or a grant of its role
// covers every key the call names (K2); anything else is refused (K3).
type KeyPolicy struct {
	Unrestricted []string
	Grants       []KeyGrant
}

// Key prefixes of the cluster's layout. Each is the owning package's
// constant (broker/doc.go, ledger, ledger/bookies, ledger/replication,
// broker/partlog, broker/drain, internal/acl); keys_test.go checks the
// exported ones against their packages.
const (
	brokersPrefix        = "/strata/brokers/"
	brokerDrainsPrefix   = "/strata/broker-drains/"
	controllerKey        = "/strata/controller"
	topicsPrefix         = "/strata/topics/"
	assignmentsPrefix    = "/strata/assignments/"
	ownersPrefix         = "/strata/owners/"
	partitionsPrefix     = "/strata/partitions/"
	ledgerIndexPrefix    = "/strata/ledger-index/"
	producerIDKey        = "/strata/producer-ids-next"
	brokerNodeIDsPrefix  = "/strata/broker-node-ids/"
	brokerNodeIDNextKey  = "/strata/broker-node-ids-next"
	tierPrefix           = "/strata/tier/"
	saslPrefix           = "/strata/sasl/"
	usersPrefix          = "/strata/security/users/"
	aclsPrefix           = "/strata/security/acls/"
	ledgersPrefix        = "/strata/ledgers/"
	ledgerNextIDKey      = "/strata/ledgers-next-id"
	bookieRegistryPrefix = "/strata/bookies/registry/"
	bookieCookiePrefix   = "/strata/bookies/cookies/"
	decommissionPrefix   = "/strata/bookies/decommissioned/"
	replicationPrefix    = "/strata/replication/"
)

// DefaultKeyPolicy is the cluster's table (K4-K9 in the package doc),
// derived from what each role's code reads and writes.
func DefaultKeyPolicy() KeyPolicy {
	const (
		r, w, watch = KeyRead, KeyWrite, KeyWatch
		broker      = pki.RoleBroker
		bookie      = pki.RoleBookie
	)
	return KeyPolicy{
		// K4: metad members (forwarded calls, checked by the member that
		// took them) and operators.
		Unrestricted: []string{pki.RoleMetad, pki.RoleAdmin},
		Grants: []KeyGrant{
			// K5: brokers run the cluster's topics and partitions.
			{Role: broker, Prefix: brokersPrefix, Ops: r | watch},
			{Role: broker, Prefix: brokersPrefix, Own: true, Ops: w},
			{Role: broker, Prefix: brokerNodeIDsPrefix, Ops: r},
			{Role: broker, Prefix: brokerNodeIDsPrefix, Own: true, Ops: w},
			{Role: broker, Prefix: brokerNodeIDNextKey, Ops: r | w},
			{Role: broker, Prefix: brokerDrainsPrefix, Ops: r | watch},
			{Role: broker, Prefix: controllerKey, Ops: r | w | watch},
			{Role: broker, Prefix: topicsPrefix, Ops: r | w | watch},
			{Role: broker, Prefix: assignmentsPrefix, Ops: r | w | watch},
			{Role: broker, Prefix: ownersPrefix, Ops: r | w | watch},
			{Role: broker, Prefix: partitionsPrefix, Ops: r | w},
			{Role: broker, Prefix: ledgerIndexPrefix, Ops: r | w},
			{Role: broker, Prefix: producerIDKey, Ops: r | w},
			{Role: broker, Prefix: tierPrefix, Ops: r | w},
			{Role: broker, Prefix: saslPrefix, Ops: r | w},
			// K6: brokers authenticate and authorize clients; only admins
			// change credentials and ACLs.
			{Role: broker, Prefix: usersPrefix, Ops: r | watch},
			{Role: broker, Prefix: aclsPrefix, Ops: r | watch},
			// K7: ledger metadata, digest keys included: brokers write and
			// read ledgers; bookies check each add's digest against its
			// ledger's key, and the replicator verifies each copy's digest,
			// recovers the open ledgers of lost bookies and rewrites
			// ensembles.
			{Role: broker, Prefix: ledgersPrefix, Ops: r | w},
			{Role: broker, Prefix: ledgerNextIDKey, Ops: r | w},
			{Role: broker, Prefix: bookieRegistryPrefix, Ops: r},
			{Role: bookie, Prefix: ledgersPrefix, Ops: r | w},
			// K9: `strata cluster status` in a broker's container runs
			// with the broker's certificate (docs/deploy.md): brokers
			// read the bookies' cookies, decommissions and the
			// replicator's records too, none of them secret.
			{Role: broker, Prefix: bookieCookiePrefix, Ops: r},
			{Role: broker, Prefix: decommissionPrefix, Ops: r},
			{Role: broker, Prefix: replicationPrefix, Ops: r},
			// K8: a bookie writes its own registration and cookie, reads
			// the others' and the operators' decommissions, and keeps the
			// elected replicator's records.
			{Role: bookie, Prefix: bookieRegistryPrefix, Ops: r},
			{Role: bookie, Prefix: bookieRegistryPrefix, Own: true, Ops: w},
			{Role: bookie, Prefix: bookieCookiePrefix, Ops: r},
			{Role: bookie, Prefix: bookieCookiePrefix, Own: true, Ops: w},
			{Role: bookie, Prefix: decommissionPrefix, Ops: r | watch},
			{Role: bookie, Prefix: replicationPrefix, Ops: r | w},
		},
	}
}

// Allowed reports whether id may do op on key, or on every key under key
// when prefix.
func (p KeyPolicy) Allowed(id pki.Identity, op KeyOp, key string, prefix bool) bool {
	if slices.Contains(p.Unrestricted, id.Role) {
		return true
	}
	for _, g := range p.Grants {
		if g.Role == id.Role && g.covers(id.Name, op, key, prefix) {
			return true
		}
	}
	return false
}

// holders describes who may do op on key (or under it, when prefix), for
// a denial's message.
func (p KeyPolicy) holders(op KeyOp, key string, prefix bool) string {
	out := slices.Clone(p.Unrestricted)
	for _, g := range p.Grants {
		switch {
		case g.Own && g.Ops&op != 0 && !prefix && strings.HasPrefix(key, g.Prefix):
			out = append(out, g.Role+" (its own "+g.Prefix+"NAME)")
		case !g.Own && g.covers("", op, key, prefix):
			out = append(out, g.Role)
		}
	}
	return strings.Join(slices.Compact(out), ", ")
}

// KeyAuthorizer applies a KeyPolicy to metad calls: it counts and logs
// what it refuses. Safe for concurrent use.
type KeyAuthorizer struct {
	policy KeyPolicy
	log    *slog.Logger
	denied *prometheus.CounterVec
	logged onceSet // principal + " " + op + " " + key
}

// NewKeyAuthorizer returns a KeyAuthorizer of p. Its counter,
// strata_metad_key_denied_total{op,role}, is registered on reg when reg
// is not nil.
func NewKeyAuthorizer(p KeyPolicy, log *slog.Logger, reg prometheus.Registerer) (*KeyAuthorizer, error) {
	denied, err := deniedCounter(reg, "strata_metad_key_denied_total",
		"Key-value calls refused because the caller's certificate role may not touch a key they name, by operation and caller role.", "op")
	if err != nil {
		return nil, err
	}
	return &KeyAuthorizer{policy: p, log: log.With("component", "authz"), denied: denied}, nil
}

// Allowed reports whether id may do op on key (on every key under key
// when prefix), without counting or logging.
func (a *KeyAuthorizer) Allowed(id pki.Identity, op KeyOp, key string, prefix bool) bool {
	return a.policy.Allowed(id, op, key, prefix)
}

// Check returns nil when id may do op on key (on every key under key when
// prefix), else the PERMISSION_DENIED status to answer, naming the
// caller, the operation, the key and who may.
func (a *KeyAuthorizer) Check(id pki.Identity, op KeyOp, key string, prefix bool) error {
	if a.policy.Allowed(id, op, key, prefix) {
		return nil
	}
	a.denied.WithLabelValues(op.String(), id.Role).Inc()
	what := "key"
	if prefix {
		what = "prefix"
	}
	msg := fmt.Sprintf("permission denied: %s may not %s %s %q; %s there is open to %s",
		id, op, what, key, op, a.policy.holders(op, key, prefix))
	if a.logged.first(id.String() + " " + op.String() + " " + key) {
		a.log.Warn("metad key access denied", "principal", id.String(), "op", op.String(), "key", key, "prefix", prefix)
	}
	return rpcerror.New(codes.PermissionDenied, rpcerror.ReasonDenied, false, msg)
}
