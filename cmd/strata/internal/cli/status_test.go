package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/strata-log/strata/proto/metadpb"
)

func members3() []*metadpb.Member {
	return []*metadpb.Member{
		{Id: "1", RaftAddress: "h:7101", ClientAddress: "h:7001", Voter: true},
		{Id: "2", RaftAddress: "h:7102", ClientAddress: "h:7002", Voter: true},
		{Id: "3", RaftAddress: "h:7103", ClientAddress: "h:7003", Voter: true},
	}
}

func answer(addr, id, state, leader string, term, commit uint64) Probe {
	return Probe{Address: addr, Status: &metadpb.StatusResponse{
		Id: id, State: state, LeaderId: leader, LeaderAddress: "h:700" + leader, Term: term,
		CommitIndex: commit, AppliedIndex: commit, Revision: int64(commit) / 2, Members: members3(),
	}}
}

func noAnswer(addr string) Probe {
	return Probe{Address: addr, Err: errors.New("connection refused")}
}

func TestProbeTargets(t *testing.T) {
	fallback := []string{"h:7001", "x:1"}
	for _, tc := range []struct {
		name    string
		members []*metadpb.Member
		want    []string
	}{
		{"membership known", members3(), []string{"h:7001", "h:7002", "h:7003"}},
		{"membership unknown", nil, []string{"h:7001", "x:1"}},
		{"a member without client address", []*metadpb.Member{{Id: "1", ClientAddress: "h:7001"}, {Id: "2"}},
			[]string{"h:7001", "x:1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ProbeTargets(tc.members, fallback); !slices.Equal(got, tc.want) {
				t.Fatalf("ProbeTargets = %v, want %v", got, tc.want)
			}
		})
	}
}

// summary renders a report compactly for table tests.
func summary(cs *ClusterStatus) string {
	var parts []string
	if cs.Leader == nil {
		parts = append(parts, "leader=none")
	} else {
		parts = append(parts, fmt.Sprintf("leader=%s/%t", cs.Leader.ID, cs.Leader.Reachable))
	}
	for _, m := range cs.Members {
		parts = append(parts, fmt.Sprintf("%s@%s:%s:%s", m.ID, m.Address, m.State, m.Health))
	}
	return strings.Join(parts, " ")
}

func TestBuildClusterStatus(t *testing.T) {
	for _, tc := range []struct {
		name     string
		members  []*metadpb.Member
		probes   []Probe
		want     string
		problems []string
	}{
		{
			name:    "healthy",
			members: members3(),
			probes: []Probe{answer("h:7001", "1", "leader", "1", 4, 100), answer("h:7002", "2", "follower", "1", 4, 99),
				answer("h:7003", "3", "follower", "1", 4, 100)},
			want: "leader=1/true 1@h:7001:leader:ok 2@h:7002:follower:ok 3@h:7003:follower:ok",
		},
		{
			name:    "lagging follower",
			members: members3(),
			probes: []Probe{answer("h:7001", "1", "leader", "1", 4, 5000), answer("h:7002", "2", "follower", "1", 4, 3999),
				answer("h:7003", "3", "follower", "1", 4, 4000)},
			want: "leader=1/true 1@h:7001:leader:ok 2@h:7002:follower:lagging 3@h:7003:follower:ok",
		},
		{
			name:    "unreachable follower",
			members: members3(),
			probes: []Probe{answer("h:7001", "1", "leader", "1", 4, 100), answer("h:7002", "2", "follower", "1", 4, 100),
				noAnswer("h:7003")},
			want:     "leader=1/true 1@h:7001:leader:ok 2@h:7002:follower:ok 3@h:7003:unreachable:unreachable",
			problems: []string{"member 3 unreachable"},
		},
		{
			name:    "leader unreachable, followers still name it",
			members: members3(),
			probes: []Probe{noAnswer("h:7001"), answer("h:7002", "2", "follower", "1", 4, 100),
				answer("h:7003", "3", "follower", "1", 4, 100)},
			want:     "leader=1/false 1@h:7001:unreachable:unreachable 2@h:7002:follower:ok 3@h:7003:follower:ok",
			problems: []string{"member 1 unreachable"},
		},
		{
			name:    "no leader",
			members: members3(),
			probes: []Probe{answer("h:7001", "1", "candidate", "", 5, 100), noAnswer("h:7002"),
				answer("h:7003", "3", "follower", "", 5, 100)},
			want:     "leader=none 1@h:7001:candidate:no-leader 2@h:7002:unreachable:unreachable 3@h:7003:follower:no-leader",
			problems: []string{"no leader", "member 2 unreachable"},
		},
		{
			name:    "two claim leadership: the higher term wins",
			members: members3(),
			probes: []Probe{answer("h:7001", "1", "leader", "1", 4, 100), answer("h:7002", "2", "leader", "2", 5, 101),
				answer("h:7003", "3", "follower", "2", 5, 101)},
			want: "leader=2/true 1@h:7001:leader:ok 2@h:7002:leader:ok 3@h:7003:follower:ok",
		},
		{
			name:     "membership unknown: rows from the fallback endpoints",
			members:  nil,
			probes:   []Probe{answer("x:1", "1", "leader", "1", 4, 100), noAnswer("x:2")},
			want:     "leader=1/true 1@x:1:leader:ok @x:2:unreachable:unreachable",
			problems: []string{"member - unreachable"},
		},
		{
			name:    "answers matched by id, not address",
			members: []*metadpb.Member{{Id: "1", ClientAddress: "h:7001"}, {Id: "2"}},
			probes: []Probe{answer("h:7001", "1", "leader", "1", 4, 100), answer("x:2", "2", "follower", "1", 4, 100),
				noAnswer("x:9")},
			want: "leader=1/true 1@h:7001:leader:ok 2@x:2:follower:ok",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := BuildClusterStatus(tc.members, tc.probes, DefaultLagThreshold)
			if got := summary(cs); got != tc.want {
				t.Fatalf("report:\n got %s\nwant %s", got, tc.want)
			}
			if got := cs.Problems(); !slices.Equal(got, tc.problems) {
				t.Fatalf("problems = %q, want %q", got, tc.problems)
			}
		})
	}
}

func TestPrintStatus(t *testing.T) {
	cs := BuildClusterStatus(members3(), []Probe{answer("h:7001", "1", "leader", "1", 4, 100),
		answer("h:7002", "2", "follower", "1", 4, 98), noAnswer("h:7003")}, DefaultLagThreshold)
	var b bytes.Buffer
	if err := (&Printer{W: &b, Format: FormatText}).Status(cs); err != nil {
		t.Fatal(err)
	}
	want := `ID  ADDRESS  RAFT ADDRESS  STATE        TERM  COMMIT  APPLIED  REVISION  HEALTH
1   h:7001   h:7101        leader       4     100     100      50        ok
2   h:7002   h:7102        follower     4     98      98       49        ok
3   h:7003   h:7103        unreachable  -     -       -        -         unreachable
leader: 1 (h:7001), term 4
3 (h:7003): connection refused
`
	if b.String() != want {
		t.Fatalf("got:\n%s\nwant:\n%s", b.String(), want)
	}

	b.Reset()
	if err := (&Printer{W: &b, Format: FormatJSON}).Status(BuildClusterStatus(nil, []Probe{noAnswer("x:1")}, 10)); err != nil {
		t.Fatal(err)
	}
	wantJSON := `{"leader":null,"members":[{"id":"","address":"x:1","raft_address":"","state":"unreachable","term":0,` +
		`"commit_index":0,"applied_index":0,"revision":0,"health":"unreachable","error":"connection refused"}]}` + "\n"
	if b.String() != wantJSON {
		t.Fatalf("got:\n%s\nwant:\n%s", b.String(), wantJSON)
	}
}

// fakeSource answers Status from a fixed membership and StatusOf from a
// table of addresses; it records which addresses were asked.
type fakeSource struct {
	members []*metadpb.Member
	down    bool // Status fails
	byAddr  map[string]Probe

	mu    sync.Mutex
	asked []string
}

func (f *fakeSource) Status(ctx context.Context) (*metadpb.StatusResponse, error) {
	if f.down {
		<-ctx.Done() // a real client retries until its context ends
		return nil, ctx.Err()
	}
	return &metadpb.StatusResponse{Id: "1", Members: f.members}, nil
}

func (f *fakeSource) StatusOf(ctx context.Context, addr string) (*metadpb.StatusResponse, error) {
	f.mu.Lock()
	f.asked = append(f.asked, addr)
	f.mu.Unlock()
	p, ok := f.byAddr[addr]
	if !ok {
		<-ctx.Done() // a black hole: only the probe timeout ends it
		return nil, ctx.Err()
	}
	return p.Status, p.Err
}

func TestCollectStatus(t *testing.T) {
	src := &fakeSource{members: members3(), byAddr: map[string]Probe{
		"h:7001": answer("h:7001", "1", "leader", "1", 4, 100),
		"h:7002": answer("h:7002", "2", "follower", "1", 4, 100),
		// h:7003 hangs
	}}
	start := time.Now()
	cs := CollectStatus(context.Background(), src, []string{"f:1"}, 50*time.Millisecond, DefaultLagThreshold)
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("CollectStatus took %v with a 50ms probe timeout", d)
	}
	want := "leader=1/true 1@h:7001:leader:ok 2@h:7002:follower:ok 3@h:7003:unreachable:unreachable"
	if got := summary(cs); got != want {
		t.Fatalf("report:\n got %s\nwant %s", got, want)
	}
	slices.Sort(src.asked)
	if !slices.Equal(src.asked, []string{"h:7001", "h:7002", "h:7003"}) {
		t.Fatalf("asked %v; the fallback must not be asked when every member has an address", src.asked)
	}

	// Membership unknown: the fallback endpoints are asked.
	down := &fakeSource{down: true, byAddr: map[string]Probe{"f:1": answer("f:1", "1", "leader", "1", 4, 100)}}
	cs = CollectStatus(context.Background(), down, []string{"f:1", "f:2"}, 50*time.Millisecond, DefaultLagThreshold)
	if got, want := summary(cs), "leader=1/true 1@f:1:leader:ok @f:2:unreachable:unreachable"; got != want {
		t.Fatalf("report:\n got %s\nwant %s", got, want)
	}
}
