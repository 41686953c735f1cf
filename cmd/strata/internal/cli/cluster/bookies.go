package cluster

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/strata-log/strata/cmd/strata/internal/cli"
	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/ledger/bookies"
	"github.com/strata-log/strata/ledger/replication"
)

// BookieRow is one bookie as metad knows it.
type BookieRow struct {
	ID         string `json:"id"`
	State      string `json:"state"`
	Address    string `json:"address,omitempty"`
	FreeBytes  uint64 `json:"free_bytes"`
	TotalBytes uint64 `json:"total_bytes"`
	Rack       string `json:"rack,omitempty"`
	Instance   string `json:"instance,omitempty"`
}

// NewBookieRow is k's row: its cookie's instance and, when registered,
// its address, disk space and rack.
func NewBookieRow(k bookies.Known) BookieRow {
	r := BookieRow{ID: k.ID, State: k.State()}
	if k.Cookie != nil {
		r.Instance = k.Cookie.InstanceId
	}
	if k.Info != nil {
		r.Address, r.FreeBytes, r.TotalBytes, r.Rack = k.Info.Address, k.Info.FreeBytes, k.Info.TotalBytes, k.Info.Rack
	}
	return r
}

// PrintBookies prints the bookies of `strata cluster bookies`: a table,
// or a JSON array.
func PrintBookies(p *cli.Printer, known []bookies.Known) error {
	rows := make([]BookieRow, 0, len(known))
	for _, k := range known {
		rows = append(rows, NewBookieRow(k))
	}
	if p.Format == cli.FormatJSON {
		return p.JSON(rows)
	}
	tw := tabwriter.NewWriter(p.W, 0, 2, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tADDRESS\tFREE\tTOTAL\tRACK\tINSTANCE")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.State, cli.Dash(r.Address),
			cli.Bytes(r.FreeBytes), cli.Bytes(r.TotalBytes), cli.Dash(r.Rack), r.Instance)
	}
	return tw.Flush()
}

// BookieListRow is one bookie of `strata bookie list`: with the ledgers
// that name it and whether it is decommissioned.
type BookieListRow struct {
	BookieRow
	Ledgers        int  `json:"ledgers"`
	Decommissioned bool `json:"decommissioned"`
}

// bookieList is `strata bookie list --output json`.
type bookieList struct {
	Bookies         []BookieListRow `json:"bookies"`
	Ledgers         int             `json:"ledgers"`
	UnderReplicated int             `json:"under_replicated_ledgers"`
	Replicator      string          `json:"replicator,omitempty"`
}

// BookieListRows joins the bookies metad knows with the replication
// state: the ledgers on each and the decommissioned ones.
func BookieListRows(known []bookies.Known, rep *replication.Report) []BookieListRow {
	decommissioned := map[string]bool{}
	for _, d := range rep.Decommissions {
		decommissioned[d.BookieID] = true
	}
	rows := make([]BookieListRow, 0, len(known))
	for _, k := range known {
		r := BookieListRow{BookieRow: NewBookieRow(k), Decommissioned: decommissioned[k.ID]}
		if k.Info != nil {
			r.Ledgers = rep.LedgersOn[k.Info.Address]
		}
		rows = append(rows, r)
	}
	return rows
}

// PrintBookieList prints `strata bookie list`: JSON, or a table, the
// under-replicated count and the replicator.
func PrintBookieList(p *cli.Printer, known []bookies.Known, rep *replication.Report) error {
	rows := BookieListRows(known, rep)
	if p.Format == cli.FormatJSON {
		leader := ""
		if rep.Leader != nil {
			leader = rep.Leader.ID
		}
		return p.JSON(bookieList{rows, rep.Ledgers, rep.UnderReplicated, leader})
	}
	tw := tabwriter.NewWriter(p.W, 0, 2, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tADDRESS\tLEDGERS\tDECOMMISSIONED\tFREE\tTOTAL\tRACK")
	for _, r := range rows {
		ledgers := "-"
		if r.Address != "" {
			ledgers = fmt.Sprint(r.Ledgers)
		}
		dec := "-"
		if r.Decommissioned {
			dec = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.State, cli.Dash(r.Address), ledgers, dec,
			cli.Bytes(r.FreeBytes), cli.Bytes(r.TotalBytes), cli.Dash(r.Rack))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(p.W, "under-replicated ledgers: %d of %d\n", rep.UnderReplicated, rep.Ledgers)
	fmt.Fprintf(p.W, "replicator: %s\n", ReplicatorText(rep.Leader))
	return nil
}

// ReplicatorText names the elected replicator and since when, or says
// that none runs.
func ReplicatorText(l *replication.LeaderRecord) string {
	if l == nil {
		return "none running (start bookies with --autorecovery): nothing is re-replicated"
	}
	return fmt.Sprintf("%s (leading since %s)", l.ID, time.UnixMilli(l.SinceMs).UTC().Format(time.RFC3339))
}

// drainJSON is a decommission's progress in JSON.
type drainJSON struct {
	BookieID   string   `json:"bookie_id"`
	Addresses  []string `json:"addresses"`
	Ledgers    int      `json:"ledgers"`
	Fragments  int      `json:"fragments"`
	Drained    bool     `json:"drained"`
	Replicator string   `json:"replicator,omitempty"`
}

// PrintDrain prints a decommission's progress: JSON, or a line saying
// what remains, or, once drained, what to do next.
func PrintDrain(p *cli.Printer, d replication.Drain) error {
	if p.Format == cli.FormatJSON {
		out := drainJSON{BookieID: d.Decommission.BookieID, Addresses: d.Addresses, Ledgers: d.Ledgers,
			Fragments: d.Fragments, Drained: d.Drained()}
		if d.Leader != nil {
			out.Replicator = d.Leader.ID
		}
		return p.JSON(out)
	}
	if d.Drained() {
		_, err := fmt.Fprintf(p.W, "OK bookie %s drained: no ledger names %s. Stop it; to retire its id for good: strata meta del %s\n",
			d.Decommission.BookieID, strings.Join(d.Addresses, ","), bookies.CookiePrefix+d.Decommission.BookieID)
		return err
	}
	_, err := fmt.Fprintf(p.W, "%s; replicator: %s\n", d.String(), ReplicatorText(d.Leader))
	return err
}

// WatchDrain prints how far the decommission of bookie id got: once, or
// with wait every interval until it is drained or ctx ends (watchProgress).
func WatchDrain(ctx context.Context, kv replication.KV, store ledger.MetadataStore, id string, wait bool,
	interval time.Duration, p *cli.Printer, stderr io.Writer) error {
	read := func(ctx context.Context) (replication.Drain, error) { return replication.Progress(ctx, kv, store, id) }
	show := func(s replication.Drain) error { return PrintDrain(p, s) }
	return watchProgress(ctx, "bookie "+id, read, show, wait, interval, stderr)
}

// watchProgress prints what read returns: once, or with wait every
// interval until it is drained or ctx ends. While waiting, a read that
// fails is reported on stderr and tried again.
func watchProgress[T interface{ Drained() bool }](ctx context.Context, what string, read func(context.Context) (T, error),
	show func(T) error, wait bool, interval time.Duration, stderr io.Writer) error {
	for {
		s, err := read(ctx)
		switch {
		case err != nil && (!wait || ctx.Err() != nil):
			return err
		case err != nil:
			fmt.Fprintf(stderr, "strata: reading progress: %v\n", err)
		default:
			if err := show(s); err != nil {
				return err
			}
			if s.Drained() || !wait {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not drained yet: %w", what, ctx.Err())
		case <-time.After(interval):
		}
	}
}
