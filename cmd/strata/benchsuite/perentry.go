package benchsuite

import (
	"fmt"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
)

// What a ledger entry costs. A broker appends one ledger entry per
// record batch per partition (broker/partlog/doc.go) and sends it to the
// write quorum of bookies, each of which adds it: work per entry, which
// does not shrink as batches fill. The nodes count the entries
// themselves: a broker's appends are MetricAppendSeconds's _count (the
// batches its partition logs appended and had acknowledged), a bookie's
// adds MetricAddSeconds's _count (the adds it made durable).
const (
	// MetricMallocs is the Go collector's count of heap objects a process
	// allocated, tiny allocations included (internal/node registers the
	// collector on every node); MetricHeapAllocObjects is the runtime's
	// own count, without the tiny ones, read when the first is missing.
	MetricMallocs          = "go_memstats_mallocs_total"
	MetricHeapAllocObjects = "go_gc_heap_allocs_objects_total"
)

// Roles whose entries are counted.
const (
	roleBroker = "broker"
	roleBookie = "bookie"
)

// NodeScrape is one node's /metrics before and after a workload (nil
// where the node did not answer).
type NodeScrape struct {
	Name, Role    string
	Before, After Samples
}

// delta is the growth of metric over the workload, and whether both
// scrapes have it.
func (n NodeScrape) delta(metric string) (float64, bool) {
	b, okB := n.Before[metric]
	a, okA := n.After[metric]
	if !okA || !okB {
		return 0, false
	}
	return a - b, true
}

// Entries are the ledger entries a workload's nodes handled, as they
// counted them.
type Entries struct {
	// Appended: entries the brokers appended and had acknowledged
	// (strata_broker_append_duration_seconds_count), summed over them.
	Appended float64 `json:"appended"`
	// Adds: entry copies the bookies made durable
	// (strata_bookie_add_latency_seconds_count), summed: Appended × the
	// write quorum, plus what compaction and recovery wrote.
	Adds float64 `json:"adds"`
	// PerProcess: each node's own count, a broker's appends and a
	// bookie's adds.
	PerProcess map[string]float64 `json:"per_process"`
}

// entryMetric is the counter of the entries a node of role handles
// ("" for the roles that handle none).
func entryMetric(role string) string {
	switch role {
	case roleBroker:
		return MetricAppendSeconds + "_count"
	case roleBookie:
		return MetricAddSeconds + "_count"
	}
	return ""
}

// EntriesDelta counts the entries each broker appended and each bookie
// added over the workload; nil when no node exports its counter.
func EntriesDelta(nodes []NodeScrape) *Entries {
	e := &Entries{PerProcess: map[string]float64{}}
	for _, n := range nodes {
		metric := entryMetric(n.Role)
		if metric == "" {
			continue
		}
		d, ok := n.delta(metric)
		if !ok {
			continue
		}
		e.PerProcess[n.Name] = d
		if n.Role == roleBroker {
			e.Appended += d
		} else {
			e.Adds += d
		}
	}
	if len(e.PerProcess) == 0 {
		return nil
	}
	return e
}

// WritesEntries says whether the named workload writes the entries its
// costs are stated per: the catch-up workloads read, and write only a
// group's offset commits.
func WritesEntries(name string) bool { return !IsCatchUp(name) }

// perEntry divides each process's amount by the entries it handled
// (counts, by node name), and each role's by its nodes' entries, counting
// only the nodes with both an amount and a count, so that a node that did
// not answer its scrape leaves both sides. roles maps node names to
// roles; scale multiplies every result. Nodes without entries are left
// out.
func perEntry(amounts, counts map[string]float64, roles map[string]string, scale float64) (byRole, byProcess map[string]float64) {
	byRole, byProcess = map[string]float64{}, map[string]float64{}
	roleAmount, roleCount := map[string]float64{}, map[string]float64{}
	for name, n := range counts {
		a, ok := amounts[name]
		if !ok || n <= 0 {
			continue
		}
		byProcess[name] = finite(a / n * scale)
		roleAmount[roles[name]] += a
		roleCount[roles[name]] += n
	}
	for role, n := range roleCount {
		byRole[role] = finite(roleAmount[role] / n * scale)
	}
	if len(byProcess) == 0 {
		return nil, nil
	}
	return byRole, byProcess
}

// nodeRoles maps the nodes' names to their roles.
func nodeRoles(nodes []NodeScrape) map[string]string {
	roles := map[string]string{}
	for _, n := range nodes {
		roles[n.Name] = n.Role
	}
	return roles
}

// FillPerEntry computes PerEntryUsByRole and PerEntryUsByProcess from
// PerProcess and e (nil: none): microseconds of CPU per entry a broker
// appended and per add a bookie made. A role's figure is its nodes' CPU
// ÷ their entries, so the bookies' is what one bookie spends per copy it
// stores: their CPU ÷ (entries × write quorum), which is one bookie's
// CPU ÷ (entries × write quorum ÷ bookies) when the copies spread evenly.
func (c *CPU) FillPerEntry(e *Entries, nodes []NodeScrape) {
	if e == nil {
		return
	}
	c.PerEntryUsByRole, c.PerEntryUsByProcess = perEntry(c.PerProcess, e.PerProcess, nodeRoles(nodes), 1e6)
}

// PerEntrySummary is "CPU per entry: broker 77 µs, bookie 45 µs (per
// add); 12,345 entries appended, 37,035 adds", "" without figures.
func (c CPU) PerEntrySummary() string {
	if len(c.PerEntryUsByRole) == 0 || c.Entries == nil {
		return ""
	}
	return "CPU per entry: " + byRoleSummary(c.PerEntryUsByRole, "%.0f µs") + "; " + c.Entries.String()
}

// String is "12,345 entries appended, 37,035 adds".
func (e *Entries) String() string {
	return fmt.Sprintf("%s entries appended, %s adds", thousands(e.Appended), thousands(e.Adds))
}

// byRoleSummary is "broker 77 µs, bookie 45 µs (per add)": the broker's
// and the bookie's figures of byRole, in format.
func byRoleSummary(byRole map[string]float64, format string) string {
	var parts []string
	if v, ok := byRole[roleBroker]; ok {
		parts = append(parts, roleBroker+" "+fmt.Sprintf(format, v))
	}
	if v, ok := byRole[roleBookie]; ok {
		parts = append(parts, roleBookie+" "+fmt.Sprintf(format, v)+" (per add)")
	}
	return strings.Join(parts, ", ")
}

// thousands writes v rounded, with commas between thousands.
func thousands(v float64) string {
	s := strconv.FormatFloat(v, 'f', 0, 64)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// Allocs are the heap objects the processes allocated during a workload:
// the allocations the collector then has to sweep, stated per entry as
// CPU is.
type Allocs struct {
	// Counter: the nodes' metric the objects were counted with
	// (MetricMallocs, else MetricHeapAllocObjects).
	Counter string `json:"counter"`
	// PerProcess: objects per node and RoleClient (this process, the
	// producers and consumers, from runtime/metrics: the same count as
	// MetricMallocs); PerRole: summed per role.
	PerProcess map[string]float64 `json:"per_process"`
	PerRole    map[string]float64 `json:"per_role"`
	// PerEntryByRole and PerEntryByProcess: objects per entry a broker
	// appended and per add a bookie made (CPU.Entries), as
	// CPU.FillPerEntry divides CPU.
	PerEntryByRole    map[string]float64 `json:"per_entry_by_role,omitempty"`
	PerEntryByProcess map[string]float64 `json:"per_entry_by_process,omitempty"`
	// ClientPerRecord: this process's objects ÷ the workload's records
	// (produced, or read by a catch-up).
	ClientPerRecord float64 `json:"client_per_record"`
}

// AllocsDelta counts the objects each node allocated over the workload
// (nodes: their scrapes), and this process's (clientObjects, counted by
// the caller around the workload); it divides the nodes' by the entries
// they handled when e is given, and the client's by records. Nil when no
// node exports an allocation counter.
func AllocsDelta(nodes []NodeScrape, e *Entries, clientObjects float64, records int64) *Allocs {
	counter := MetricMallocs
	if !slices.ContainsFunc(nodes, func(n NodeScrape) bool { _, ok := n.delta(MetricMallocs); return ok }) {
		counter = MetricHeapAllocObjects
	}
	a := &Allocs{Counter: counter, PerProcess: map[string]float64{}, PerRole: map[string]float64{}}
	for _, n := range nodes {
		if d, ok := n.delta(counter); ok {
			a.PerProcess[n.Name] = d
			a.PerRole[n.Role] += d
		}
	}
	if len(a.PerProcess) == 0 {
		return nil
	}
	a.PerProcess[RoleClient], a.PerRole[RoleClient] = clientObjects, clientObjects
	if records > 0 {
		a.ClientPerRecord = clientObjects / float64(records)
	}
	if e != nil {
		a.PerEntryByRole, a.PerEntryByProcess = perEntry(a.PerProcess, e.PerProcess, nodeRoles(nodes), 1)
	}
	return a
}

// Summary is "allocations per entry: broker 120, bookie 45 (per add);
// client 3.2 per record" (without the per-entry part when there is
// none).
func (a *Allocs) Summary() string {
	client := fmt.Sprintf("client %.1f per record", a.ClientPerRecord)
	if len(a.PerEntryByRole) == 0 {
		return "allocations: " + client
	}
	return "allocations per entry: " + byRoleSummary(a.PerEntryByRole, "%.0f") + "; " + client
}

// clientObjectMetrics are runtime/metrics' counts of the heap objects
// this process allocated; their sum is what MetricMallocs exports.
var clientObjectMetrics = []string{"/gc/heap/allocs:objects", "/gc/heap/tiny/allocs:objects"}

// HeapObjects is the number of heap objects this process has allocated
// since it started, tiny allocations included (the nodes' MetricMallocs).
func HeapObjects() float64 {
	samples := make([]metrics.Sample, len(clientObjectMetrics))
	for i, name := range clientObjectMetrics {
		samples[i].Name = name
	}
	metrics.Read(samples)
	var n float64
	for _, s := range samples {
		if s.Value.Kind() == metrics.KindUint64 {
			n += float64(s.Value.Uint64())
		}
	}
	return n
}
