package broker

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/strata-log/strata/metad/metaclient"
	"github.com/strata-log/strata/proto/brokerpb"
)

func TestPlanOwnership(t *testing.T) {
	a, b, c := tp{"t", 0}, tp{"t", 1}, tp{"t", 2}
	for _, tc := range []struct {
		name           string
		assigned, held map[tp]int64
		release        []tp
		claim          map[tp]int64
	}{
		{name: "nothing", claim: map[tp]int64{}},
		{name: "claim what is assigned here (O1)", assigned: map[tp]int64{a: 1, b: 3}, claim: map[tp]int64{a: 1, b: 3}},
		{name: "keep what is held at the assigned epoch", assigned: map[tp]int64{a: 1}, held: map[tp]int64{a: 1}, claim: map[tp]int64{}},
		{name: "release what moved away (O1)", assigned: map[tp]int64{a: 1}, held: map[tp]int64{a: 1, b: 2},
			release: []tp{b}, claim: map[tp]int64{}},
		{name: "a new epoch here: release first, claim once released (O1)", assigned: map[tp]int64{a: 2}, held: map[tp]int64{a: 1},
			release: []tp{a}, claim: map[tp]int64{}},
		{name: "mixed", assigned: map[tp]int64{a: 1, c: 5}, held: map[tp]int64{a: 1, b: 1},
			release: []tp{b}, claim: map[tp]int64{c: 5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := planOwnership(tc.assigned, tc.held)
			slices.SortFunc(got.release, compareTP)
			if !slices.Equal(got.release, tc.release) || !maps.Equal(got.claim, tc.claim) {
				t.Errorf("release %v claim %v, want release %v claim %v", got.release, got.claim, tc.release, tc.claim)
			}
		})
	}
}

// TestPlanOwnershipConverges drives the owner loop's decisions over random
// assignment changes: once the releases finish and the claims start, what
// the broker holds is exactly what is assigned to it (O1).
func TestPlanOwnershipConverges(t *testing.T) {
	for seed := range 200 {
		held := map[tp]int64{}
		for step := range 20 {
			assigns := map[tp]*brokerpb.Assignment{}
			for p := range int32(6) {
				if (seed+step+int(p))%3 != 0 {
					assigns[tp{"t", p}] = &brokerpb.Assignment{BrokerId: fmt.Sprint("k", (seed*step+int(p))%2), Epoch: int64(step % 3)}
				}
			}
			want := map[tp]int64{}
			for k, a := range assigns {
				if a.BrokerId == "k0" {
					want[k] = a.Epoch
				}
			}
			// Two passes: the first releases, the second claims again what
			// was released at another epoch.
			for range 2 {
				plan := planOwnership(want, held)
				for _, k := range plan.release {
					delete(held, k)
				}
				for k, e := range plan.claim {
					held[k] = e
				}
			}
			if !maps.Equal(held, want) {
				t.Fatalf("seed %d step %d: held %v, assigned %v", seed, step, held, want)
			}
		}
	}
}

func TestHandover(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ttl := 3 * time.Second
	h := newHandover("k1", t0, ttl)
	for _, tc := range []struct {
		name  string
		owner *ownerSeen
		at    time.Duration
		want  takeoverStep
	}{
		{"no record", nil, 0, takeOver},
		{"own record (a takeover after a failure)", &ownerSeen{ok: true, broker: "k1", epoch: 1}, 0, takeOver},
		{"undecodable record", &ownerSeen{}, 0, takeOver},
		{"another broker holds it", &ownerSeen{ok: true, broker: "k2", epoch: 1}, 0, waitForOwner},
		{"still held just before the deadline", &ownerSeen{ok: true, broker: "k2"}, 2*ttl - time.Millisecond, waitForOwner},
		{"still held at the deadline: fence (O2)", &ownerSeen{ok: true, broker: "k2"}, 2 * ttl, takeOverFenced},
		{"gone after the deadline", nil, 3 * ttl, takeOver},
	} {
		if got := h.step(tc.owner, t0.Add(tc.at)); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestRetakeAfterFailure(t *testing.T) {
	for _, tc := range []struct {
		name string
		a    *brokerpb.Assignment
		err  error
		want bool
	}{
		{"same broker, same epoch", &brokerpb.Assignment{BrokerId: "k1", Epoch: 4}, nil, true},
		{"moved to another broker", &brokerpb.Assignment{BrokerId: "k2", Epoch: 5}, nil, false},
		{"assigned here again at a new epoch", &brokerpb.Assignment{BrokerId: "k1", Epoch: 5}, nil, false},
		{"assignment deleted", nil, fmt.Errorf("get: %w", metaclient.ErrNotFound), false},
		{"metad unreachable: keep trying", nil, errors.New("unavailable"), true},
		{"undecodable assignment", nil, nil, false},
	} {
		if got := retakeAfterFailure("k1", 4, tc.a, tc.err); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestNextBackoff(t *testing.T) {
	d := 200 * time.Millisecond
	var got []time.Duration
	for range 6 {
		d = nextBackoff(d, 5*time.Second)
		got = append(got, d)
	}
	want := []time.Duration{400 * time.Millisecond, 800 * time.Millisecond, 1600 * time.Millisecond, 3200 * time.Millisecond, 5 * time.Second, 5 * time.Second}
	if !slices.Equal(got, want) {
		t.Errorf("%v, want %v", got, want)
	}
}
