package benchsuite

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// GroupMembers is how many members each group of the group workloads
// has.
const GroupMembers = 4

// The group workloads' targets.
const (
	// A member that leaves cleanly: its partitions are consumed again
	// within this.
	TargetLeaveMs = 1000.0
	// A member cut off: within its session timeout plus this.
	TargetKillOverSessionMs = 1000.0
)

// Group protocols of WorkloadGroupRebalance's scenarios and
// GroupRead.Protocol.
const (
	ProtocolCooperativeSticky = "cooperative-sticky" // classic, franz-go's balancer
	ProtocolKIP848            = "kip-848"            // server-side assignment
)

// Events of WorkloadGroupRebalance's scenarios.
const (
	EventLeave = "leave" // the member closes: LeaveGroup, or a leave heartbeat
	EventKill  = "kill"  // its connections are cut: no leave, no heartbeat
)

// GroupRead is how a group catch-up's members read the topic.
type GroupRead struct {
	Group    string `json:"group"`
	Protocol string `json:"protocol"`
	Client   string `json:"client"`
	Members  int    `json:"members"`
	// JoinSeconds: from creating the members to the first record any of
	// them read (joining, the first assignment, the committed offsets).
	JoinSeconds float64 `json:"join_seconds"`
	// Reread: records read again after their partition moved (a new
	// owner starts at the last commit); they are not counted in the
	// workload's records and bytes.
	Reread int64 `json:"reread_records"`
	// Rebalances the members saw (assignments after the first).
	Assignments int `json:"assignments"`
}

// Rebalance is WorkloadGroupRebalance's result: per scenario (protocol
// and event), how long the partitions of one member went unconsumed.
type Rebalance struct {
	// Members per group, Partitions of the topic, fed FeedRecordsPerSec
	// records/s in all, spread evenly over the partitions, so that a
	// partition's new owner has a record to read within a few ms.
	Members           int     `json:"members"`
	Partitions        int32   `json:"partitions"`
	FeedRecordsPerSec float64 `json:"feed_records_per_sec"`
	// Repeats per scenario: as many groups, their events StaggerMs apart.
	Repeats   int                 `json:"repeats"`
	StaggerMs float64             `json:"stagger_ms"`
	Scenarios []RebalanceScenario `json:"scenarios"`
}

// RebalanceScenario is one protocol and event, measured Repeats times.
type RebalanceScenario struct {
	Protocol string `json:"protocol"`
	Event    string `json:"event"`
	// The member's session timeout and heartbeat interval, and who sets
	// them ("client": the classic member asks; "broker": KIP-848's are
	// the coordinator's --group-session-timeout and
	// --group-heartbeat-interval).
	SessionTimeoutMs    float64 `json:"session_timeout_ms"`
	HeartbeatIntervalMs float64 `json:"heartbeat_interval_ms"`
	SetBy               string  `json:"set_by"`
	// SamplesMs: per repeat, from the event until a remaining member
	// read a record of each partition the member had held (a repeat that
	// did not get there within the wait counts the wait, and TimedOut).
	SamplesMs []float64 `json:"samples_ms"`
	MedianMs  float64   `json:"median_ms"`
	MaxMs     float64   `json:"max_ms"`
	TimedOut  int       `json:"timed_out,omitempty"`
	// Moved: partitions the member held, per repeat.
	Moved []int `json:"moved"`
}

// Fill sets MedianMs and MaxMs from SamplesMs (nearest rank: the lower
// middle of an even count).
func (s *RebalanceScenario) Fill() {
	if len(s.SamplesMs) == 0 {
		return
	}
	sorted := slices.Sorted(slices.Values(s.SamplesMs))
	s.MedianMs = sorted[int(math.Ceil(0.5*float64(len(sorted))))-1]
	s.MaxMs = sorted[len(sorted)-1]
}

// TargetMs is the scenario's target: TargetLeaveMs for a clean leave,
// the session timeout plus TargetKillOverSessionMs for a member cut off.
func (s RebalanceScenario) TargetMs() float64 {
	if s.Event == EventKill {
		return s.SessionTimeoutMs + TargetKillOverSessionMs
	}
	return TargetLeaveMs
}

// rebalanceRatios states each scenario's slowest repeat against its
// target, its median and samples beside it.
func rebalanceRatios(w Workload) []Ratio {
	var out []Ratio
	for _, s := range w.Rebalance.Scenarios {
		if len(s.SamplesMs) == 0 {
			continue
		}
		bound := fmt.Sprintf("median %.0f ms of %d (%s ms); session %s, heartbeat %s (%s)", s.MedianMs, len(s.SamplesMs),
			FormatMs(s.SamplesMs), formatSeconds(s.SessionTimeoutMs), formatSeconds(s.HeartbeatIntervalMs), s.SetBy)
		if s.TimedOut > 0 {
			bound += fmt.Sprintf("; %d timed out", s.TimedOut)
		}
		out = append(out, ratio(w.Name, s.Protocol+" "+s.Event+" → consuming, max", "ms", bound, s.MaxMs, s.TargetMs(), false))
	}
	return out
}

// groupLines is what a group workload adds to its entry in the table.
func groupLines(wl Workload) string {
	var line string
	if g := wl.Group; g != nil {
		line += fmt.Sprintf("\n  %-17s %d %s members (%s) of group %s: first record after %.2f s, %d assignments, %d records read again",
			"", g.Members, g.Protocol, g.Client, g.Group, g.JoinSeconds, g.Assignments, g.Reread)
	}
	if r := wl.Rebalance; r != nil {
		line += fmt.Sprintf("\n  %-17s %d groups per scenario (events %.1f s apart) of %d members on %d partitions fed %.0f records/s",
			"", r.Repeats, r.StaggerMs/1000, r.Members, r.Partitions, r.FeedRecordsPerSec)
		for _, s := range r.Scenarios {
			line += fmt.Sprintf("\n  %-17s %s %s: median %.0f ms, max %.0f ms (session %s, heartbeat %s, %s)", "",
				s.Protocol, s.Event, s.MedianMs, s.MaxMs, formatSeconds(s.SessionTimeoutMs), formatSeconds(s.HeartbeatIntervalMs), s.SetBy)
		}
	}
	return line
}

// FormatMs writes ms as "812 903 1204".
func FormatMs(ms []float64) string {
	parts := make([]string, len(ms))
	for i, v := range ms {
		parts[i] = fmt.Sprintf("%.0f", v)
	}
	return strings.Join(parts, " ")
}

// formatSeconds writes milliseconds as seconds, "6s" or "0.5s".
func formatSeconds(ms float64) string {
	return fmt.Sprintf("%gs", ms/1000)
}
