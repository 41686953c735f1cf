package group

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// The classic protocol's entry points (JoinGroup, SyncGroup, Heartbeat,
// LeaveGroup). Each applies its request to the group's classic machine
// under the mutex, then answers once what the answer reveals is durable
// (W6): a parked Join or Sync first waits, without the mutex, for the
// barrier or the leader's assignments.

// Join serves a classic JoinGroup. It blocks until the round's barrier
// completes (or ctx ends) unless it can be answered at once: a first join
// that must come back with a member id (ErrMemberIDRequired; the result's
// MemberID is the id to use), a follower repeating its join, or a static
// member taking its instance id over in a Stable group.
//
// Errors: ErrInvalidGroupID, ErrInvalid (ids or protocols over Limits),
// ErrInvalidSessionTimeout, ErrInconsistentGroupProtocol, ErrUnknownMember,
// ErrFencedInstanceID (the member's instance id was taken over while it
// waited), ErrGroupMaxSize, ErrLimitExceeded, ErrRebalanceInProgress (a
// newer join of the same member replaced this one), ErrMemberIDRequired,
// ErrLoading, ErrClosed, ctx's error, or the OffsetsLog's.
func (c *Coordinator) Join(ctx context.Context, req JoinRequest) (JoinResult, error) {
	if err := c.checkJoin(req); err != nil {
		return JoinResult{}, c.refused(err)
	}
	c.mu.Lock()
	if err := c.checkStateLocked(); err != nil {
		c.mu.Unlock()
		return JoinResult{}, err
	}
	g, created, err := c.groupLocked(req.GroupID, true)
	var cg *classicGroup
	converted := g != nil && g.classic == nil
	if err == nil {
		cg, err = g.asClassic()
	}
	if err != nil {
		c.mu.Unlock()
		return JoinResult{}, err
	}
	now := c.cfg.Now()
	c.expireLocked(g, now)
	res, p, err := cg.join(joinInput{req: req, now: now, lim: c.limitsNow(), newID: newMemberID})
	err = c.refused(err)
	if converted && p == nil && err != nil && !errors.Is(err, ErrMemberIDRequired) {
		g.classic = nil // a refused join changes nothing: the group keeps its kind
	}
	c.w.changedLocked(g)
	c.w.flushAnsweredLocked(g)
	if created && g.blank() {
		c.w.dropGroupLocked(g)
		c.mu.Unlock()
		return res, err
	}
	c.reportLocked(g)
	if p != nil {
		c.mu.Unlock()
		return awaitParked(ctx, c, g, p, func() {
			if g.classic != nil {
				g.classic.unpark(p, nil)
			}
		})
	}
	return res, c.answerLocked(ctx, g, err)
}

// checkJoin validates what a join carries, before any group is touched.
func (c *Coordinator) checkJoin(req JoinRequest) error {
	if req.GroupID == "" {
		return fmt.Errorf("%w: empty group id", ErrInvalidGroupID)
	}
	if s := req.SessionTimeout; s < c.lim.minSessionTimeout || s > c.lim.maxSessionTimeout {
		return fmt.Errorf("%w (%w): session timeout %s outside [%s, %s]", ErrInvalidSessionTimeout, ErrInvalid, s, c.lim.minSessionTimeout, c.lim.maxSessionTimeout)
	}
	if req.RebalanceTimeout < 0 {
		return fmt.Errorf("%w: rebalance timeout %s < 0", ErrInvalid, req.RebalanceTimeout)
	}
	lim := c.lim.Limits
	for _, f := range []struct{ name, v string }{
		{"group id", req.GroupID}, {"member id", req.MemberID}, {"instance id", req.InstanceID},
		{"client id", req.ClientID}, {"client host", req.ClientHost}, {"protocol type", req.ProtocolType},
	} {
		if len(f.v) > lim.MaxIDBytes {
			return refuse(refusedIDTooLong, ErrInvalid, "%s is %d bytes, at most %d are allowed", f.name, len(f.v), lim.MaxIDBytes)
		}
	}
	size := 0
	for _, p := range req.Protocols {
		if len(p.Name) > lim.MaxIDBytes {
			return refuse(refusedIDTooLong, ErrInvalid, "protocol name is %d bytes, at most %d are allowed", len(p.Name), lim.MaxIDBytes)
		}
		size += len(p.Name) + len(p.Metadata)
	}
	if size > lim.MaxMemberBytes {
		return refuse(refusedMemberBytes, ErrLimitExceeded, "protocols take %d bytes, a member may take at most %d", size, lim.MaxMemberBytes)
	}
	return nil
}

// answerLocked releases c.mu and returns err once what g's memory shows
// now is durable (W6), or the write's error.
// REQUIRES: c.mu held; it is released.
func (c *Coordinator) answerLocked(ctx context.Context, g *group, err error) error {
	w := c.w.flushLocked(g)
	c.mu.Unlock()
	if w != nil {
		if werr := c.w.wait(ctx, w); werr != nil {
			return werr
		}
	}
	return err
}

// awaitParked waits for p's answer, waking at the group's round deadlines
// to apply them (the barrier of an initial delay, a rebalance or sync
// timeout), then for what the answer reveals to be durable (W6). If ctx
// ends first, abandon (under c.mu) leaves the round: the member stays in
// it, only the answer is dropped.
func awaitParked[T any](ctx context.Context, c *Coordinator, g *group, p *parked[T], abandon func()) (T, error) {
	var zero T
	for {
		c.mu.Lock()
		var next time.Time
		if g.classic != nil {
			next = g.classic.nextDeadline()
		}
		now := c.cfg.Now()
		c.mu.Unlock()
		var wake <-chan time.Time
		var t *time.Timer
		if !next.IsZero() {
			t = time.NewTimer(max(next.Sub(now), time.Millisecond))
			wake = t.C
		}
		stop := func() {
			if t != nil {
				t.Stop()
			}
		}
		select {
		case <-p.done:
			stop()
			if p.err != nil {
				return zero, p.err
			}
			c.mu.Lock()
			w := p.flush
			c.mu.Unlock()
			if w != nil {
				if err := c.w.wait(ctx, w); err != nil {
					return zero, err
				}
			}
			return p.result, nil
		case <-ctx.Done():
			stop()
			c.mu.Lock()
			w, answered := p.flush, isDone(p.done)
			if !answered {
				abandon()
			}
			c.mu.Unlock()
			if w != nil {
				// Its flush may lead the lane: it must run, not be
				// orphaned (wait leaves the queue when it can).
				_ = c.w.wait(ctx, w)
			}
			return zero, ctx.Err()
		case <-wake:
			c.mu.Lock()
			if c.checkStateLocked() == nil && c.mu.groups[g.id] == g {
				c.expireLocked(g, c.cfg.Now())
			}
			c.mu.Unlock()
		}
	}
}

func isDone(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// Sync serves a classic SyncGroup. A follower's sync waits (parked) for the
// leader's; the leader's sets every member's assignment. Each is answered
// with its member's assignment once the Stable group is durable.
//
// Errors: ErrInvalidGroupID, ErrUnknownMember, ErrFencedInstanceID,
// ErrIllegalGeneration, ErrInconsistentGroupProtocol,
// ErrRebalanceInProgress (a round started: rejoin), ErrLimitExceeded (the
// leader's assignments would pass the group's bounds; nothing changed),
// ErrLoading, ErrClosed, ctx's error, or the OffsetsLog's.
func (c *Coordinator) Sync(ctx context.Context, req SyncRequest) (SyncResult, error) {
	if req.GroupID == "" {
		return SyncResult{}, fmt.Errorf("%w: empty group id", ErrInvalidGroupID)
	}
	c.mu.Lock()
	g, err := c.classicLocked(req.GroupID, req.MemberID)
	if err != nil {
		c.mu.Unlock()
		return SyncResult{}, err
	}
	now := c.cfg.Now()
	c.expireLocked(g, now)
	res, p, err := g.classic.sync(req, now, c.limitsNow())
	err = c.refused(err)
	c.w.changedLocked(g)
	c.w.flushAnsweredLocked(g)
	c.reportLocked(g)
	if p != nil {
		c.mu.Unlock()
		return awaitParked(ctx, c, g, p, func() {
			if g.classic != nil {
				g.classic.unpark(nil, p)
			}
		})
	}
	return res, c.answerLocked(ctx, g, err)
}

// classicLocked returns classic group id for a call of member memberID:
// ErrUnknownMember when there is no such classic group.
// REQUIRES: c.mu held.
func (c *Coordinator) classicLocked(id, memberID string) (*group, error) {
	if err := c.checkStateLocked(); err != nil {
		return nil, err
	}
	g := c.mu.groups[id]
	if g == nil || g.classic == nil {
		return nil, fmt.Errorf("%w: %q (no classic group %q)", ErrUnknownMember, memberID, id)
	}
	return g, nil
}

// ClassicHeartbeat serves a classic Heartbeat: it keeps the member's
// session. Errors: ErrInvalidGroupID, ErrUnknownMember,
// ErrFencedInstanceID, ErrIllegalGeneration, ErrRebalanceInProgress (a
// round is being prepared: rejoin), ErrLoading, ErrClosed.
func (c *Coordinator) ClassicHeartbeat(ctx context.Context, req HeartbeatRequest) error {
	if req.GroupID == "" {
		return fmt.Errorf("%w: empty group id", ErrInvalidGroupID)
	}
	c.mu.Lock()
	g, err := c.classicLocked(req.GroupID, req.MemberID)
	if err != nil {
		c.mu.Unlock()
		return err
	}
	now := c.cfg.Now()
	c.expireLocked(g, now)
	err = g.classic.heartbeat(req, now)
	return c.answerLocked(ctx, g, err)
}

// Leave serves a classic LeaveGroup: each member leaves (a round starts
// for the others); the results say, per member, ErrUnknownMember or
// ErrFencedInstanceID. The call fails with ErrInvalidGroupID,
// ErrUnknownMember (no such classic group), ErrLoading or ErrClosed.
func (c *Coordinator) Leave(ctx context.Context, req LeaveRequest) ([]LeaveResult, error) {
	if req.GroupID == "" {
		return nil, fmt.Errorf("%w: empty group id", ErrInvalidGroupID)
	}
	c.mu.Lock()
	g, err := c.classicLocked(req.GroupID, "")
	if err != nil {
		c.mu.Unlock()
		return nil, err
	}
	now := c.cfg.Now()
	c.expireLocked(g, now)
	results := g.classic.leave(req.Members, now, c.limitsNow())
	c.w.changedLocked(g)
	c.w.flushAnsweredLocked(g)
	c.reportLocked(g)
	if err := c.answerLocked(ctx, g, nil); err != nil {
		return nil, err
	}
	return results, nil
}
