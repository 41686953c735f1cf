package kv

import (
	"fmt"
	"math/rand"
	"strings"
	"testing"

	"github.com/strata-log/strata/proto/metadpb"
	"google.golang.org/protobuf/proto"
)

// commandGen produces random commands over a small key space, so that
// compares sometimes hold, prefixes overlap and leases collect keys.
type commandGen struct {
	rng    *rand.Rand
	leases []int64 // ids granted so far (some since revoked)
}

var genPrefixes = []string{"a/", "a/x/", "b/", "c"}

func (g *commandGen) key() string {
	return fmt.Sprintf("%s%d", genPrefixes[g.rng.Intn(len(genPrefixes))], g.rng.Intn(6))
}

func (g *commandGen) lease() int64 {
	switch n := g.rng.Intn(10); {
	case n < 6 || len(g.leases) == 0:
		return 0
	case n < 9:
		return g.leases[g.rng.Intn(len(g.leases))]
	default:
		return 1 << 40 // never granted
	}
}

func (g *commandGen) op() *metadpb.Op {
	switch n := g.rng.Intn(10); {
	case n < 6:
		return putL(g.key(), fmt.Sprint(g.rng.Intn(100)), g.lease())
	case n < 8:
		return del(g.key())
	case n < 9:
		return delPrefix(genPrefixes[g.rng.Intn(len(genPrefixes))])
	default:
		if g.rng.Intn(5) == 0 {
			return put("", "invalid")
		}
		return del(g.key())
	}
}

func (g *commandGen) command() *metadpb.Command {
	switch n := g.rng.Intn(100); {
	case n < 75:
		var compares []*metadpb.Compare
		if g.rng.Intn(2) == 0 {
			for range g.rng.Intn(3) {
				compares = append(compares, &metadpb.Compare{Key: g.key(), Version: int64(g.rng.Intn(3))})
			}
		}
		var o []*metadpb.Op
		for range g.rng.Intn(5) {
			o = append(o, g.op())
		}
		return txn(compares, o...)
	case n < 83:
		ttl := int64(1000)
		if g.rng.Intn(10) == 0 {
			ttl = 0
		}
		var id int64
		if g.rng.Intn(3) == 0 {
			id = int64(1 + g.rng.Intn(8)) // may collide with an existing lease
		}
		return grant(id, ttl)
	case n < 90:
		if len(g.leases) == 0 || g.rng.Intn(5) == 0 {
			return revoke(int64(1 + g.rng.Intn(8)))
		}
		return revoke(g.leases[g.rng.Intn(len(g.leases))])
	case n < 97:
		client := ""
		if g.rng.Intn(3) > 0 {
			client = fmt.Sprintf("c%d", g.rng.Intn(3))
		}
		return member(fmt.Sprintf("n%d", g.rng.Intn(4)), client, "")
	default:
		return &metadpb.Command{}
	}
}

// TestPropertySnapshotRestore applies the same random commands to two
// stores, one of which is replaced midway by a store restored from its
// snapshot. Every response must match, both stores must keep their
// invariants, and they must end in the same state.
func TestPropertySnapshotRestore(t *testing.T) {
	for _, tc := range []struct {
		seed    int64
		history int
	}{{1, 0}, {2, 0}, {3, 40}, {4, 7}} {
		t.Run(fmt.Sprintf("seed=%d/history=%d", tc.seed, tc.history), func(t *testing.T) {
			const commands = 3000
			opts := Options{HistoryRevisions: tc.history}
			g := &commandGen{rng: rand.New(rand.NewSource(tc.seed))}
			a := newApplier(t, opts)
			b := newApplier(t, opts)
			var succeeded, failed, rejected int
			for i := range commands {
				if i == commands/2 {
					restored := New(opts)
					restored.Restore(b.s.Snapshot(), b.index)
					b.s = restored
					checkInvariants(t, b.s)
				}
				cmd := g.command()
				ra, ea := a.apply(cmd)
				rb, eb := b.apply(cmd)
				if fmt.Sprint(ea) != fmt.Sprint(eb) || (ra == nil) != (rb == nil) || (ra != nil && !proto.Equal(ra, rb)) {
					t.Fatalf("command %d %v:\noriginal %v, %v\nrestored %v, %v", i, cmd, ra, ea, rb, eb)
				}
				switch r := ra.(type) {
				case *metadpb.LeaseGrantResponse:
					g.leases = append(g.leases, r.Id)
				case *metadpb.TxnResponse:
					if r.Succeeded {
						succeeded++
					} else {
						failed++
					}
				}
				if ea != nil {
					rejected++
				}
				if i%200 == 0 {
					checkInvariants(t, a.s)
					checkInvariants(t, b.s)
					checkListing(t, a.s)
				}
			}
			checkInvariants(t, a.s)
			checkInvariants(t, b.s)
			if !proto.Equal(a.s.Snapshot(), b.s.Snapshot()) {
				t.Fatal("stores diverged")
			}
			if a.s.AppliedIndex() != b.s.AppliedIndex() {
				t.Fatal("applied indexes differ")
			}
			// Make sure the generator exercised every outcome.
			if succeeded < commands/10 || failed < commands/50 || rejected < commands/50 {
				t.Fatalf("weak mix: %d succeeded, %d failed compares, %d rejected", succeeded, failed, rejected)
			}
			t.Logf("revision %d, %d keys, %d leases: %d txns succeeded, %d failed compares, %d rejected",
				a.s.Revision(), a.s.KeyCount(), len(a.s.Leases()), succeeded, failed, rejected)
		})
	}
}

// checkListing compares List against a filter of the full listing, for every
// prefix the generator uses and a range of page sizes.
func checkListing(t testing.TB, s *Store) {
	t.Helper()
	all, _, _ := s.List("", "", 1<<30, true)
	for _, prefix := range append([]string{"", "a", "a/x"}, genPrefixes...) {
		var want []string
		for _, kv := range all {
			if strings.HasPrefix(kv.Key, prefix) {
				want = append(want, kv.Key)
			}
		}
		for _, limit := range []int{1, 2, 5} {
			var got []string
			after := ""
			for {
				page, more, _ := s.List(prefix, after, limit, true)
				for _, kv := range page {
					got = append(got, kv.Key)
				}
				if !more {
					break
				}
				after = page[len(page)-1].Key
			}
			if strings.Join(got, ",") != strings.Join(want, ",") {
				t.Fatalf("List(%q) by %d: %v, want %v", prefix, limit, got, want)
			}
		}
	}
}
