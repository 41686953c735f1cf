package ledger

import (
	"cmp"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"

	"github.com/strata-log/strata/proto/bookiepb"
)

// Placement: which bookies store a ledger. Two decisions, both pure
// functions of the registrations handed in (and of a random source):
//
//   - ChooseEnsemble, for a new ledger: one bookie per rack in turn, so that
//     no two members share a rack while there are racks enough;
//   - ChooseReplacement, for one member of an existing ensemble (the
//     writer's ensemble change, and re-replication of a fragment): a bookie
//     in a rack none of the other members is in, else in the rack they use
//     least.
//
// Within those rules a bookie is drawn at random with a weight that grows
// with its free space (BookKeeper's disk-weight-based placement), capped at
// MaxWeightMultiple times the mean of the candidates. "Most free space
// first", the rule before this one, sent every new ledger of a rack to a
// newly added (empty) bookie until the others had filled up to its level,
// and, among bookies on one shared disk (equal free space), every ledger to
// the same few bookies by address: write hot spots. A weighted draw gives a
// new bookie new ledgers at once, more of them than an old one, but never
// all of them.

// DefaultMaxWeightMultiple caps a bookie's weight at this multiple of the
// candidates' mean free space (BookKeeper's
// bookieMaxWeightMultipleForWeightBasedPlacement is 3 too).
const DefaultMaxWeightMultiple = 3

// Placement chooses bookies for ensembles. The zero value is the
// production rule and safe for concurrent use.
type Placement struct {
	// Exp returns an exponential random variate with mean 1 for each
	// weighted draw (a draw sorts by Exp()/weight). Nil means math/rand/v2's
	// ExpFloat64 (global, safe for concurrent use). Tests give one made
	// from a seeded source for repeatable draws, or a constant for no
	// randomness at all: most free space first, ties on address.
	Exp func() float64
	// MaxWeightMultiple caps each bookie's weight at this multiple of the
	// mean free space of the candidates; 0 means DefaultMaxWeightMultiple.
	MaxWeightMultiple float64
}

// Ordered is a Placement without randomness: each draw takes the most
// weight (free space, within the cap) first, ties on address. Tests of
// other things use it to know which bookies a ledger gets.
var Ordered = Placement{Exp: func() float64 { return 1 }}

// ChooseEnsemble picks n bookies for a new ensemble and returns their
// addresses (BookieInfo.Address) in ensemble order.
//
// Only WRITABLE bookies with an address that exclude does not name take
// part (a bookie registered twice counts once). Bookies without a rack label
// form one rack of their own. The racks are put in a random order, weighted
// by the summed weight of their bookies, each rack's bookies in a random
// order weighted by their own weight (see Placement), and the ensemble takes
// one bookie from each rack in turn (round robin). Consecutive ensemble
// members therefore sit in different racks whenever there are enough racks,
// and so do the members of a write set (which are consecutive); with at
// least n racks no two members share one.
//
// It fails with ErrNotEnoughBookies when fewer than n bookies qualify, and
// with ErrInvalid when n < 1.
func (p Placement) ChooseEnsemble(bookies []*bookiepb.BookieInfo, n int, exclude map[string]bool) ([]string, error) {
	if n < 1 {
		return nil, fmt.Errorf("%w: ensemble of %d bookies", ErrInvalid, n)
	}
	cands := p.candidates(bookies, func(addr string) bool { return !exclude[addr] })
	if len(cands) < n {
		return nil, fmt.Errorf("%w: need %d writable bookies, %d qualify (%d registered, %d excluded)",
			ErrNotEnoughBookies, n, len(cands), len(bookies), len(exclude))
	}
	byRack := map[string][]candidate{}
	for _, c := range cands {
		byRack[c.rack] = append(byRack[c.rack], c)
	}
	type rack struct {
		members []candidate
		key     float64
	}
	racks := make([]rack, 0, len(byRack))
	// Draw in a fixed order (rack names sorted), so a seeded Exp repeats.
	for _, name := range slices.Sorted(maps.Keys(byRack)) {
		members := byRack[name]
		weight := 0.0
		for _, c := range members {
			weight += c.weight
		}
		racks = append(racks, rack{members: p.shuffle(members), key: p.key(weight)})
	}
	slices.SortFunc(racks, func(a, b rack) int {
		// The rack's first member breaks a tie: addresses are unique.
		return cmp.Or(cmp.Compare(a.key, b.key), cmp.Compare(a.members[0].addr, b.members[0].addr))
	})
	out := make([]string, 0, n)
	for round := 0; len(out) < n; round++ {
		for _, r := range racks {
			if round < len(r.members) && len(out) < n {
				out = append(out, r.members[round].addr)
			}
		}
	}
	return out, nil
}

// ChooseReplacement picks a bookie to take bad's place in ensemble (the
// members of one fragment; bad among them) and returns its address.
//
// Candidates are the WRITABLE bookies with an address that neither exclude
// nor ensemble names, except bad itself: when the caller does not exclude
// it and it is writable, bad is chosen (a failed member taken back: it
// holds the fragment's earlier entries and needs no metadata change). Among
// the others the first non-empty tier wins:
//
//  1. bookies in a rack that no other member of the ensemble is in;
//  2. bookies in the rack(s) the other members use least;
//
// and within the tier one is drawn by weight (see Placement). A member's
// rack is what bookies says of it: a member not listed (unregistered, or
// left out by the caller) counts for no rack. Unlabelled bookies form one
// rack of their own.
//
// It fails with ErrNotEnoughBookies when no bookie qualifies.
func (p Placement) ChooseReplacement(bookies []*bookiepb.BookieInfo, ensemble []string, bad string, exclude map[string]bool) (string, error) {
	members := make(map[string]bool, len(ensemble))
	for _, b := range ensemble {
		members[b] = b != bad
	}
	cands := p.candidates(bookies, func(addr string) bool { return !exclude[addr] && !members[addr] })
	if i := slices.IndexFunc(cands, func(c candidate) bool { return c.addr == bad }); i >= 0 {
		return bad, nil
	}
	if len(cands) == 0 {
		return "", fmt.Errorf("%w: no writable bookie outside the ensemble %v (%d registered, %d excluded)",
			ErrNotEnoughBookies, ensemble, len(bookies), len(exclude))
	}
	used := map[string]int{} // rack -> other members in it
	seen := map[string]bool{}
	for _, b := range bookies {
		if addr := b.GetAddress(); members[addr] && !seen[addr] {
			seen[addr] = true
			used[b.GetRack()]++
		}
	}
	least := slices.MinFunc(cands, func(a, b candidate) int { return cmp.Compare(used[a.rack], used[b.rack]) })
	tier := slices.DeleteFunc(cands, func(c candidate) bool { return used[c.rack] > used[least.rack] })
	return p.shuffle(tier)[0].addr, nil
}

// candidate is a bookie that may be chosen, with its draw weight.
type candidate struct {
	addr, rack string
	weight     float64
}

// candidates returns the WRITABLE bookies with an address that ok accepts,
// each once, in address order, weighted: free bytes capped at
// MaxWeightMultiple times the candidates' mean, and at least 1 (so a
// bookie reporting no free space is chosen last, not never; when no bookie
// reports any, all weigh the same).
func (p Placement) candidates(bookies []*bookiepb.BookieInfo, ok func(addr string) bool) []candidate {
	var out []candidate
	seen := map[string]bool{}
	total := 0.0
	for _, b := range bookies {
		addr := b.GetAddress()
		if addr == "" || b.GetState() != bookiepb.BookieState_WRITABLE || seen[addr] || !ok(addr) {
			continue
		}
		seen[addr] = true
		out = append(out, candidate{addr: addr, rack: b.GetRack(), weight: float64(b.GetFreeBytes())})
		total += float64(b.GetFreeBytes())
	}
	if len(out) == 0 {
		return nil
	}
	multiple := p.MaxWeightMultiple
	if multiple <= 0 {
		multiple = DefaultMaxWeightMultiple
	}
	limit := multiple * total / float64(len(out))
	for i := range out {
		out[i].weight = max(min(out[i].weight, limit), 1)
	}
	slices.SortFunc(out, func(a, b candidate) int { return cmp.Compare(a.addr, b.addr) })
	return out
}

// shuffle returns cs in a weighted random order: each next one is drawn
// from the rest with probability proportional to its weight
// (Efraimidis–Spirakis: sort by Exp(1)/weight). cs is reordered in place.
func (p Placement) shuffle(cs []candidate) []candidate {
	keys := make(map[string]float64, len(cs))
	for _, c := range cs {
		keys[c.addr] = p.key(c.weight)
	}
	slices.SortFunc(cs, func(a, b candidate) int {
		return cmp.Or(cmp.Compare(keys[a.addr], keys[b.addr]), cmp.Compare(a.addr, b.addr))
	})
	return cs
}

// key is a sort key for a weighted draw: an exponential variate over the
// weight; the smallest key wins, with probability weight / total.
func (p Placement) key(weight float64) float64 {
	if p.Exp != nil {
		return p.Exp() / weight
	}
	return rand.ExpFloat64() / weight
}
