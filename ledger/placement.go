package ledger

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/strata-log/strata/proto/bookiepb"
)

// ChooseEnsemble picks n bookies for a new ensemble (or, with the current
// members in exclude, replacements for an ensemble change) and returns their
// addresses (BookieInfo.Address) in ensemble order.
//
// Only WRITABLE bookies with an address that exclude does not name take
// part. Among them the most free space wins, spread across racks: the racks
// are ordered by the free space of their best bookie and the ensemble takes
// one bookie from each rack in turn (round robin), each rack giving its
// bookies in order of free space. Bookies without a rack label form one rack
// of their own, so with no labels at all this is simply "most free space
// first". Consecutive ensemble members therefore sit in different racks
// whenever there are enough racks, and so do the members of a write set
// (which are consecutive). Ties break on address, so the choice is
// deterministic.
//
// It fails with ErrNotEnoughBookies when fewer than n bookies qualify, and
// with ErrInvalid when n < 1.
func ChooseEnsemble(bookies []*bookiepb.BookieInfo, n int, exclude map[string]bool) ([]string, error) {
	if n < 1 {
		return nil, fmt.Errorf("%w: ensemble of %d bookies", ErrInvalid, n)
	}
	seen := make(map[string]bool, len(bookies))
	byRack := map[string][]*bookiepb.BookieInfo{}
	candidates := 0
	for _, b := range bookies {
		addr := b.GetAddress()
		if addr == "" || b.GetState() != bookiepb.BookieState_WRITABLE || exclude[addr] || seen[addr] {
			continue
		}
		seen[addr] = true
		byRack[b.GetRack()] = append(byRack[b.GetRack()], b)
		candidates++
	}
	if candidates < n {
		return nil, fmt.Errorf("%w: need %d writable bookies, %d qualify (%d registered, %d excluded)",
			ErrNotEnoughBookies, n, candidates, len(bookies), len(exclude))
	}
	moreFree := func(a, b *bookiepb.BookieInfo) int {
		if c := cmp.Compare(b.GetFreeBytes(), a.GetFreeBytes()); c != 0 {
			return c
		}
		return cmp.Compare(a.GetAddress(), b.GetAddress())
	}
	racks := make([][]*bookiepb.BookieInfo, 0, len(byRack))
	for _, members := range byRack {
		slices.SortFunc(members, moreFree)
		racks = append(racks, members)
	}
	// A rack's rank is its best bookie; the tie-break on address makes
	// the rack order total, since addresses are unique.
	slices.SortFunc(racks, func(a, b []*bookiepb.BookieInfo) int { return moreFree(a[0], b[0]) })
	out := make([]string, 0, n)
	for round := 0; len(out) < n; round++ {
		for _, members := range racks {
			if round < len(members) && len(out) < n {
				out = append(out, members[round].GetAddress())
			}
		}
	}
	return out, nil
}
