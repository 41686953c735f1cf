package ledger_test

import (
	"errors"
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

func TestChooseEnsemble(t *testing.T) {
	tests := []struct {
		name    string
		bookies []*bookiepb.BookieInfo
		n       int
		exclude []string
		want    []string
		wantErr error
	}{
		{
			name:    "most free space first",
			bookies: []*bookiepb.BookieInfo{placementInfo("a", "", 10), placementInfo("b", "", 30), placementInfo("c", "", 20), placementInfo("d", "", 5)},
			n:       3,
			want:    []string{"b", "c", "a"},
		},
		{
			name:    "ties break on address",
			bookies: []*bookiepb.BookieInfo{placementInfo("c", "", 10), placementInfo("a", "", 10), placementInfo("b", "", 10)},
			n:       2,
			want:    []string{"a", "b"},
		},
		{
			name:    "read-only bookies do not count",
			bookies: []*bookiepb.BookieInfo{placementReadOnly(placementInfo("a", "", 90)), placementInfo("b", "", 10), placementInfo("c", "", 20), placementInfo("d", "", 5)},
			n:       3,
			want:    []string{"c", "b", "d"},
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
			name: "racks round robin, ordered by their best bookie",
			bookies: []*bookiepb.BookieInfo{
				placementInfo("r1-a", "r1", 50), placementInfo("r1-b", "r1", 40), placementInfo("r1-c", "r1", 30),
				placementInfo("r2-a", "r2", 45), placementInfo("r2-b", "r2", 10),
				placementInfo("r3-a", "r3", 20),
			},
			n:    5,
			want: []string{"r1-a", "r2-a", "r3-a", "r1-b", "r2-b"},
		},
		{
			name: "a rack with fewer bookies drops out of later rounds",
			bookies: []*bookiepb.BookieInfo{
				placementInfo("r1-a", "r1", 50), placementInfo("r1-b", "r1", 40), placementInfo("r1-c", "r1", 30),
				placementInfo("r2-a", "r2", 45),
			},
			n:    4,
			want: []string{"r1-a", "r2-a", "r1-b", "r1-c"},
		},
		{
			name: "unlabelled bookies form a rack of their own",
			bookies: []*bookiepb.BookieInfo{
				placementInfo("x", "", 60), placementInfo("y", "", 55), placementInfo("r1-a", "r1", 50), placementInfo("r1-b", "r1", 40),
			},
			n:    3,
			want: []string{"x", "r1-a", "y"},
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
			before := slices.Clone(tt.bookies)
			got, err := ledger.ChooseEnsemble(tt.bookies, tt.n, exclude)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("got %v, %v; want error %v", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got, tt.want) {
				t.Fatalf("got %v, %v; want %v", got, err, tt.want)
			}
			if !slices.Equal(before, tt.bookies) {
				t.Fatal("ChooseEnsemble reordered its input")
			}
		})
	}
}
