package bookie

import (
	"errors"
	"strings"
	"testing"

	"github.com/strata-log/strata/proto/bookiepb"
)

func TestDecideIdentity(t *testing.T) {
	mine := &bookiepb.Cookie{BookieId: "b1", InstanceId: "aaa"}
	other := &bookiepb.Cookie{BookieId: "b1", InstanceId: "bbb"}
	otherID := &bookiepb.Cookie{BookieId: "b2", InstanceId: "aaa"}
	for _, tc := range []struct {
		name    string
		local   localIdentity
		remote  *bookiepb.Cookie
		want    identityAction
		wantErr string
	}{
		{"new bookie", localIdentity{}, nil, identityCreate, ""},
		{"restart", localIdentity{cookie: mine}, mine, identityStart, ""},
		{"restart with data", localIdentity{cookie: mine, hasData: true}, mine, identityStart, ""},
		{"wiped disk", localIdentity{}, mine, 0, "disk was wiped or replaced"},
		{"wiped disk, other files", localIdentity{hasData: true}, mine, 0, "disk was wiped or replaced"},
		{"metad forgot", localIdentity{cookie: mine}, nil, 0, "metad has no cookie"},
		{"swapped disk", localIdentity{cookie: other}, mine, 0, "another incarnation"},
		{"another bookie's disk", localIdentity{cookie: otherID}, mine, 0, "belongs to bookie b2"},
		{"data without cookie", localIdentity{hasData: true}, nil, 0, "holds data but no cookie"},
		{"finish interrupted create", localIdentity{pending: mine}, mine, identityFinish, ""},
		{"pending but metad never got it", localIdentity{pending: mine}, nil, identityCreate, ""},
		{"pending of another instance", localIdentity{pending: other}, mine, 0, "disk was wiped"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decideIdentity("b1", tc.local, tc.remote)
			if tc.wantErr != "" {
				if !errors.Is(err, ErrIdentity) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want ErrIdentity containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}
