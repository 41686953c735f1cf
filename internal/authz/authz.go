package authz

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/tap"

	"github.com/strata-log/strata/internal/mtls"
	"github.com/strata-log/strata/internal/pki"
	"github.com/strata-log/strata/internal/rpcerror"
	"github.com/strata-log/strata/proto/bookiepb"
	"github.com/strata-log/strata/proto/metadpb"
)

// AnyRole in a Policy entry admits every verified certificate (A6).
const AnyRole = "*"

// Service prefixes of the table.
const (
	bookieService = "/strata.bookie.v1.Bookie/"
	metadService  = "/strata.metad.v1.Metad/"
	brokerService = "/strata.broker.v1.Broker/"
	healthService = "/grpc.health.v1.Health/"
	reflectionV1  = "/grpc.reflection.v1.ServerReflection/"
	reflectionV1a = "/grpc.reflection.v1alpha.ServerReflection/"
)

// Policy maps a full method name, or a service prefix ending in "/", to
// the roles that may call it.
type Policy map[string][]string

// DefaultPolicy is the cluster's table (A1-A7 in the package doc).
func DefaultPolicy() Policy {
	// Bookies add and fence only as the elected replicator, which
	// ledger/bookie checks (A1).
	writers := []string{pki.RoleBroker, pki.RoleBookie, pki.RoleAdmin}
	owners := []string{pki.RoleBroker, pki.RoleAdmin}
	readers := []string{pki.RoleBroker, pki.RoleBookie, pki.RoleAdmin}
	members := []string{pki.RoleMetad, pki.RoleAdmin}
	return Policy{
		bookiepb.Bookie_AddEntries_FullMethodName:   writers,
		bookiepb.Bookie_Fence_FullMethodName:        writers,
		bookiepb.Bookie_WriteLAC_FullMethodName:     owners,
		bookiepb.Bookie_DeleteLedger_FullMethodName: owners,
		bookiepb.Bookie_ReadEntry_FullMethodName:    readers,
		bookiepb.Bookie_ReadEntries_FullMethodName:  readers,
		bookiepb.Bookie_ReadLAC_FullMethodName:      readers,
		bookiepb.Bookie_Info_FullMethodName:         readers,

		metadpb.Metad_MemberAdd_FullMethodName:      members,
		metadpb.Metad_MemberRemove_FullMethodName:   members,
		metadpb.Metad_RegisterMember_FullMethodName: members,
		metadpb.Metad_Snapshot_FullMethodName:       members,

		metadService: {pki.RoleMetad, pki.RoleBookie, pki.RoleBroker, pki.RoleAdmin},

		brokerService: {pki.RoleUser, pki.RoleAdmin, pki.RoleBroker},

		healthService: {AnyRole},
		reflectionV1:  {AnyRole},
		reflectionV1a: {AnyRole},
	}
}

// Roles returns the roles that may call method, and false when no entry
// names it (A7).
func (p Policy) Roles(method string) ([]string, bool) {
	if roles, ok := p[method]; ok {
		return roles, true
	}
	if i := strings.LastIndexByte(method, '/'); i > 0 {
		if roles, ok := p[method[:i+1]]; ok {
			return roles, true
		}
	}
	return nil, false
}

// Allowed reports whether role may call method.
func (p Policy) Allowed(method, role string) bool {
	roles, ok := p.Roles(method)
	return ok && (slices.Contains(roles, AnyRole) || slices.Contains(roles, role))
}

// maxLogged bounds the (principal, method) pairs remembered for
// log-once; past it, denials are still counted but no longer logged.
const maxLogged = 10_000

// Authorizer applies a Policy to calls. Safe for concurrent use.
type Authorizer struct {
	policy Policy
	log    *slog.Logger
	denied *prometheus.CounterVec
	logged onceSet // principal + " " + method
}

// New returns an Authorizer of p. Its counter is named
// strata_<role>_rpc_denied_total (role: the serving node's) and is
// registered on reg when reg is not nil.
func New(p Policy, role string, log *slog.Logger, reg prometheus.Registerer) (*Authorizer, error) {
	denied, err := deniedCounter(reg, "strata_"+role+"_rpc_denied_total",
		"Calls refused because the caller's certificate role may not make them, by method and caller role.", "method")
	if err != nil {
		return nil, err
	}
	return &Authorizer{policy: p, log: log.With("component", "authz"), denied: denied}, nil
}

// deniedCounter returns a refusals counter by what and caller role,
// registered on reg when reg is not nil.
func deniedCounter(reg prometheus.Registerer, name, help, what string) (*prometheus.CounterVec, error) {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{what, "role"})
	if reg != nil {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("authz: register metrics: %w", err)
		}
	}
	return c, nil
}

// Check returns nil when the call in ctx may invoke method, else the
// PERMISSION_DENIED status to answer.
func (a *Authorizer) Check(ctx context.Context, method string) error {
	id, err := mtls.PeerIdentity(ctx)
	if err == nil && a.policy.Allowed(method, id.Role) {
		return nil
	}
	principal, role := id.String(), id.Role
	if err != nil {
		principal, role = "unknown", "none"
	}
	a.denied.WithLabelValues(method, role).Inc()
	roles, known := a.policy.Roles(method)
	var msg string
	switch {
	case err != nil:
		msg = fmt.Sprintf("permission denied: %s: the client certificate names no Strata role (%v)", method, err)
	case !known:
		msg = fmt.Sprintf("permission denied: %s is open to no role; caller %s", method, principal)
	default:
		msg = fmt.Sprintf("permission denied: %s needs role %s; caller %s has role %s",
			method, strings.Join(roles, " or "), principal, role)
	}
	if a.logged.first(principal + " " + method) {
		a.log.Warn("call denied", "principal", principal, "method", method, "reason", msg)
	}
	return rpcerror.New(codes.PermissionDenied, rpcerror.ReasonDenied, false, msg)
}

// onceSet remembers up to maxLogged denials, so each is logged once: a
// misconfigured client cannot flood the log.
type onceSet struct {
	mu   sync.Mutex
	seen map[string]bool // REQUIRES: mu held
}

// first reports whether what was not seen yet, and remembers it; past
// maxLogged entries it reports false.
func (o *onceSet) first(what string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.seen[what] || len(o.seen) >= maxLogged {
		return false
	}
	if o.seen == nil {
		o.seen = map[string]bool{}
	}
	o.seen[what] = true
	return true
}

// ServerOptions check every call: in gRPC's tap handle, when the call's
// headers arrive and before any of its body is read (gRPC reads a unary
// request whole, up to its size limit, before the interceptors run), and
// in the interceptors for a call that reaches them without the tap; put
// them before any other interceptor so a refused call does no work.
func (a *Authorizer) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.InTapHandle(func(ctx context.Context, info *tap.Info) (context.Context, error) {
			return ctx, a.Check(ctx, info.FullMethodName)
		}),
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if err := a.Check(ctx, info.FullMethod); err != nil {
				return nil, err
			}
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			if err := a.Check(ss.Context(), info.FullMethod); err != nil {
				return err
			}
			return h(srv, ss)
		}),
	}
}
