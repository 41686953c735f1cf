package metad

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/strata-log/strata/proto/metadpb"
)

func TestLessor(t *testing.T) {
	t0 := time.Unix(1000, 0)
	a := &metadpb.Lease{Id: 1, TtlMs: 1000}
	b := &metadpb.Lease{Id: 2, TtlMs: 3000}
	l := newLessor()
	steps := []struct {
		name   string
		leases []*metadpb.Lease
		renew  *metadpb.Lease
		at     time.Duration
		want   []int64
	}{
		{"new leases start their clock", []*metadpb.Lease{a, b}, nil, 0, nil},
		{"before the ttl nothing expires", []*metadpb.Lease{a, b}, nil, 999 * time.Millisecond, nil},
		{"a keep-alive pushes the deadline", []*metadpb.Lease{a, b}, a, 900 * time.Millisecond, nil},
		{"still alive after the old deadline", []*metadpb.Lease{a, b}, nil, 1500 * time.Millisecond, nil},
		{"expires at the renewed deadline", []*metadpb.Lease{a, b}, nil, 1900 * time.Millisecond, []int64{1}},
		{"the revoke removed a; b expires on time", []*metadpb.Lease{b}, nil, 3000 * time.Millisecond, []int64{2}},
		{"nothing left", nil, nil, 4000 * time.Millisecond, nil},
	}
	for _, s := range steps {
		now := t0.Add(s.at)
		if s.renew != nil {
			l.renew(s.renew, now)
		}
		got := l.expired(s.leases, now)
		slices.Sort(got)
		if !slices.Equal(got, s.want) {
			t.Fatalf("%s: expired %v, want %v", s.name, got, s.want)
		}
	}
	if len(l.deadlines) != 0 {
		t.Fatalf("deadlines of revoked leases kept: %v", l.deadlines)
	}
}

func TestLessorNewLeaderRestartsClocks(t *testing.T) {
	// A lease granted long ago by a previous leader must not expire the
	// moment a new leader's lessor first sees it.
	l := newLessor()
	now := time.Unix(5000, 0)
	lease := &metadpb.Lease{Id: 7, TtlMs: 2000}
	if got := l.expired([]*metadpb.Lease{lease}, now); len(got) != 0 {
		t.Fatalf("expired at first sight: %v", got)
	}
	if left, ok := l.remaining(7, now.Add(500*time.Millisecond)); !ok || left != 1500*time.Millisecond {
		t.Fatalf("remaining = %v %v", left, ok)
	}
}

func TestParsePeers(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    int
		wantErr bool
	}{
		{"", 0, false},
		{"1=127.0.0.1:7101,2=127.0.0.1:7102,3=127.0.0.1:7103", 3, false},
		{"1=127.0.0.1:7101,1=127.0.0.1:7102", 0, true},
		{"1-127.0.0.1:7101", 0, true},
		{"a b=127.0.0.1:1", 0, true},
		{"1=nohostport", 0, true},
	} {
		got, err := ParsePeers(tc.in)
		if (err != nil) != tc.wantErr || (err == nil && len(got) != tc.want) {
			t.Errorf("ParsePeers(%q) = %v, %v", tc.in, got, err)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	c := DefaultConfig()
	c.ID, c.DataDir, c.Peers = "1", "/tmp/x", "1=127.0.0.1:7101"
	if err := c.Validate(); err != nil {
		t.Fatalf("valid config rejected: %v", err)
	}
	bad := c
	bad.ID, bad.DataDir, bad.RaftListen = "", "", "0.0.0.0:7101"
	err := bad.Validate()
	if err == nil {
		t.Fatal("invalid config accepted")
	}
	for _, want := range []string{"--id", "--data-dir", "--raft-listen"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
	notListed := c
	notListed.ID = "9"
	if err := notListed.Validate(); err == nil {
		t.Fatal("member missing from --peers accepted")
	}
}
