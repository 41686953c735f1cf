package metad

import (
	"time"

	"github.com/strata-log/strata/proto/metadpb"
)

// lessor decides when leases expire. Only the leader runs one; its decisions
// become LeaseRevoke commands in the Raft log, so every replica applies the
// same expiry at the same point of the log.
//
// Deadlines live only in the leader's memory. A new leader starts every
// lease's clock afresh (deadline = now + election timeout + TTL), as etcd
// does: a lease may outlive its TTL by up to one TTL and an election timeout
// across a leader change, but never expires early because of one, even for
// a session whose last keep-alive the deposed leader answered.
//
// It is a pure decision over its inputs (the leases in the store, the time),
// so tests drive it with explicit times. Not safe for concurrent use.
type lessor struct {
	deadlines map[int64]time.Time
}

func newLessor() *lessor {
	return &lessor{deadlines: map[int64]time.Time{}}
}

// renew restarts a lease's clock.
func (l *lessor) renew(lease *metadpb.Lease, now time.Time) {
	l.deadlines[lease.Id] = now.Add(time.Duration(lease.TtlMs) * time.Millisecond)
}

// expired returns the ids of leases whose deadline has passed, given the
// leases the store holds now. Leases new to the lessor start their clock now;
// deadlines of leases gone from the store are forgotten.
func (l *lessor) expired(leases []*metadpb.Lease, now time.Time) []int64 {
	live := make(map[int64]bool, len(leases))
	var out []int64
	for _, lease := range leases {
		live[lease.Id] = true
		deadline, ok := l.deadlines[lease.Id]
		if !ok {
			l.renew(lease, now)
			continue
		}
		if !now.Before(deadline) {
			out = append(out, lease.Id)
		}
	}
	for id := range l.deadlines {
		if !live[id] {
			delete(l.deadlines, id)
		}
	}
	return out
}

// remaining is the time left on a lease, or false when the lessor has no
// clock for it.
func (l *lessor) remaining(id int64, now time.Time) (time.Duration, bool) {
	deadline, ok := l.deadlines[id]
	if !ok {
		return 0, false
	}
	return deadline.Sub(now), true
}
