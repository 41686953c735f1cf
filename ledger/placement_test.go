package ledger_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/proto/bookiepb"
)

func placementInfo(addr, rack string, freeGiB uint64) *bookiepb.BookieInfo {
	return &bookiepb.BookieInfo{Id: "id-" + addr, Address: addr, Rack: rack, FreeBytes: freeGiB << 30, TotalBytes: 100 << 30}
}

func placementReadOnly(b *bookiepb.BookieInfo) *bookiepb.BookieInfo {
	b.State = bookiepb.BookieState_READ_ONLY
	return b
}

// seeded is a Placement with a fixed random source: repeatable draws.
func seeded(seed uint64) ledger.Placement {
	return ledger.Placement{Exp: rand.New(rand.NewPCG(seed, 17)).ExpFloat64}
}

func rackOf(bookies []*bookiepb.BookieInfo) map[string]string {
	out := map[string]string{}
	for _, b := range bookies {
		out[b.GetAddress()] = b.GetRack()
	}
	return out
}

func TestChooseEnsemble(t *testing.T) {
	tests := []struct {
		name    string
		bookies []*bookiepb.BookieInfo
		n       int
		exclude []string
		// want: the members (in any order); wantRacks: how many distinct
		// racks the ensemble must span; wantFirst: racks the first
		// len(wantFirst) members must cover (any order).
		want      []string
		wantRacks int
		wantErr   error
	}{
		{
			name:    "read-only bookies do not count",
			bookies: []*bookiepb.BookieInfo{placementReadOnly(placementInfo("a", "", 90)), placementInfo("b", "", 10), placementInfo("c", "", 20), placementInfo("d", "", 5)},
			n:       3,
			want:    []string{"b", "c", "d"},
		},
		{
			name:    "excluded bookies do not count",
			bookies: []*bookiepb.BookieInfo{placementInfo("a", "", 90), placementInfo("b", "", 10), placementInfo("c", "", 20), placementInfo("d", "", 5)},
			n:       2,
			exclude: []string{"a", "c"},
			want:    []string{"b", "d"},
		},
		{
			name:    "bookies without an address do not count",
			bookies: []*bookiepb.BookieInfo{placementInfo("", "", 90), placementInfo("b", "", 10)},
			n:       1,
			want:    []string{"b"},
		},
		{
			name:    "duplicate registrations count once",
			bookies: []*bookiepb.BookieInfo{placementInfo("a", "", 10), placementInfo("a", "", 10), placementInfo("b", "", 5)},
			n:       3,
			wantErr: ledger.ErrNotEnoughBookies,
		},
		{
			name: "one bookie per rack while racks last",
			bookies: []*bookiepb.BookieInfo{
				placementInfo("r1-a", "r1", 50), placementInfo("r1-b", "r1", 40), placementInfo("r1-c", "r1", 30),
				placementInfo("r2-a", "r2", 45), placementInfo("r2-b", "r2", 10),
				placementInfo("r3-a", "r3", 20),
			},
			n:         3,
			wantRacks: 3,
		},
		{
			name: "racks round robin when there are fewer racks than members",
			bookies: []*bookiepb.BookieInfo{
				placementInfo("r1-a", "r1", 50), placementInfo("r1-b", "r1", 40), placementInfo("r1-c", "r1", 30),
				placementInfo("r2-a", "r2", 45), placementInfo("r2-b", "r2", 10),
			},
			n:         4,
			wantRacks: 2,
		},
		{
			name: "a rack with fewer bookies drops out of later rounds",
			bookies: []*bookiepb.BookieInfo{
				placementInfo("r1-a", "r1", 50), placementInfo("r1-b", "r1", 40), placementInfo("r1-c", "r1", 30),
				placementInfo("r2-a", "r2", 45),
			},
			n:    4,
			want: []string{"r1-a", "r1-b", "r1-c", "r2-a"},
		},
		{
			name: "unlabelled bookies form a rack of their own",
			bookies: []*bookiepb.BookieInfo{
				placementInfo("x", "", 60), placementInfo("y", "", 55), placementInfo("r1-a", "r1", 50), placementInfo("r1-b", "r1", 40),
			},
			n:         2,
			wantRacks: 2,
		},
		{
			name:    "no free space reported: still chosen",
			bookies: []*bookiepb.BookieInfo{placementInfo("a", "", 0), placementInfo("b", "", 0), placementInfo("c", "", 0)},
			n:       3,
			want:    []string{"a", "b", "c"},
		},
		{
			name:    "not enough bookies",
			bookies: []*bookiepb.BookieInfo{placementInfo("a", "", 10), placementReadOnly(placementInfo("b", "", 10)), placementInfo("c", "", 10)},
			n:       3,
			wantErr: ledger.ErrNotEnoughBookies,
		},
		{
			name:    "none at all",
			n:       1,
			wantErr: ledger.ErrNotEnoughBookies,
		},
		{
			name:    "empty ensemble",
			bookies: []*bookiepb.BookieInfo{placementInfo("a", "", 10)},
			n:       0,
			wantErr: ledger.ErrInvalid,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			exclude := map[string]bool{}
			for _, a := range tt.exclude {
				exclude[a] = true
			}
			racks := rackOf(tt.bookies)
			before := slices.Clone(tt.bookies)
			// Many seeds: the rules hold for every draw.
			for seed := range uint64(50) {
				got, err := seeded(seed).ChooseEnsemble(tt.bookies, tt.n, exclude)
				if tt.wantErr != nil {
					if !errors.Is(err, tt.wantErr) {
						t.Fatalf("got %v, %v; want error %v", got, err, tt.wantErr)
					}
					return
				}
				if err != nil || len(got) != tt.n {
					t.Fatalf("seed %d: got %v, %v; want %d bookies", seed, got, err, tt.n)
				}
				if sorted := slices.Sorted(slices.Values(got)); tt.want != nil && !slices.Equal(sorted, tt.want) {
					t.Fatalf("seed %d: got %v; want %v in some order", seed, got, tt.want)
				}
				if len(slices.Compact(slices.Sorted(slices.Values(got)))) != tt.n {
					t.Fatalf("seed %d: %v names a bookie twice", seed, got)
				}
				// Consecutive members (a write set) never share a rack
				// while another rack has a bookie left.
				for i := 1; i < len(got); i++ {
					if racks[got[i]] == racks[got[i-1]] && tt.wantRacks > 1 && i < tt.wantRacks {
						t.Fatalf("seed %d: %v: members %d and %d share rack %q", seed, got, i-1, i, racks[got[i]])
					}
				}
				if tt.wantRacks > 0 {
					spanned := map[string]bool{}
					for _, a := range got {
						spanned[racks[a]] = true
					}
					if len(spanned) != tt.wantRacks {
						t.Fatalf("seed %d: %v spans %d racks; want %d", seed, got, len(spanned), tt.wantRacks)
					}
				}
			}
			if !slices.Equal(before, tt.bookies) {
				t.Fatal("ChooseEnsemble reordered its input")
			}
		})
	}
}

// TestChooseEnsembleRepeatable: one seed, one choice.
func TestChooseEnsembleRepeatable(t *testing.T) {
	bookies := sixInThreeRacks()
	a, err := seeded(7).ChooseEnsemble(bookies, 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := seeded(7).ChooseEnsemble(bookies, 3, nil)
	if !slices.Equal(a, b) {
		t.Fatalf("seed 7 chose %v, then %v", a, b)
	}
}

func sixInThreeRacks() []*bookiepb.BookieInfo {
	var out []*bookiepb.BookieInfo
	for r := 1; r <= 3; r++ {
		for _, s := range []string{"a", "b"} {
			out = append(out, placementInfo(fmt.Sprintf("r%d-%s", r, s), fmt.Sprintf("r%d", r), 40))
		}
	}
	return out
}

// countChoices runs draws ensembles of n and counts how many each bookie
// joined.
func countChoices(t *testing.T, p ledger.Placement, bookies []*bookiepb.BookieInfo, n, draws int) map[string]int {
	t.Helper()
	counts := map[string]int{}
	for range draws {
		got, err := p.ChooseEnsemble(bookies, n, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range got {
			counts[a]++
		}
	}
	return counts
}

// TestChooseEnsembleSpreadsLoad is the hot-spot check: bookies with equal
// free space (one shared disk) share the ledgers about equally, and a newly
// added, empty bookie gets more new ledgers than its rack mate at once, but
// not all of them, and never more than the weight cap allows.
func TestChooseEnsembleSpreadsLoad(t *testing.T) {
	const draws = 3000
	t.Run("equal free space", func(t *testing.T) {
		counts := countChoices(t, seeded(1), sixInThreeRacks(), 3, draws)
		for addr, n := range counts {
			// Each rack gives one of its two bookies: draws/2 each.
			if n < draws*45/100 || n > draws*55/100 {
				t.Errorf("%s joined %d of %d ensembles; want about half: %v", addr, n, draws, counts)
			}
		}
	})
	t.Run("a new empty bookie", func(t *testing.T) {
		// Old bookies have 40 GiB free of 100; r1-new has 100.
		bookies := append(sixInThreeRacks(), placementInfo("r1-new", "r1", 100))
		counts := countChoices(t, seeded(2), bookies, 3, draws)
		// Weights in r1: 40, 40, 100 → r1-new is chosen 100/180 ≈ 56%.
		if n := counts["r1-new"]; n < draws*50/100 || n > draws*61/100 {
			t.Errorf("r1-new joined %d of %d ensembles; want about 56%%: %v", n, draws, counts)
		}
		for _, old := range []string{"r1-a", "r1-b"} {
			if n := counts[old]; n < draws*17/100 || n > draws*27/100 {
				t.Errorf("%s joined %d of %d ensembles; want about 22%%: %v", old, n, draws, counts)
			}
		}
	})
	t.Run("the weight cap", func(t *testing.T) {
		// Nine nearly full bookies (1 GiB free) and an empty one (100):
		// the mean is 10.9 GiB, the cap 32.7, so the new one is chosen
		// with 32.7/(32.7+9) ≈ 78%, not 100/109 ≈ 92%.
		var bookies []*bookiepb.BookieInfo
		for i := range 9 {
			bookies = append(bookies, placementInfo(fmt.Sprintf("old-%d", i), "", 1))
		}
		bookies = append(bookies, placementInfo("new", "", 100))
		counts := countChoices(t, seeded(3), bookies, 1, draws)
		if n := counts["new"]; n < draws*74/100 || n > draws*82/100 {
			t.Errorf("new joined %d of %d ensembles; want about 78%%: %v", n, draws, counts)
		}
	})
}

func TestChooseReplacement(t *testing.T) {
	tests := []struct {
		name     string
		bookies  []*bookiepb.BookieInfo
		ensemble []string
		bad      string
		exclude  []string
		// want: the replacement must be one of these.
		want    []string
		wantErr error
	}{
		{
			name:     "a rack no other member is in",
			bookies:  append(sixInThreeRacks(), placementInfo("r1-c", "r1", 90)),
			ensemble: []string{"r1-a", "r2-a", "r3-a"},
			bad:      "r2-a",
			exclude:  []string{"r2-a"},
			want:     []string{"r2-b"},
		},
		{
			name: "whatever its free space",
			bookies: []*bookiepb.BookieInfo{
				placementInfo("r1-a", "r1", 10), placementInfo("r1-b", "r1", 99),
				placementInfo("r2-a", "r2", 10), placementInfo("r3-a", "r3", 10), placementInfo("r4-a", "r4", 1),
			},
			ensemble: []string{"r1-a", "r2-a", "r3-a"},
			bad:      "r3-a",
			exclude:  []string{"r3-a"},
			want:     []string{"r4-a"},
		},
		{
			name:     "the bad bookie's rack is as good as any free one",
			bookies:  append(sixInThreeRacks(), placementInfo("r4-a", "r4", 40)),
			ensemble: []string{"r1-a", "r2-a", "r3-a"},
			bad:      "r3-a",
			exclude:  []string{"r3-a"},
			want:     []string{"r3-b", "r4-a"},
		},
		{
			name: "otherwise the least used rack",
			bookies: []*bookiepb.BookieInfo{
				placementInfo("r1-a", "r1", 10), placementInfo("r1-b", "r1", 10), placementInfo("r1-c", "r1", 90),
				placementInfo("r2-a", "r2", 10), placementInfo("r2-b", "r2", 10),
			},
			// Four members: r1-a, r1-b, r2-a and the bad one (in r2).
			ensemble: []string{"r1-a", "r2-a", "r1-b", "r2-b"},
			bad:      "r2-b",
			exclude:  []string{"r2-b"},
			want:     []string{"r1-c"}, // r2 would be better, but has no spare
		},
		{
			name: "least used among several used racks",
			bookies: []*bookiepb.BookieInfo{
				placementInfo("r1-a", "r1", 10), placementInfo("r1-b", "r1", 10), placementInfo("r1-c", "r1", 90),
				placementInfo("r2-a", "r2", 10), placementInfo("r2-b", "r2", 10), placementInfo("r2-c", "r2", 10),
				placementInfo("x", "r3", 10),
			},
			ensemble: []string{"r1-a", "r2-a", "r1-b", "x"},
			bad:      "x",
			exclude:  []string{"x"},
			want:     []string{"r2-b", "r2-c"},
		},
		{
			name:     "the bad bookie taken back when not excluded",
			bookies:  sixInThreeRacks(),
			ensemble: []string{"r1-a", "r2-a", "r3-a"},
			bad:      "r2-a",
			want:     []string{"r2-a"},
		},
		{
			name:     "excluded and read-only bookies are not chosen",
			bookies:  append(sixInThreeRacks(), placementReadOnly(placementInfo("r2-c", "r2", 90)), placementInfo("r2-d", "r2", 90)),
			ensemble: []string{"r1-a", "r2-a", "r3-a"},
			bad:      "r2-a",
			exclude:  []string{"r2-a", "r2-d"},
			want:     []string{"r2-b"},
		},
		{
			name:     "a member not listed counts for no rack",
			bookies:  []*bookiepb.BookieInfo{placementInfo("r1-a", "r1", 10), placementInfo("r2-b", "r2", 10), placementInfo("r3-b", "r3", 10)},
			ensemble: []string{"r1-a", "r2-a", "r3-a"},
			bad:      "r3-a",
			exclude:  []string{"r3-a"},
			want:     []string{"r2-b", "r3-b"},
		},
		{
			name:     "no spare",
			bookies:  []*bookiepb.BookieInfo{placementInfo("a", "", 10), placementInfo("b", "", 10), placementInfo("c", "", 10)},
			ensemble: []string{"a", "b", "c"},
			bad:      "b",
			exclude:  []string{"b"},
			wantErr:  ledger.ErrNotEnoughBookies,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			exclude := map[string]bool{}
			for _, a := range tt.exclude {
				exclude[a] = true
			}
			chosen := map[string]bool{}
			for seed := range uint64(50) {
				got, err := seeded(seed).ChooseReplacement(tt.bookies, tt.ensemble, tt.bad, exclude)
				if tt.wantErr != nil {
					if !errors.Is(err, tt.wantErr) {
						t.Fatalf("got %v, %v; want error %v", got, err, tt.wantErr)
					}
					return
				}
				if err != nil || !slices.Contains(tt.want, got) {
					t.Fatalf("seed %d: got %v, %v; want one of %v", seed, got, err, tt.want)
				}
				chosen[got] = true
			}
			if len(chosen) != len(tt.want) {
				t.Fatalf("over 50 seeds chose %v; want each of %v", chosen, tt.want)
			}
		})
	}
}
