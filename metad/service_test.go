package metad

import (
	"errors"
	"testing"
	"time"

	"github.com/strata-log/strata/metad/kv"
	"github.com/strata-log/strata/proto/metadpb"
)

// TestRandomLeaseIDs: lease ids are positive 63-bit numbers drawn at
// random, not a counter; a grant proposing an id already granted is
// refused (ErrInvalidCommand) by the state machine, alike on every
// replica, which is what makes LeaseGrant draw again.
func TestRandomLeaseIDs(t *testing.T) {
	seen := map[int64]bool{}
	small := 0
	for range 1000 {
		id := randomLeaseID()
		if id <= 0 || seen[id] {
			t.Fatalf("lease id %d: want positive and new", id)
		}
		if id < 1<<40 {
			small++
		}
		seen[id] = true
	}
	if small > 2 {
		t.Fatalf("%d of 1000 ids below 2^40: not spread over 63 bits", small)
	}
	grant := func(id int64) *metadpb.Command {
		return &metadpb.Command{Command: &metadpb.Command_LeaseGrant{LeaseGrant: &metadpb.LeaseGrantCommand{Id: id, TtlMs: 1000}}}
	}
	for _, s := range []*kv.Store{kv.New(kv.Options{}), kv.New(kv.Options{})} { // two replicas
		id := randomLeaseID()
		if _, err := s.Apply(1, grant(id)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Apply(2, grant(id)); err == nil {
			t.Fatal("a second grant of the same id was applied")
		}
		if s.LeaseCount() != 1 {
			t.Fatalf("%d leases", s.LeaseCount())
		}
	}
}

// A keep-alive of a lease whose deadline passed is refused: the revoke is
// decided (or will be at the next expiry tick), and renewing answered a
// full TTL for a lease about to go (etcd's lessor refuses alike).
func TestKeepAliveOfAnExpiredLeaseIsRefused(t *testing.T) {
	s := &Server{store: kv.New(kv.Options{})}
	grant := &metadpb.Command{Command: &metadpb.Command_LeaseGrant{LeaseGrant: &metadpb.LeaseGrantCommand{Id: 7, TtlMs: 1000}}}
	if _, err := s.store.Apply(1, grant); err != nil {
		t.Fatal(err)
	}
	s.mu.lessor = newLessor()
	s.mu.lessor.expired(s.store.Leases(), time.Now().Add(-2*time.Second)) // its clock started 2s ago
	if ttl, err := s.keepAlive(7); !errors.Is(err, kv.ErrLeaseNotFound) {
		t.Fatalf("keep-alive of a lease past its deadline: ttl %v, %v; want ErrLeaseNotFound", ttl, err)
	}
	s.mu.lessor.renew(&metadpb.Lease{Id: 7, TtlMs: 1000}, time.Now()) // a live one
	if ttl, err := s.keepAlive(7); err != nil || ttl != time.Second {
		t.Fatalf("keep-alive of a live lease: %v, %v", ttl, err)
	}
}
