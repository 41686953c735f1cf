package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/strata-log/strata/client"
	"github.com/strata-log/strata/internal/cli"
	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/ledger/bookies"
	"github.com/strata-log/strata/ledger/replication"
	"github.com/strata-log/strata/metad/metaclient"
	"github.com/strata-log/strata/proto/brokerpb"
)

// clusterWatchInterval is how often status --watch refreshes.
const clusterWatchInterval = 2 * time.Second

// minWritableBookies is the default ensemble: fewer writable bookies and
// new ledgers cannot be created.
const minWritableBookies = 3

func newClusterStatusCommand(g *globalOptions) *cobra.Command {
	var watch bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Health of the whole cluster: metad, brokers and partitions, bookies, ledger replication",
		Long: `Shows metad's members and leader, the brokers and the partitions they own,
the bookies and their state, and how many ledgers are under-replicated.

Exits 2 when the cluster is unhealthy: metad has no leader or a member is
unreachable, no broker answers or a registered one fails its /readyz, a
partition has no owner, or a bookie is
down or read-only while fewer than 3 are writable. Under-replicated ledgers
(and bookies down with 3 still writable) are warnings. --watch refreshes
every 2 s until Ctrl-C.`,
		Args: cobra.NoArgs,
		RunE: cli.Run(func(cmd *cobra.Command, _ []string) error {
			eps, err := g.endpoints()
			if err != nil {
				return err
			}
			meta, err := g.metaClient()
			if err != nil {
				return err
			}
			defer meta.Close()
			ctx := cmd.Context()
			brokers := &brokerConn{g: g}
			defer brokers.close()
			p := g.printer(cmd)
			for {
				roundCtx, cancel := context.WithTimeout(ctx, g.timeout)
				rep := collectClusterReport(roundCtx, g, meta, eps, brokers)
				cancel()
				if watch && ctx.Err() != nil {
					return nil
				}
				if watch && p.Format != cli.FormatJSON {
					fmt.Fprint(p.W, "\x1b[H\x1b[2J")
					fmt.Fprintf(p.W, "%s (every %s, Ctrl-C stops)\n\n", time.Now().Format(time.TimeOnly), clusterWatchInterval)
				}
				if err := printClusterReport(p, rep); err != nil {
					return err
				}
				if !watch {
					if !rep.Healthy {
						return cli.Exit(cli.ExitUsage, fmt.Errorf("cluster unhealthy: %s", strings.Join(rep.Problems, "; ")))
					}
					return nil
				}
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(clusterWatchInterval):
				}
			}
		}),
	}
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "refresh every 2 s until interrupted")
	return cmd
}

// clusterReport is what cluster status shows (and prints as JSON).
type clusterReport struct {
	Healthy         bool               `json:"healthy"`
	Problems        []string           `json:"problems"`
	Warnings        []string           `json:"warnings"`
	Metad           *cli.ClusterStatus `json:"metad"`
	Brokers         brokersReport      `json:"brokers"`
	Bookies         []bookieRow        `json:"bookies"`
	Ledgers         int                `json:"ledgers"`
	UnderReplicated int                `json:"under_replicated_ledgers"`
}

type brokersReport struct {
	ControllerID string      `json:"controller_id"`
	Topics       int32       `json:"topics"`
	Partitions   int32       `json:"partitions"`
	Unowned      int32       `json:"unowned_partitions"`
	Brokers      []brokerRow `json:"brokers"`
	Error        string      `json:"error,omitempty"`
}

type brokerRow struct {
	ID           string `json:"id"`
	Address      string `json:"address"`
	AdminAddress string `json:"admin_address"`
	Rack         string `json:"rack,omitempty"`
	State        string `json:"state"`
	Assigned     int32  `json:"partitions_assigned"`
	Owned        int32  `json:"partitions_owned"`
	StartedAtMs  int64  `json:"started_at_ms"`
	// Health is what the broker's admin /readyz said: "ok", "not-ready"
	// or "unreachable" (a registration outlives a killed broker until its
	// lease expires).
	Health string `json:"health"`
}

// brokerStatusTimeout bounds the brokers' part of a status round: a
// status command should say "unreachable" quickly.
const brokerStatusTimeout = 5 * time.Second

// brokerConn is status's broker client, connected on first use and kept
// across --watch rounds.
type brokerConn struct {
	g *globalOptions
	c *client.Client
}

func (b *brokerConn) describe(ctx context.Context) (*brokerpb.DescribeClusterResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, min(brokerStatusTimeout, b.g.timeout))
	defer cancel()
	if b.c == nil {
		c, err := b.g.brokerClient(ctx)
		if err != nil {
			if addrs, aerr := b.g.brokers(); aerr == nil && ctx.Err() != nil {
				return nil, fmt.Errorf("no broker answered at %s within %s", strings.Join(addrs, ","), min(brokerStatusTimeout, b.g.timeout))
			}
			return nil, err
		}
		b.c = c
	}
	return b.c.DescribeCluster(ctx)
}

func (b *brokerConn) close() {
	if b.c != nil {
		b.c.Close()
	}
}

func collectClusterReport(ctx context.Context, g *globalOptions, meta *metaclient.Client, eps []string, brokers *brokerConn) *clusterReport {
	rep := &clusterReport{Problems: []string{}, Warnings: []string{}, Bookies: []bookieRow{}}
	rep.Brokers.Brokers = []brokerRow{}
	// The brokers answer (or time out) while metad and bookies are read.
	type described struct {
		d   *brokerpb.DescribeClusterResponse
		err error
	}
	brokersDone := make(chan described, 1)
	go func() {
		d, err := brokers.describe(ctx)
		brokersDone <- described{d, err}
	}()
	rep.Metad = cli.CollectStatus(ctx, meta, eps, min(statusProbeTimeout, g.timeout), cli.DefaultLagThreshold)
	for _, p := range rep.Metad.Problems() {
		rep.Problems = append(rep.Problems, "metad: "+p)
	}
	res := <-brokersDone
	collectBrokers(rep, res.d, res.err)
	probeBrokers(ctx, rep, min(statusProbeTimeout, g.timeout))
	collectBookies(ctx, meta, rep)
	collectLedgers(ctx, meta, rep)
	rep.Healthy = len(rep.Problems) == 0
	return rep
}

// collectBrokers fills rep.Brokers from a DescribeCluster answer (or its
// error), noting problems.
func collectBrokers(rep *clusterReport, d *brokerpb.DescribeClusterResponse, err error) {
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
		if info.GetState() == brokerpb.BrokerState_BROKER_DRAINING {
			state = "draining"
		}
		rep.Brokers.Brokers = append(rep.Brokers.Brokers, brokerRow{ID: info.GetId(), Address: info.GetAddress(),
			AdminAddress: info.GetAdminAddress(), Rack: info.GetRack(), State: state,
			Assigned: b.GetPartitionsAssigned(), Owned: b.GetPartitionsOwned(), StartedAtMs: info.GetStartedAtMs()})
	}
	sort.Slice(rep.Brokers.Brokers, func(i, j int) bool { return rep.Brokers.Brokers[i].ID < rep.Brokers.Brokers[j].ID })
	switch {
	case len(rep.Brokers.Brokers) == 0:
		rep.Problems = append(rep.Problems, "brokers: none registered")
	case rep.Brokers.ControllerID == "":
		rep.Problems = append(rep.Problems, "brokers: no controller")
	}
	if n := rep.Brokers.Unowned; n > 0 {
		rep.Problems = append(rep.Problems, fmt.Sprintf("brokers: %d partitions without an owner", n))
	}
}

// probeBrokers asks each broker's admin /readyz whether it serves; one
// that does not is a problem.
func probeBrokers(ctx context.Context, rep *clusterReport, timeout time.Duration) {
	hc := &http.Client{Timeout: timeout}
	var wg sync.WaitGroup
	for i := range rep.Brokers.Brokers {
		b := &rep.Brokers.Brokers[i]
		if b.AdminAddress == "" {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.Health = "unreachable"
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+b.AdminAddress+"/readyz", nil)
			if err != nil {
				return
			}
			resp, err := hc.Do(req)
			if err != nil {
				return
			}
			resp.Body.Close()
			b.Health = "ok"
			if resp.StatusCode != http.StatusOK {
				b.Health = "not-ready"
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

// collectBookies lists the bookies into rep: a bookie down or read-only
// is a problem when fewer than minWritableBookies are writable, a warning
// otherwise.
func collectBookies(ctx context.Context, meta *metaclient.Client, rep *clusterReport) {
	known, err := bookies.List(ctx, meta)
	if err != nil {
		rep.Problems = append(rep.Problems, "bookies: "+err.Error())
		return
	}
	writable, unwell := 0, []string{}
	for _, k := range known {
		r := bookieRow{ID: k.ID, State: k.State()}
		if k.Cookie != nil {
			r.Instance = k.Cookie.InstanceId
		}
		if k.Info != nil {
			r.Address, r.FreeBytes, r.TotalBytes, r.Rack = k.Info.Address, k.Info.FreeBytes, k.Info.TotalBytes, k.Info.Rack
		}
		rep.Bookies = append(rep.Bookies, r)
		if r.State == "writable" {
			writable++
		} else {
			unwell = append(unwell, r.ID+" "+r.State)
		}
	}
	switch {
	case writable < minWritableBookies:
		msg := fmt.Sprintf("bookies: %d writable, fewer than %d", writable, minWritableBookies)
		if len(unwell) > 0 {
			msg += " (" + strings.Join(unwell, ", ") + ")"
		}
		rep.Problems = append(rep.Problems, msg)
	case len(unwell) > 0:
		rep.Warnings = append(rep.Warnings, "bookies: "+strings.Join(unwell, ", "))
	}
}

// collectLedgers counts ledgers and under-replicated ones (a fragment on
// a bookie that is missing or decommissioned, as the replicator's audit
// judges it): a warning, the replicator repairs them.
func collectLedgers(ctx context.Context, meta *metaclient.Client, rep *clusterReport) {
	r, err := replication.Inspect(ctx, replication.MetaKV(meta), ledger.NewMetadStore(meta), time.Now())
	if err != nil {
		rep.Warnings = append(rep.Warnings, "ledgers: "+err.Error())
		return
	}
	rep.Ledgers, rep.UnderReplicated = r.Ledgers, r.UnderReplicated
	if r.UnderReplicated > 0 {
		rep.Warnings = append(rep.Warnings, fmt.Sprintf("ledgers: %d under-replicated", r.UnderReplicated))
	}
}

func printClusterReport(p *cli.Printer, rep *clusterReport) error {
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
	b := rep.Brokers
	if b.Error != "" {
		fmt.Fprintf(w, "\nBROKERS  unreachable: %s\n", b.Error)
	} else {
		fmt.Fprintf(w, "\nBROKERS  controller %s, %d topics, %d partitions, %d without an owner\n",
			dash(b.ControllerID), b.Topics, b.Partitions, b.Unowned)
		tw := tabwriter.NewWriter(w, 0, 2, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tADDRESS\tADMIN\tSTATE\tASSIGNED\tOWNED\tRACK\tHEALTH")
		for _, r := range b.Brokers {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", r.ID, r.Address, dash(r.AdminAddress), r.State, r.Assigned, r.Owned,
				dash(r.Rack), dash(r.Health))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	fmt.Fprintf(w, "\nBOOKIES\n")
	tw := tabwriter.NewWriter(w, 0, 2, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tADDRESS\tFREE\tTOTAL\tRACK")
	for _, r := range rep.Bookies {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.State, dash(r.Address), cli.Bytes(r.FreeBytes), cli.Bytes(r.TotalBytes), dash(r.Rack))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nLEDGERS  %d, %d under-replicated\n\n", rep.Ledgers, rep.UnderReplicated)
	return printVerdict(w, rep)
}

func printVerdict(w io.Writer, rep *clusterReport) error {
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
