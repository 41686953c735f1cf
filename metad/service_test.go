package metad

import (
	"testing"

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
