package cli

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/strata-log/strata/proto/metadpb"
)

// Health values of a member in a status report.
const (
	HealthOK          = "ok"
	HealthLagging     = "lagging"     // commit index far behind the leader's
	HealthNoLeader    = "no-leader"   // answers but knows no leader
	HealthUnreachable = "unreachable" // did not answer
)

// DefaultLagThreshold is how many entries a member's commit index may trail
// the leader's before it is reported lagging. Statuses are sampled at
// slightly different moments, so a busy cluster shows small gaps even when
// healthy.
const DefaultLagThreshold = 1000

// StatusSource is the part of metaclient.Client that status uses.
type StatusSource interface {
	Status(ctx context.Context) (*metadpb.StatusResponse, error)
	StatusOf(ctx context.Context, endpoint string) (*metadpb.StatusResponse, error)
}

// Probe is the answer (or failure) of one endpoint asked for its status.
type Probe struct {
	Address string
	Status  *metadpb.StatusResponse
	Err     error
}

// MemberStatus is one row of the status report.
type MemberStatus struct {
	ID           string `json:"id"`
	Address      string `json:"address"`
	RaftAddress  string `json:"raft_address"`
	State        string `json:"state"`
	Term         uint64 `json:"term"`
	CommitIndex  uint64 `json:"commit_index"`
	AppliedIndex uint64 `json:"applied_index"`
	Revision     int64  `json:"revision"`
	Health       string `json:"health"`
	Error        string `json:"error,omitempty"`
}

// Leader names the cluster's leader in a status report.
type Leader struct {
	ID      string `json:"id"`
	Address string `json:"address"`
	Term    uint64 `json:"term"`
	// Reachable is false when only other members' reports name it.
	Reachable bool `json:"reachable"`
}

// ClusterStatus is the report of `strata meta status`.
type ClusterStatus struct {
	Leader  *Leader        `json:"leader"`
	Members []MemberStatus `json:"members"`
}

// Problems lists what makes the cluster unhealthy: no leader, unreachable
// members. Empty when healthy.
func (cs *ClusterStatus) Problems() []string {
	var out []string
	if cs.Leader == nil {
		out = append(out, "no leader")
	}
	for _, m := range cs.Members {
		if m.Health == HealthUnreachable {
			out = append(out, fmt.Sprintf("member %s unreachable", Dash(m.ID)))
		}
	}
	return out
}

// ProbeTargets lists the endpoints to ask for their status: every member's
// client address and, when the membership is unknown or some member has
// not registered a client address, the fallback endpoints as well.
func ProbeTargets(members []*metadpb.Member, fallback []string) []string {
	var out []string
	needFallback := len(members) == 0
	for _, m := range members {
		if m.GetClientAddress() == "" {
			needFallback = true
		} else if !slices.Contains(out, m.GetClientAddress()) {
			out = append(out, m.GetClientAddress())
		}
	}
	if needFallback {
		for _, ep := range fallback {
			if !slices.Contains(out, ep) {
				out = append(out, ep)
			}
		}
	}
	return out
}

// BuildClusterStatus combines the membership (nil when unknown) with the
// probes' answers, matched by member id, into a report. A member is
// lagging when its commit index trails the leader's by more than
// lagThreshold.
func BuildClusterStatus(members []*metadpb.Member, probes []Probe, lagThreshold uint64) *ClusterStatus {
	answered := map[string]Probe{} // by member id; the first answer wins
	failed := map[string]Probe{}   // by address
	for _, p := range probes {
		if p.Status == nil {
			failed[p.Address] = p
		} else if _, ok := answered[p.Status.GetId()]; !ok {
			answered[p.Status.GetId()] = p
		}
	}
	cs := &ClusterStatus{Members: []MemberStatus{}}
	known := map[string]bool{}
	for _, m := range members {
		known[m.GetId()] = true
		row := MemberStatus{ID: m.GetId(), Address: m.GetClientAddress(), RaftAddress: m.GetRaftAddress()}
		if p, ok := answered[m.GetId()]; ok {
			fill(&row, p)
		} else {
			row.State, row.Health = HealthUnreachable, HealthUnreachable
			if f, ok := failed[m.GetClientAddress()]; ok {
				row.Error = ServerMessage(f.Err)
			} else if m.GetClientAddress() == "" {
				row.Error = "no client address registered, and no endpoint answered for it"
			}
		}
		cs.Members = append(cs.Members, row)
	}
	// Answers from members missing from the membership we know (or all of
	// them, when it is unknown).
	for _, p := range probes {
		if p.Status == nil || known[p.Status.GetId()] {
			continue
		}
		known[p.Status.GetId()] = true
		row := MemberStatus{ID: p.Status.GetId(), Address: p.Address}
		for _, m := range p.Status.GetMembers() {
			if m.GetId() == row.ID {
				row.RaftAddress = m.GetRaftAddress()
			}
		}
		fill(&row, p)
		cs.Members = append(cs.Members, row)
	}
	// Without a membership, endpoints that did not answer are rows too.
	if len(members) == 0 {
		for _, p := range probes {
			if p.Status == nil {
				cs.Members = append(cs.Members, MemberStatus{Address: p.Address, State: HealthUnreachable,
					Health: HealthUnreachable, Error: ServerMessage(p.Err)})
			}
		}
	}
	cs.Leader = findLeader(cs.Members, probes)
	for i := range cs.Members {
		m := &cs.Members[i]
		if m.Health != "" {
			continue // unreachable
		}
		var leaderID string
		if p, ok := answered[m.ID]; ok {
			leaderID = p.Status.GetLeaderId()
		}
		switch {
		case cs.Leader != nil && cs.Leader.Reachable && leaderCommit(cs) > m.CommitIndex+lagThreshold:
			m.Health = HealthLagging
		case m.State != "leader" && leaderID == "":
			m.Health = HealthNoLeader
		default:
			m.Health = HealthOK
		}
	}
	return cs
}

func fill(row *MemberStatus, p Probe) {
	st := p.Status
	if row.Address == "" {
		row.Address = p.Address
	}
	row.State = st.GetState()
	row.Term = st.GetTerm()
	row.CommitIndex = st.GetCommitIndex()
	row.AppliedIndex = st.GetAppliedIndex()
	row.Revision = st.GetRevision()
}

// findLeader picks the reachable member that says it leads, with the
// highest term; failing that, the leader named by the answer with the
// highest term.
func findLeader(rows []MemberStatus, probes []Probe) *Leader {
	var best *Leader
	for _, m := range rows {
		if m.State == "leader" && (best == nil || m.Term > best.Term) {
			best = &Leader{ID: m.ID, Address: m.Address, Term: m.Term, Reachable: true}
		}
	}
	if best != nil {
		return best
	}
	for _, p := range probes {
		st := p.Status
		if st == nil || st.GetLeaderId() == "" {
			continue
		}
		if best == nil || st.GetTerm() > best.Term {
			best = &Leader{ID: st.GetLeaderId(), Address: st.GetLeaderAddress(), Term: st.GetTerm()}
		}
	}
	return best
}

func leaderCommit(cs *ClusterStatus) uint64 {
	for _, m := range cs.Members {
		if m.ID == cs.Leader.ID && m.State == "leader" {
			return m.CommitIndex
		}
	}
	return 0
}

// CollectStatus asks any endpoint for the membership, then every member
// (see ProbeTargets) for its own status, in parallel, each within
// probeTimeout.
func CollectStatus(ctx context.Context, src StatusSource, fallback []string, probeTimeout time.Duration, lagThreshold uint64) *ClusterStatus {
	var members []*metadpb.Member
	mctx, cancel := context.WithTimeout(ctx, probeTimeout)
	if st, err := src.Status(mctx); err == nil {
		members = st.GetMembers()
	}
	cancel()
	targets := ProbeTargets(members, fallback)
	probes := make([]Probe, len(targets))
	var wg sync.WaitGroup
	for i, addr := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pctx, cancel := context.WithTimeout(ctx, probeTimeout)
			defer cancel()
			st, err := src.StatusOf(pctx, addr)
			probes[i] = Probe{Address: addr, Status: st, Err: err}
		}()
	}
	wg.Wait()
	return BuildClusterStatus(members, probes, lagThreshold)
}

// Status prints a status report: a table, a leader line and one line per
// unreachable member's error in text; the ClusterStatus object in JSON.
func (p *Printer) Status(cs *ClusterStatus) error {
	if p.Format == FormatJSON {
		return p.JSON(cs)
	}
	tw := tabwriter.NewWriter(p.W, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tADDRESS\tRAFT ADDRESS\tSTATE\tTERM\tCOMMIT\tAPPLIED\tREVISION\tHEALTH")
	for _, m := range cs.Members {
		nums := []string{"-", "-", "-", "-"}
		if m.Health != HealthUnreachable {
			nums = []string{strconv.FormatUint(m.Term, 10), strconv.FormatUint(m.CommitIndex, 10),
				strconv.FormatUint(m.AppliedIndex, 10), strconv.FormatInt(m.Revision, 10)}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", Dash(m.ID), Dash(m.Address), Dash(m.RaftAddress),
			Dash(m.State), strings.Join(nums, "\t"), m.Health)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var b strings.Builder
	switch l := cs.Leader; {
	case l == nil:
		b.WriteString("leader: none\n")
	case l.Reachable:
		fmt.Fprintf(&b, "leader: %s (%s), term %d\n", l.ID, Dash(l.Address), l.Term)
	default:
		fmt.Fprintf(&b, "leader: %s (%s), term %d, not reachable from here\n", l.ID, Dash(l.Address), l.Term)
	}
	for _, m := range cs.Members {
		if m.Error != "" {
			fmt.Fprintf(&b, "%s (%s): %s\n", Dash(m.ID), Dash(m.Address), m.Error)
		}
	}
	_, err := io.WriteString(p.W, b.String())
	return err
}
