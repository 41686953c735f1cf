package cluster

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/strata-log/strata/cmd/strata/internal/cli"
	"github.com/strata-log/strata/ledger/bookies"
	"github.com/strata-log/strata/ledger/ledgermetad"
	"github.com/strata-log/strata/ledger/replication"
	"github.com/strata-log/strata/metad/metaclient"
	"github.com/strata-log/strata/proto/brokerpb"
)

// MinWritableBookies is the default ensemble: fewer writable bookies and
// new ledgers cannot be created.
const MinWritableBookies = 3

// Report is what cluster status shows (and prints as JSON).
type Report struct {
	Healthy         bool               `json:"healthy"`
	Problems        []string           `json:"problems"`
	Warnings        []string           `json:"warnings"`
	Metad           *cli.ClusterStatus `json:"metad"`
	Brokers         BrokersReport      `json:"brokers"`
	Bookies         []BookieRow        `json:"bookies"`
	Ledgers         int                `json:"ledgers"`
	UnderReplicated int                `json:"under_replicated_ledgers"`
}

type BrokersReport struct {
	ControllerID string      `json:"controller_id"`
	Topics       int32       `json:"topics"`
	Partitions   int32       `json:"partitions"`
	Unowned      int32       `json:"unowned_partitions"`
	Brokers      []BrokerRow `json:"brokers"`
	Error        string      `json:"error,omitempty"`
}

type BrokerRow struct {
	ID           string `json:"id"`
	Address      string `json:"address"`
	AdminAddress string `json:"admin_address"`
	Rack         string `json:"rack,omitempty"`
	// State is "active", "drained" (an operator's drain: running, given
	// no partitions; `strata broker undrain` ends it) or "draining"
	// (shutting down).
	State       string `json:"state"`
	Drained     bool   `json:"drained"`
	Assigned    int32  `json:"partitions_assigned"`
	Owned       int32  `json:"partitions_owned"`
	StartedAtMs int64  `json:"started_at_ms"`
	// Health is what the broker's admin /readyz said: "ok", "not-ready"
	// or "unreachable" (a registration outlives a killed broker until its
	// lease expires).
	Health string `json:"health"`
}

// Describer answers DescribeCluster: the brokers' side of a report.
type Describer func(ctx context.Context) (*brokerpb.DescribeClusterResponse, error)

// Collect gathers one report: metad's status from eps (each member
// probed within probeTimeout), the brokers from describe (asked while
// metad and the bookies are read) and their /readyz, the bookies and the
// ledgers from meta. adminTLS (nil: plain http) is how the brokers' admin
// addresses are probed (cli.ProbeHTTP).
func Collect(ctx context.Context, meta *metaclient.Client, eps []string, describe Describer, probeTimeout time.Duration, adminTLS *tls.Config) *Report {
	rep := &Report{Problems: []string{}, Warnings: []string{}, Bookies: []BookieRow{}}
	rep.Brokers.Brokers = []BrokerRow{}
	// The brokers answer (or time out) while metad and bookies are read.
	type described struct {
		d   *brokerpb.DescribeClusterResponse
		err error
	}
	brokersDone := make(chan described, 1)
	go func() {
		d, err := describe(ctx)
		brokersDone <- described{d, err}
	}()
	rep.Metad = cli.CollectStatus(ctx, meta, eps, probeTimeout, cli.DefaultLagThreshold)
	for _, p := range rep.Metad.Problems() {
		rep.Problems = append(rep.Problems, "metad: "+p)
	}
	res := <-brokersDone
	CollectBrokers(rep, res.d, res.err)
	ProbeBrokers(ctx, rep, probeTimeout, adminTLS)
	CollectBookies(ctx, meta, rep)
	CollectLedgers(ctx, meta, rep)
	rep.Healthy = len(rep.Problems) == 0
	return rep
}

// CollectBrokers fills rep.Brokers from a DescribeCluster answer (or its
// error), noting problems.
func CollectBrokers(rep *Report, d *brokerpb.DescribeClusterResponse, err error) {
	if err != nil {
		rep.Brokers.Error = err.Error()
		rep.Problems = append(rep.Problems, "brokers: unreachable: "+cli.ServerMessage(err))
		return
	}
	rep.Brokers.ControllerID = d.GetControllerId()
	rep.Brokers.Topics, rep.Brokers.Partitions, rep.Brokers.Unowned = d.GetTopics(), d.GetPartitions(), d.GetUnownedPartitions()
	for _, b := range d.GetBrokers() {
		info := b.GetInfo()
		state := "active"
		switch {
		case info.GetState() == brokerpb.BrokerState_BROKER_DRAINING:
			state = "draining" // shutting down
		case b.GetDrained():
			state = "drained" // strata broker drain: running, given no partitions
		}
		rep.Brokers.Brokers = append(rep.Brokers.Brokers, BrokerRow{ID: info.GetId(), Address: info.GetAddress(),
			AdminAddress: info.GetAdminAddress(), Rack: info.GetRack(), State: state, Drained: b.GetDrained(),
			Assigned: b.GetPartitionsAssigned(), Owned: b.GetPartitionsOwned(), StartedAtMs: info.GetStartedAtMs()})
	}
	sort.Slice(rep.Brokers.Brokers, func(i, j int) bool { return rep.Brokers.Brokers[i].ID < rep.Brokers.Brokers[j].ID })
	switch {
	case len(rep.Brokers.Brokers) == 0:
		rep.Problems = append(rep.Problems, "brokers: none registered")
	case rep.Brokers.ControllerID == "":
		rep.Problems = append(rep.Problems, "brokers: no controller")
	}
	for _, r := range rep.Brokers.Brokers {
		if r.Drained {
			rep.Warnings = append(rep.Warnings, fmt.Sprintf("broker %s: drained, holds no partitions until 'strata broker undrain %s'", r.ID, r.ID))
		}
	}
	if n := rep.Brokers.Unowned; n > 0 {
		rep.Problems = append(rep.Problems, fmt.Sprintf("brokers: %d partitions without an owner", n))
	}
}

// ProbeBrokers asks each broker's admin /readyz whether it serves (over
// https first with adminTLS, cli.ProbeHTTP); one that does not is a
// problem.
func ProbeBrokers(ctx context.Context, rep *Report, timeout time.Duration, adminTLS *tls.Config) {
	var wg sync.WaitGroup
	for i := range rep.Brokers.Brokers {
		b := &rep.Brokers.Brokers[i]
		if b.AdminAddress == "" {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			code, _, err := cli.ProbeHTTP(ctx, b.AdminAddress, "/readyz", adminTLS)
			switch {
			case err != nil:
				b.Health = "unreachable"
			case code != http.StatusOK:
				b.Health = "not-ready"
			default:
				b.Health = "ok"
			}
		}()
	}
	wg.Wait()
	for _, b := range rep.Brokers.Brokers {
		if b.Health != "" && b.Health != "ok" {
			rep.Problems = append(rep.Problems, fmt.Sprintf("broker %s: %s", b.ID, b.Health))
		}
	}
}

// CollectBookies lists the bookies into rep: a bookie down or read-only
// is a problem when fewer than MinWritableBookies are writable, a warning
// otherwise.
func CollectBookies(ctx context.Context, meta *metaclient.Client, rep *Report) {
	known, err := bookies.List(ctx, meta)
	if err != nil {
		rep.Problems = append(rep.Problems, "bookies: "+err.Error())
		return
	}
	for _, k := range known {
		rep.Bookies = append(rep.Bookies, NewBookieRow(k))
	}
	judgeBookies(rep)
}

// judgeBookies notes the bookies of rep that are not writable: problems
// when fewer than MinWritableBookies are writable, warnings otherwise.
func judgeBookies(rep *Report) {
	writable, unwell := 0, []string{}
	for _, r := range rep.Bookies {
		if r.State == "writable" {
			writable++
		} else {
			unwell = append(unwell, r.ID+" "+r.State)
		}
	}
	switch {
	case writable < MinWritableBookies:
		msg := fmt.Sprintf("bookies: %d writable, fewer than %d", writable, MinWritableBookies)
		if len(unwell) > 0 {
			msg += " (" + strings.Join(unwell, ", ") + ")"
		}
		rep.Problems = append(rep.Problems, msg)
	case len(unwell) > 0:
		rep.Warnings = append(rep.Warnings, "bookies: "+strings.Join(unwell, ", "))
	}
}

// CollectLedgers counts ledgers and under-replicated ones (a fragment on
// a bookie that is missing or decommissioned, as the replicator's audit
// judges it): a warning, the replicator repairs them.
func CollectLedgers(ctx context.Context, meta *metaclient.Client, rep *Report) {
	r, err := replication.Inspect(ctx, replication.MetaKV(meta), ledgermetad.NewStore(meta), time.Now())
	if err != nil {
		rep.Warnings = append(rep.Warnings, "ledgers: "+err.Error())
		return
	}
	rep.Ledgers, rep.UnderReplicated = r.Ledgers, r.UnderReplicated
	if r.UnderReplicated > 0 {
		rep.Warnings = append(rep.Warnings, fmt.Sprintf("ledgers: %d under-replicated", r.UnderReplicated))
	}
}

// Print prints rep: JSON, or a section per role and the verdict.
func Print(p *cli.Printer, rep *Report) error {
	if p.Format == cli.FormatJSON {
		return p.JSON(rep)
	}
	w := p.W
	leader := "none"
	if l := rep.Metad.Leader; l != nil {
		leader = l.ID + " (" + l.Address + ")"
	}
	fmt.Fprintf(w, "METAD  leader %s, %d members\n", leader, len(rep.Metad.Members))
	if err := p.Status(rep.Metad); err != nil {
		return err
	}
	if err := printBrokers(w, rep.Brokers); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nBOOKIES\n")
	tw := tabwriter.NewWriter(w, 0, 2, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tADDRESS\tFREE\tTOTAL\tRACK")
	for _, r := range rep.Bookies {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.State, cli.Dash(r.Address), cli.Bytes(r.FreeBytes), cli.Bytes(r.TotalBytes), cli.Dash(r.Rack))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nLEDGERS  %d, %d under-replicated\n\n", rep.Ledgers, rep.UnderReplicated)
	return printVerdict(w, rep)
}

func printBrokers(w io.Writer, b BrokersReport) error {
	if b.Error != "" {
		fmt.Fprintf(w, "\nBROKERS  unreachable: %s\n", b.Error)
		return nil
	}
	fmt.Fprintf(w, "\nBROKERS  controller %s, %d topics, %d partitions, %d without an owner\n",
		cli.Dash(b.ControllerID), b.Topics, b.Partitions, b.Unowned)
	tw := tabwriter.NewWriter(w, 0, 2, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tADDRESS\tADMIN\tSTATE\tASSIGNED\tOWNED\tRACK\tHEALTH")
	for _, r := range b.Brokers {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", r.ID, r.Address, cli.Dash(r.AdminAddress), r.State, r.Assigned, r.Owned,
			cli.Dash(r.Rack), cli.Dash(r.Health))
	}
	return tw.Flush()
}

// printVerdict prints the warnings, the problems and the verdict line.
func printVerdict(w io.Writer, rep *Report) error {
	for _, warn := range rep.Warnings {
		fmt.Fprintf(w, "warning: %s\n", warn)
	}
	for _, prob := range rep.Problems {
		fmt.Fprintf(w, "problem: %s\n", prob)
	}
	verdict := "healthy"
	if !rep.Healthy {
		verdict = "UNHEALTHY"
	}
	_, err := fmt.Fprintf(w, "cluster %s\n", verdict)
	return err
}
