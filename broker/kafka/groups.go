package kafka

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-log/strata/broker/group"
	"github.com/strata-log/strata/proto/brokerpb"
)

// Coordinator key types of FindCoordinator.
const (
	coordinatorGroup       int8 = 0
	coordinatorTransaction int8 = 1
)

// findCoordinator answers FindCoordinator v0-5 (batched keys from v4):
// a group's coordinator is the owner of its __consumer_offsets
// partition. Transaction coordinators do not exist (INVALID_REQUEST, so
// a transactional client fails at once instead of retrying).
func (g *groupAPI) findCoordinator(ctx context.Context, c *Conn, kreq kmsg.Request) (Reply, error) {
	req := kreq.(*kmsg.FindCoordinatorRequest)
	resp := kmsg.NewPtrFindCoordinatorResponse()
	keys := req.CoordinatorKeys
	if req.Version < 4 {
		keys = []string{req.CoordinatorKey}
	}
	ns := nodes(g.svc.Brokers())
	for _, key := range keys {
		rc := kmsg.NewFindCoordinatorResponseCoordinator()
		rc.Key = key
		n, err := g.coordinatorNode(ctx, ns, req.CoordinatorType, key)
		rc.NodeID, rc.Host, rc.Port = n.id, n.host, n.port
		rc.ErrorCode, rc.ErrorMessage = c.ErrorCode(10, groupCodeOf(err)), messageOf(err)
		if err != nil {
			rc.NodeID, rc.Host, rc.Port = -1, "", -1
		}
		resp.Coordinators = append(resp.Coordinators, rc)
	}
	if req.Version < 4 && len(resp.Coordinators) == 1 {
		rc := resp.Coordinators[0]
		resp.ErrorCode, resp.ErrorMessage, resp.NodeID, resp.Host, resp.Port = rc.ErrorCode, rc.ErrorMessage, rc.NodeID, rc.Host, rc.Port
	}
	return Respond(resp), nil
}

// coordinatorNode is the Kafka node coordinating a group.
func (g *groupAPI) coordinatorNode(ctx context.Context, ns map[string]node, keyType int8, key string) (node, error) {
	if keyType != coordinatorGroup {
		return node{}, errInvalid("coordinator type %d: only groups (0) have coordinators; transactions are not supported", keyType)
	}
	fc, err := g.groups.FindCoordinator(ctx, &brokerpb.FindCoordinatorRequest{GroupId: key})
	if err != nil {
		return node{}, err
	}
	n, ok := ns[fc.BrokerId]
	if !ok {
		return node{}, errCoordinatorNotAvailable
	}
	return n, nil
}

var errCoordinatorNotAvailable = errUnsupported("the group's coordinator serves no Kafka listener yet")

// joinGroup answers JoinGroup v0-9: the member waits (in the Reply) for
// the join round; only the leader gets the members' metadata.
func (g *groupAPI) joinGroup(ctx context.Context, c *Conn, kreq kmsg.Request) (Reply, error) {
	req := kreq.(*kmsg.JoinGroupRequest)
	jreq := group.JoinRequest{
		GroupID: req.Group, MemberID: req.MemberID, InstanceID: deref(req.InstanceID),
		ClientID: c.ClientID(), ClientHost: host(c), ProtocolType: req.ProtocolType,
		SessionTimeout:   time.Duration(req.SessionTimeoutMillis) * time.Millisecond,
		RebalanceTimeout: time.Duration(req.RebalanceTimeoutMillis) * time.Millisecond,
		RequireMemberID:  req.Version >= 4,
	}
	if req.Version == 0 {
		jreq.RebalanceTimeout = 0
	}
	for _, p := range req.Protocols {
		jreq.Protocols = append(jreq.Protocols, group.Protocol{Name: p.Name, Metadata: p.Metadata})
	}
	return func(ctx context.Context) (kmsg.Response, error) {
		resp := kmsg.NewPtrJoinGroupResponse()
		res, err := g.groups.Join(ctx, jreq)
		resp.ErrorCode = c.ErrorCode(11, groupCodeOf(err))
		resp.MemberID, resp.Generation, resp.LeaderID = res.MemberID, res.Generation, res.Leader
		if err != nil {
			resp.Generation = -1
			if resp.MemberID == "" {
				resp.MemberID = req.MemberID
			}
			return resp, nil
		}
		resp.ProtocolType, resp.Protocol = kmsg.StringPtr(res.ProtocolType), kmsg.StringPtr(res.Protocol)
		for _, m := range res.Members {
			rm := kmsg.NewJoinGroupResponseMember()
			rm.MemberID, rm.InstanceID, rm.ProtocolMetadata = m.MemberID, optional(m.InstanceID), m.Metadata
			resp.Members = append(resp.Members, rm)
		}
		return resp, nil
	}, nil
}

// syncGroup answers SyncGroup v0-5: the leader's assignments complete the
// round; a follower waits for them.
func (g *groupAPI) syncGroup(ctx context.Context, c *Conn, kreq kmsg.Request) (Reply, error) {
	req := kreq.(*kmsg.SyncGroupRequest)
	sreq := group.SyncRequest{GroupID: req.Group, MemberID: req.MemberID, InstanceID: deref(req.InstanceID),
		Generation: req.Generation, ProtocolType: deref(req.ProtocolType), Protocol: deref(req.Protocol)}
	for _, ga := range req.GroupAssignment {
		sreq.Assignments = append(sreq.Assignments, group.MemberAssignment{MemberID: ga.MemberID, Assignment: ga.MemberAssignment})
	}
	return func(ctx context.Context) (kmsg.Response, error) {
		resp := kmsg.NewPtrSyncGroupResponse()
		res, err := g.groups.Sync(ctx, sreq)
		resp.ErrorCode = c.ErrorCode(14, groupCodeOf(err))
		resp.MemberAssignment = res.Assignment
		if resp.MemberAssignment == nil {
			resp.MemberAssignment = []byte{}
		}
		if err == nil {
			resp.ProtocolType, resp.Protocol = kmsg.StringPtr(res.ProtocolType), kmsg.StringPtr(res.Protocol)
		}
		return resp, nil
	}, nil
}

// heartbeat answers Heartbeat v0-4 (classic members).
func (g *groupAPI) heartbeat(ctx context.Context, c *Conn, kreq kmsg.Request) (Reply, error) {
	req := kreq.(*kmsg.HeartbeatRequest)
	hreq := group.HeartbeatRequest{GroupID: req.Group, MemberID: req.MemberID, InstanceID: deref(req.InstanceID), Generation: req.Generation}
	return func(ctx context.Context) (kmsg.Response, error) {
		resp := kmsg.NewPtrHeartbeatResponse()
		resp.ErrorCode = c.ErrorCode(12, groupCodeOf(g.groups.ClassicHeartbeat(ctx, hreq)))
		return resp, nil
	}, nil
}

// leaveGroup answers LeaveGroup v0-5 (members batched from v3).
func (g *groupAPI) leaveGroup(ctx context.Context, c *Conn, kreq kmsg.Request) (Reply, error) {
	req := kreq.(*kmsg.LeaveGroupRequest)
	lreq := group.LeaveRequest{GroupID: req.Group}
	if req.Version < 3 {
		lreq.Members = []group.LeavingMember{{MemberID: req.MemberID}}
	}
	for _, m := range req.Members {
		lreq.Members = append(lreq.Members, group.LeavingMember{MemberID: m.MemberID, InstanceID: deref(m.InstanceID)})
	}
	return func(ctx context.Context) (kmsg.Response, error) {
		resp := kmsg.NewPtrLeaveGroupResponse()
		results, err := g.groups.Leave(ctx, lreq)
		if err != nil {
			resp.ErrorCode = c.ErrorCode(13, groupCodeOf(err))
			return resp, nil
		}
		for _, r := range results {
			rm := kmsg.NewLeaveGroupResponseMember()
			rm.MemberID, rm.InstanceID, rm.ErrorCode = r.MemberID, optional(r.InstanceID), c.ErrorCode(13, groupCodeOf(r.Err))
			resp.Members = append(resp.Members, rm)
		}
		if req.Version < 3 && len(results) == 1 {
			resp.ErrorCode = resp.Members[0].ErrorCode
		}
		return resp, nil
	}, nil
}

// deref is *s, or "" for nil.
func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// optional is s as a nullable string (nil for "").
func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// host is the client's address without its port.
func host(c *Conn) string {
	addr := c.RemoteAddr().String()
	for i := len(addr) - 1; i >= 0; i-- {
		if addr[i] == ':' {
			return addr[:i]
		}
	}
	return addr
}

var _ = kerr.NotCoordinator
