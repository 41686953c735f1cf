package metad

import (
	"context"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/strata-log/strata/internal/mtls"
	"github.com/strata-log/strata/internal/pki"
	"github.com/strata-log/strata/proto/metadpb"
)

// auditedPrefix holds what only operators change: users' credentials and
// ACLs (internal/acl's UsersPrefix and ACLsPrefix).
const auditedPrefix = "/strata/security/"

// maxAuditedKeys bounds the keys one audit line names.
const maxAuditedKeys = 16

// audit logs, with the caller's identity and address, every change an
// admin certificate makes (the CLI's `strata user`, `strata acl`,
// `strata meta put` and `strata meta delete`: an operator's hand on the
// cluster's state) and every change anyone makes under auditedPrefix.
// The brokers' and bookies' own writes elsewhere are the cluster's steady
// traffic and are not logged. A request forwarded by a follower is logged
// by the follower, where it arrived with its caller's identity; a Txn
// whose comparisons failed changed nothing and is not logged.
func (s *Server) audit(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	resp, err := h(ctx, req)
	if err != nil {
		return resp, err
	}
	keys := writtenKeys(req)
	if len(keys) == 0 {
		return resp, nil
	}
	if txn, ok := resp.(*metadpb.TxnResponse); ok && !txn.GetSucceeded() {
		return resp, nil
	}
	if md, ok := metadata.FromIncomingContext(ctx); ok && len(md.Get(forwardedKey)) > 0 {
		return resp, nil
	}
	principal, role := "anonymous", ""
	if id, err := mtls.PeerIdentity(ctx); err == nil {
		principal, role = id.String(), id.Role
	}
	if role != pki.RoleAdmin && !touchesAudited(keys) {
		return resp, nil
	}
	source := ""
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		source = p.Addr.String()
	}
	named := keys
	if len(named) > maxAuditedKeys {
		named = named[:maxAuditedKeys]
	}
	s.log.Info("metad changed by a client", "method", info.FullMethod, "keys", named, "key_count", len(keys),
		"principal", principal, "source", source)
	return resp, nil
}

// writtenKeys are the keys req writes: a Put's, a Delete's (a prefix
// delete as "PREFIX*"), those of every op of a Txn; none for reads.
func writtenKeys(req any) []string {
	deleted := func(key string, prefix bool) string {
		if prefix {
			return key + "*"
		}
		return key
	}
	switch r := req.(type) {
	case *metadpb.PutRequest:
		return []string{r.GetKey()}
	case *metadpb.DeleteRequest:
		return []string{deleted(r.GetKey(), r.GetPrefix())}
	case *metadpb.TxnRequest:
		var keys []string
		for _, op := range r.GetOps() {
			switch {
			case op.GetPut() != nil:
				keys = append(keys, op.GetPut().GetKey())
			case op.GetDelete() != nil:
				keys = append(keys, deleted(op.GetDelete().GetKey(), op.GetDelete().GetPrefix()))
			}
		}
		return keys
	}
	return nil
}

// touchesAudited reports whether a key, or a prefix delete, reaches into
// auditedPrefix.
func touchesAudited(keys []string) bool {
	for _, k := range keys {
		if prefix, ok := strings.CutSuffix(k, "*"); ok && strings.HasPrefix(auditedPrefix, prefix) {
			return true
		}
		if strings.HasPrefix(k, auditedPrefix) {
			return true
		}
	}
	return false
}
