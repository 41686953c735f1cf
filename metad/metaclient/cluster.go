package metaclient

import (
	"context"

	"google.golang.org/grpc"

	"github.com/strata-log/strata/proto/metadpb"
)

// Status returns the status of whichever member answers first in the usual
// endpoint order, retrying like a read. The answer describes that member and
// the cluster as it sees it.
func (c *Client) Status(ctx context.Context) (*metadpb.StatusResponse, error) {
	var resp *metadpb.StatusResponse
	err := c.call(ctx, op{name: "status", kind: kindRead},
		func(ctx context.Context, mc metadpb.MetadClient, co ...grpc.CallOption) error {
			var err error
			resp, err = mc.Status(ctx, &metadpb.StatusRequest{}, co...)
			return err
		})
	return resp, err
}

// StatusOf asks exactly one endpoint for its status, connecting to it if it
// is not one of the configured endpoints (the connection is kept until
// Close). It makes a single attempt, bounded by ctx and RequestTimeout, and
// never redirects: its purpose is to learn whether that member answers.
func (c *Client) StatusOf(ctx context.Context, endpoint string) (*metadpb.StatusResponse, error) {
	o := op{name: "status", key: endpoint, kind: kindRead}
	if err := validateEndpoint(endpoint); err != nil {
		return nil, &callError{op: o.name, key: endpoint, err: err}
	}
	mc, err := c.stub(endpoint)
	if err != nil {
		return nil, translate(&o, err, false)
	}
	actx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer cancel()
	resp, err := mc.Status(actx, &metadpb.StatusRequest{})
	if err != nil {
		if c.isClosed() {
			return nil, translate(&o, ErrClosed, false)
		}
		if ctx.Err() != nil {
			return nil, giveUp(ctx, &o, attempt{err, endpoint}, attempt{}, false)
		}
		return nil, at(translate(&o, err, false), endpoint)
	}
	return resp, nil
}

// MemberAdd adds a voting member with the given Raft address and returns
// the new membership. It is a write: see doc.go for when it is retried.
func (c *Client) MemberAdd(ctx context.Context, id, raftAddr string) ([]*metadpb.Member, error) {
	var resp *metadpb.MemberAddResponse
	err := c.call(ctx, op{name: "member add", key: id, kind: kindWrite},
		func(ctx context.Context, mc metadpb.MetadClient, co ...grpc.CallOption) error {
			var err error
			resp, err = mc.MemberAdd(ctx, &metadpb.MemberAddRequest{Id: id, RaftAddress: raftAddr}, co...)
			return err
		})
	if err != nil {
		return nil, err
	}
	return resp.GetMembers(), nil
}

// MemberRemove removes a member and returns the new membership. It fails
// with ErrNotFound when the server reports no such member.
func (c *Client) MemberRemove(ctx context.Context, id string) ([]*metadpb.Member, error) {
	var resp *metadpb.MemberRemoveResponse
	err := c.call(ctx, op{name: "member remove", key: id, kind: kindWrite},
		func(ctx context.Context, mc metadpb.MetadClient, co ...grpc.CallOption) error {
			var err error
			resp, err = mc.MemberRemove(ctx, &metadpb.MemberRemoveRequest{Id: id}, co...)
			return err
		})
	if err != nil {
		return nil, err
	}
	return resp.GetMembers(), nil
}
