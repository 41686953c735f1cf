package metad

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/strata-log/strata/internal/authz"
	"github.com/strata-log/strata/internal/mtls"
	"github.com/strata-log/strata/internal/pki"
	"github.com/strata-log/strata/internal/rpcerror"
	"github.com/strata-log/strata/proto/metadpb"
)

// caller is the identity of the call in ctx, or the PERMISSION_DENIED
// status to answer when its certificate names none.
func caller(ctx context.Context) (pki.Identity, error) {
	id, err := mtls.PeerIdentity(ctx)
	if err != nil {
		return id, rpcerror.New(codes.PermissionDenied, rpcerror.ReasonDenied, false,
			fmt.Sprintf("permission denied: the client certificate names no Strata role (%v)", err))
	}
	return id, nil
}

// checkKey refuses the call in ctx unless its certificate may do op on key
// (on every key under key when prefix). Without TLS there is no identity
// and nothing is checked.
func (s *Server) checkKey(ctx context.Context, op authz.KeyOp, key string, prefix bool) error {
	if s.keys == nil {
		return nil
	}
	id, err := caller(ctx)
	if err != nil {
		return err
	}
	return s.keys.Check(id, op, key, prefix)
}

// checkLease refuses the call in ctx unless its certificate may write
// every key attached to lease id: renewing a lease keeps its keys, revoking
// it deletes them, and attaching a key to it makes the lease's holder
// answer for that key. A lease with no keys yet is anyone's (its id is
// drawn at random and shown only with the keys attached to it).
func (s *Server) checkLease(ctx context.Context, lease int64) error {
	if s.keys == nil || lease == 0 {
		return nil
	}
	id, err := caller(ctx)
	if err != nil {
		return err
	}
	key, found := s.store.LeaseKey(lease, func(key string) bool { return !s.keys.Allowed(id, authz.KeyWrite, key, false) })
	if !found {
		return nil
	}
	err = s.keys.Check(id, authz.KeyWrite, key, false)
	return rpcerror.New(codes.PermissionDenied, rpcerror.ReasonDenied, false,
		fmt.Sprintf("%s (a key of lease %d)", status.Convert(err).Message(), lease))
}

// checkTxn checks every key a transaction names: each compare reads its
// key (a failed one answers the key's state), each put and one-key delete
// writes (and, with a lease, writes every key of that lease), each delete
// of a prefix deletes under it. Put and Delete are transactions too, so
// this covers every write.
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
			if err == nil {
				err = s.checkLease(ctx, o.Put.GetLease())
			}
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
