package metad

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"

	"github.com/strata-log/strata/internal/authz"
	"github.com/strata-log/strata/internal/mtls"
	"github.com/strata-log/strata/internal/rpcerror"
	"github.com/strata-log/strata/proto/metadpb"
)

// checkKey refuses the call in ctx unless its certificate may do op on key
// (on every key under key when prefix). Without TLS there is no identity
// and nothing is checked.
func (s *Server) checkKey(ctx context.Context, op authz.KeyOp, key string, prefix bool) error {
	if s.keys == nil {
		return nil
	}
	id, err := mtls.PeerIdentity(ctx)
	if err != nil {
		return rpcerror.New(codes.PermissionDenied, rpcerror.ReasonDenied, false,
			fmt.Sprintf("permission denied: the client certificate names no Strata role (%v)", err))
	}
	return s.keys.Check(id, op, key, prefix)
}

// checkTxn checks every key a transaction names: each compare reads its
// key (a failed one answers the key's state), each put and one-key delete
// writes, each delete of a prefix deletes under it. Put and Delete are
// transactions too, so this covers every write.
func (s *Server) checkTxn(ctx context.Context, req *metadpb.TxnRequest) error {
	if s.keys == nil {
		return nil
	}
	for _, c := range req.GetCompares() {
		if err := s.checkKey(ctx, authz.KeyRead, c.GetKey(), false); err != nil {
			return err
		}
	}
	for _, op := range req.GetOps() {
		var err error
		switch o := op.GetOp().(type) {
		case *metadpb.Op_Put:
			err = s.checkKey(ctx, authz.KeyWrite, o.Put.GetKey(), false)
		case *metadpb.Op_Delete:
			if o.Delete.GetPrefix() {
				err = s.checkKey(ctx, authz.KeyDeletePrefix, o.Delete.GetKey(), true)
			} else {
				err = s.checkKey(ctx, authz.KeyWrite, o.Delete.GetKey(), false)
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}
