package broker

import (
	"errors"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/strata-log/strata/metad/metaclient"
	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/proto/metadpb"
)

// Ownership hand-over: which partitions this broker claims and releases,
// when a claim may take over from the previous owner, and whether a failed
// partition is taken again. The functions here decide from decoded records
// and the time they are given; they do no I/O and read no clock, so tests
// feed them records (ownership_machine_test.go). The owner loops (owner.go)
// read the mirrors and metad, call them, and start, stop or wait.
//
// Invariants (with B2 in doc.go):
//
//   - O1 A broker holds a partition exactly while the assignment names it
//     at the epoch it holds: a partition assigned elsewhere, deleted, or
//     re-assigned here at another epoch is released (and, at the new
//     epoch, claimed again once the release finished).
//   - O2 A claim takes over once no other broker's ownership record is
//     present (a live owner deletes it on release, a dead one's goes with
//     its lease), or when its own or an undecodable record is there, or
//     after the hand-over deadline (2 session TTLs): fencing, not the
//     record, keeps a stuck previous owner from writing.
//   - O3 After a failure (fenced ledger, lost CAS, failed log) the
//     partition is taken again only while the assignment still names this
//     broker at the same epoch, or when that could not be read for another
//     reason than its absence; otherwise the broker waits to be told to
//     release it.

// ownershipPlan is what reconcileOwnership does in one round (O1).
type ownershipPlan struct {
	release []tp         // held partitions to stop
	claim   map[tp]int64 // partitions to start, at their assignment epoch
}

// planOwnership decides O1: assigned is every assignment naming self, by
// partition, with its epoch; held is every partition this broker runs (being
// taken over, served or being released) with its epoch. Each partition is
// decided on its own, so a round may pass only the partitions it decides
// for: those whose assignment changed, or whose goroutine ended.
func planOwnership(assigned, held map[tp]int64) ownershipPlan {
	plan := ownershipPlan{claim: map[tp]int64{}}
	for k, e := range held {
		if want, ok := assigned[k]; !ok || want != e {
			plan.release = append(plan.release, k)
		}
	}
	for k, e := range assigned {
		if _, ok := held[k]; !ok {
			plan.claim[k] = e
		}
	}
	return plan
}

// assignedHere decodes an assignment record for planOwnership's assigned:
// its epoch, kept only when it names self.
func assignedHere(self string) func(kv *metadpb.KeyValue) (int64, bool) {
	return func(kv *metadpb.KeyValue) (int64, bool) {
		var a brokerpb.Assignment
		err := proto.Unmarshal(kv.Value, &a)
		return a.Epoch, err == nil && a.BrokerId == self
	}
}

// takeoverStep is what a claim does next.
type takeoverStep int

const (
	// waitForOwner: another broker's ownership record is present.
	waitForOwner takeoverStep = iota + 1
	// takeOver: no other broker holds the partition.
	takeOver
	// takeOverFenced: the previous owner still holds its record after the
	// deadline; take over anyway, fencing stops it.
	takeOverFenced
)

func (s takeoverStep) String() string {
	switch s {
	case waitForOwner:
		return "wait"
	case takeOver:
		return "take-over"
	case takeOverFenced:
		return "take-over-fenced"
	}
	return "?"
}

// handover is one claim waiting for the previous owner (O2).
type handover struct {
	self     string
	deadline time.Time
}

// newHandover starts a claim at now; it waits at most two session TTLs.
func newHandover(self string, now time.Time, sessionTTL time.Duration) handover {
	return handover{self: self, deadline: now.Add(2 * sessionTTL)}
}

// step decides from the partition's ownership record as mirrored (nil: no
// record; an undecodable record counts as none) at time now.
func (h handover) step(owner *ownerSeen, now time.Time) takeoverStep {
	if owner == nil || !owner.ok || owner.broker == h.self {
		return takeOver
	}
	if !now.Before(h.deadline) {
		return takeOverFenced
	}
	return waitForOwner
}

// retakeAfterFailure decides O3 from the assignment as read from metad
// (a, or the error reading it).
func retakeAfterFailure(self string, epoch int64, a *brokerpb.Assignment, err error) bool {
	if err != nil {
		return !errors.Is(err, metaclient.ErrNotFound)
	}
	return a != nil && a.BrokerId == self && a.Epoch == epoch
}

// nextBackoff doubles a retry delay up to limit.
func nextBackoff(d, limit time.Duration) time.Duration { return min(2*d, limit) }
