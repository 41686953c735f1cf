package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/strata-log/strata/internal/cli"
	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/metad/metaclient"
	"github.com/strata-log/strata/proto/ledgerpb"
)

func newLedgerCommand(g *globalOptions) *cobra.Command {
	l := &cobra.Command{
		Use:   "ledger",
		Short: "Inspect, test and delete ledgers (the replicated logs on the bookies)",
	}
	l.AddCommand(
		newLedgerSimpleTestCommand(g),
		newLedgerListCommand(g),
		newLedgerDescribeCommand(g),
		newLedgerReadCommand(g),
		newLedgerDeleteCommand(g),
	)
	return l
}

// ledgerEnv connects to metad and the bookies; close releases both.
func (g *globalOptions) ledgerEnv() (env ledger.Env, close func(), err error) {
	meta, err := g.metaClient()
	if err != nil {
		return ledger.Env{}, nil, err
	}
	creds, err := g.credentials()
	if err != nil {
		meta.Close()
		return ledger.Env{}, nil, err
	}
	bookies := ledger.NewGRPCBookieClient(ledger.GRPCOptions{DialTimeout: min(ledger.DefaultDialTimeout, g.timeout), Credentials: creds})
	env = ledger.Env{Meta: ledger.NewMetadStore(meta), Bookies: bookies, Registry: ledger.RegistryFromMeta(meta)}
	return env, func() {
		bookies.Close()
		meta.Close()
	}, nil
}

func parseLedgerID(s string) (uint64, error) {
	id, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("ledger id %q: want a non-negative integer", s)
	}
	return id, nil
}

// ledgerError makes the common failures read well.
func ledgerError(id uint64, err error) error {
	if errors.Is(err, ledger.ErrNoSuchLedger) {
		return fmt.Errorf("ledger %d not found", id)
	}
	return err
}

func newLedgerSimpleTestCommand(g *globalOptions) *cobra.Command {
	var cfg ledger.SimpleTestConfig
	cmd := &cobra.Command{
		Use:   "simpletest",
		Short: "Write a test ledger, read it back, verify every byte, delete it",
		Long: "Creates a ledger on the writable bookies, writes --entries entries of --entry-size bytes\n" +
			"(pipelined), closes it, reads every entry back and compares it byte for byte, then deletes\n" +
			"the ledger (unless --keep). Prints progress on stderr, then throughput and add latency.\n" +
			"Exits 0 only if every entry was verified. Without an explicit --timeout it runs until done\n" +
			"or interrupted.",
		Args: cobra.NoArgs,
		RunE: cli.Run(func(cmd *cobra.Command, _ []string) error {
			if err := cfg.Validate(); err != nil {
				return err
			}
			env, closeEnv, err := g.ledgerEnv()
			if err != nil {
				return err
			}
			defer closeEnv()
			ctx := cmd.Context()
			if cmd.Flags().Changed("timeout") {
				var cancel context.CancelFunc
				ctx, cancel = g.commandContext(cmd)
				defer cancel()
			}
			p := g.printer(cmd)
			stderr := cmd.ErrOrStderr()
			cfg.Progress = func(pr ledger.SimpleTestProgress) {
				fmt.Fprintf(stderr, "%s: %d/%d entries (%.0f%%) in %v\n", pr.Phase, pr.Done, pr.Total,
					100*float64(pr.Done)/float64(max(pr.Total, 1)), pr.Elapsed.Round(time.Millisecond))
			}
			res, err := ledger.RunSimpleTest(ctx, env, cfg)
			if res != nil {
				if perr := printSimpleTest(p, res, err); perr != nil {
					return perr
				}
			}
			if err != nil {
				return fmt.Errorf("simpletest failed: %w", err)
			}
			return nil
		}),
	}
	f := cmd.Flags()
	f.IntVar(&cfg.EnsembleSize, "ensemble", ledger.DefaultEnsembleSize, "ensemble size E: bookies the ledger is spread over")
	f.IntVar(&cfg.WriteQuorum, "write-quorum", ledger.DefaultWriteQuorum, "write quorum Qw: copies of each entry")
	f.IntVar(&cfg.AckQuorum, "ack-quorum", ledger.DefaultAckQuorum, "ack quorum Qa: copies fsynced before an entry is acknowledged")
	f.IntVar(&cfg.Entries, "entries", ledger.DefaultSimpleTestEntries, "entries to write")
	f.IntVar(&cfg.EntrySize, "entry-size", ledger.DefaultSimpleTestEntrySize, "bytes per entry")
	f.IntVar(&cfg.MaxInFlight, "max-in-flight", ledger.DefaultSimpleTestMaxInFlight, "entries written and not yet acknowledged, at most")
	f.BoolVar(&cfg.Keep, "keep", false, "keep the ledger instead of deleting it")
	return cmd
}

type simpleTestJSON struct {
	LedgerID      uint64   `json:"ledger_id"`
	Ensemble      []string `json:"ensemble"`
	E             int      `json:"ensemble_size"`
	Qw            int      `json:"write_quorum"`
	Qa            int      `json:"ack_quorum"`
	Entries       int      `json:"entries"`
	EntrySize     int      `json:"entry_size"`
	Bytes         int64    `json:"bytes"`
	WriteSeconds  float64  `json:"write_seconds"`
	WriteMBps     float64  `json:"write_mb_per_second"`
	WriteEntriesS float64  `json:"write_entries_per_second"`
	ReadSeconds   float64  `json:"read_seconds"`
	ReadMBps      float64  `json:"read_mb_per_second"`
	ReadEntriesS  float64  `json:"read_entries_per_second"`
	LatencyP50    float64  `json:"add_latency_p50_ms"`
	LatencyP99    float64  `json:"add_latency_p99_ms"`
	LatencyP999   float64  `json:"add_latency_p999_ms"`
	LatencyMax    float64  `json:"add_latency_max_ms"`
	Verified      int      `json:"verified"`
	Closed        bool     `json:"closed"`
	Deleted       bool     `json:"deleted"`
	DeleteError   string   `json:"delete_error,omitempty"`
	OK            bool     `json:"ok"`
	Error         string   `json:"error,omitempty"`
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func printSimpleTest(p *cli.Printer, r *ledger.SimpleTestResult, testErr error) error {
	if p.Format == cli.FormatJSON {
		out := simpleTestJSON{
			LedgerID: r.LedgerID, Ensemble: r.Ensemble, E: r.E, Qw: r.Qw, Qa: r.Qa,
			Entries: r.Entries, EntrySize: r.EntrySize, Bytes: r.Bytes,
			WriteSeconds: r.WriteTime.Seconds(), WriteMBps: r.WriteMBps(), WriteEntriesS: r.WriteEntriesPerSecond(),
			ReadSeconds: r.ReadTime.Seconds(), ReadMBps: r.ReadMBps(), ReadEntriesS: r.ReadEntriesPerSecond(),
			LatencyP50: ms(r.AddLatency.P50), LatencyP99: ms(r.AddLatency.P99), LatencyP999: ms(r.AddLatency.P999),
			LatencyMax: ms(r.AddLatency.Max), Verified: r.Verified, Closed: r.Closed, Deleted: r.Deleted,
			OK: testErr == nil,
		}
		if testErr != nil {
			out.Error = testErr.Error()
		}
		if r.DeleteError != nil {
			out.DeleteError = r.DeleteError.Error()
		}
		return p.JSON(out)
	}
	w := p.W
	fmt.Fprintf(w, "ledger %d on %s (E=%d Qw=%d Qa=%d)\n", r.LedgerID, strings.Join(r.Ensemble, ","), r.E, r.Qw, r.Qa)
	fmt.Fprintf(w, "write: %d entries of %d bytes (%s) in %v: %.2f MB/s, %.0f entries/s\n",
		r.Entries, r.EntrySize, cli.Bytes(uint64(r.Bytes)), r.WriteTime.Round(time.Millisecond), r.WriteMBps(), r.WriteEntriesPerSecond())
	l := r.AddLatency
	fmt.Fprintf(w, "add latency: p50 %v  p99 %v  p99.9 %v  max %v  (%d acknowledged)\n",
		roundLatency(l.P50), roundLatency(l.P99), roundLatency(l.P999), roundLatency(l.Max), l.Count)
	if r.Closed {
		fmt.Fprintf(w, "read:  %d of %d entries verified in %v: %.2f MB/s, %.0f entries/s\n",
			r.Verified, r.Entries, r.ReadTime.Round(time.Millisecond), r.ReadMBps(), r.ReadEntriesPerSecond())
	}
	switch {
	case r.Deleted:
		fmt.Fprintf(w, "ledger %d deleted\n", r.LedgerID)
	case r.DeleteError != nil:
		fmt.Fprintf(w, "ledger %d NOT fully deleted: %v\n", r.LedgerID, r.DeleteError)
	default:
		fmt.Fprintf(w, "ledger %d kept\n", r.LedgerID)
	}
	if testErr == nil {
		fmt.Fprintln(w, "OK")
	}
	return nil
}

func roundLatency(d time.Duration) time.Duration {
	if d < time.Millisecond {
		return d.Round(time.Microsecond)
	}
	return d.Round(10 * time.Microsecond)
}

// ledgerRow is the JSON form of a ledger in list and describe.
type ledgerRow struct {
	ID          uint64            `json:"id"`
	State       string            `json:"state"`
	E           int32             `json:"ensemble_size"`
	Qw          int32             `json:"write_quorum"`
	Qa          int32             `json:"ack_quorum"`
	LastEntryID *int64            `json:"last_entry_id,omitempty"` // closed ledgers only
	Entries     *int64            `json:"entries,omitempty"`       // closed ledgers only
	Length      *int64            `json:"length,omitempty"`        // closed ledgers only
	LAC         *int64            `json:"last_add_confirmed,omitempty"`
	Ensemble    []string          `json:"ensemble"` // the last fragment's
	Fragments   []fragmentRow     `json:"fragments,omitempty"`
	CreatedAt   string            `json:"created_at,omitempty"`
	ClosedAt    string            `json:"closed_at,omitempty"`
	Properties  map[string]string `json:"properties,omitempty"`
}

type fragmentRow struct {
	FirstEntryID int64    `json:"first_entry_id"`
	LastEntryID  *int64   `json:"last_entry_id,omitempty"` // unknown for an open ledger's last
	Bookies      []string `json:"bookies"`
}

func timeString(ms int64) string {
	if ms == 0 {
		return ""
	}
	return time.UnixMilli(ms).UTC().Format(time.RFC3339)
}

func newLedgerRow(md *ledgerpb.LedgerMetadata, withFragments bool) ledgerRow {
	frags := md.GetFragments()
	r := ledgerRow{ID: md.GetId(), State: md.GetState().String(), E: md.GetEnsembleSize(), Qw: md.GetWriteQuorum(),
		Qa: md.GetAckQuorum(), CreatedAt: timeString(md.GetCreatedAtMs()), ClosedAt: timeString(md.GetClosedAtMs()),
		Properties: md.GetProperties(), Ensemble: []string{}}
	if len(frags) > 0 {
		r.Ensemble = frags[len(frags)-1].GetBookies()
	}
	closed := md.GetState() == ledgerpb.LedgerState_CLOSED
	if closed {
		last, length := md.GetLastEntryId(), md.GetLength()
		entries := last + 1
		r.LastEntryID, r.Entries, r.Length = &last, &entries, &length
	}
	if withFragments {
		for i, f := range frags {
			fr := fragmentRow{FirstEntryID: f.GetFirstEntryId(), Bookies: f.GetBookies()}
			switch {
			case i+1 < len(frags):
				last := frags[i+1].GetFirstEntryId() - 1
				fr.LastEntryID = &last
			case closed:
				last := md.GetLastEntryId()
				fr.LastEntryID = &last
			}
			r.Fragments = append(r.Fragments, fr)
		}
	}
	return r
}

func dashInt(p *int64) string {
	if p == nil {
		return "-"
	}
	return strconv.FormatInt(*p, 10)
}

func newLedgerListCommand(g *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List ledgers: id, state, entries, size, ensemble",
		Long: "Lists every ledger in metad. Entries and size are known once a ledger is closed;\n" +
			"'strata ledger describe ID' asks the bookies how far an open ledger got.",
		Args: cobra.NoArgs,
		RunE: cli.Run(func(cmd *cobra.Command, _ []string) error {
			meta, err := g.metaClient()
			if err != nil {
				return err
			}
			defer meta.Close()
			ctx, cancel := g.commandContext(cmd)
			defer cancel()
			mds, err := ledger.ListAll(ctx, ledger.NewMetadStore(meta))
			if err != nil {
				return err
			}
			rows := make([]ledgerRow, 0, len(mds))
			for _, md := range mds {
				rows = append(rows, newLedgerRow(md, false))
			}
			p := g.printer(cmd)
			if p.Format == cli.FormatJSON {
				return p.JSON(struct {
					Ledgers []ledgerRow `json:"ledgers"`
				}{rows})
			}
			tw := tabwriter.NewWriter(p.W, 0, 2, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tSTATE\tENTRIES\tSIZE\tENSEMBLE")
			for _, r := range rows {
				size := "-"
				if r.Length != nil {
					size = cli.Bytes(uint64(*r.Length))
				}
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", r.ID, r.State, dashInt(r.Entries), size, strings.Join(r.Ensemble, ","))
			}
			return tw.Flush()
		}),
	}
}

func newLedgerDescribeCommand(g *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "describe ID",
		Short: "Show a ledger's metadata: state, quorums, fragments, last entry, length, properties",
		Long: "Shows the ledger's metadata. For an open ledger it also asks the bookies of the last\n" +
			"fragment for the last add confirmed (without fencing: the writer is not disturbed).",
		Args: cobra.ExactArgs(1),
		RunE: cli.Run(func(cmd *cobra.Command, args []string) error {
			id, err := parseLedgerID(args[0])
			if err != nil {
				return err
			}
			env, closeEnv, err := g.ledgerEnv()
			if err != nil {
				return err
			}
			defer closeEnv()
			ctx, cancel := g.commandContext(cmd)
			defer cancel()
			r, err := ledger.OpenReader(ctx, env, id)
			if err != nil {
				return ledgerError(id, err)
			}
			md := r.Metadata()
			row := newLedgerRow(md, true)
			lacErr := error(nil)
			if md.GetState() != ledgerpb.LedgerState_CLOSED {
				lctx, lcancel := context.WithTimeout(ctx, min(2*time.Second, g.timeout/2))
				lac, err := r.LastAddConfirmed(lctx)
				lcancel()
				if err == nil {
					row.LAC = &lac
				}
				lacErr = err
			}
			p := g.printer(cmd)
			if p.Format == cli.FormatJSON {
				return p.JSON(row)
			}
			return printLedgerDescription(p.W, row, lacErr)
		}),
	}
}

func printLedgerDescription(w io.Writer, r ledgerRow, lacErr error) error {
	tw := tabwriter.NewWriter(w, 0, 2, 2, ' ', 0)
	fmt.Fprintf(tw, "ledger\t%d\n", r.ID)
	fmt.Fprintf(tw, "state\t%s\n", r.State)
	fmt.Fprintf(tw, "quorums\tE=%d Qw=%d Qa=%d\n", r.E, r.Qw, r.Qa)
	switch {
	case r.LastEntryID != nil:
		fmt.Fprintf(tw, "last entry\t%d\n", *r.LastEntryID)
		fmt.Fprintf(tw, "length\t%s (%d bytes)\n", cli.Bytes(uint64(*r.Length)), *r.Length)
	case r.LAC != nil:
		fmt.Fprintf(tw, "last add confirmed\t%d (from the bookies; the ledger is open)\n", *r.LAC)
	default:
		fmt.Fprintf(tw, "last add confirmed\tunknown: %v\n", lacErr)
	}
	if r.CreatedAt != "" {
		fmt.Fprintf(tw, "created\t%s\n", r.CreatedAt)
	}
	if r.ClosedAt != "" {
		fmt.Fprintf(tw, "closed\t%s\n", r.ClosedAt)
	}
	keys := make([]string, 0, len(r.Properties))
	for k := range r.Properties {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		label := ""
		if i == 0 {
			label = "properties"
		}
		fmt.Fprintf(tw, "%s\t%s=%s\n", label, k, r.Properties[k])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "fragments:")
	tw = tabwriter.NewWriter(w, 0, 2, 2, ' ', 0)
	fmt.Fprintln(tw, "  FIRST ENTRY\tLAST ENTRY\tBOOKIES")
	for _, f := range r.Fragments {
		fmt.Fprintf(tw, "  %d\t%s\t%s\n", f.FirstEntryID, dashInt(f.LastEntryID), strings.Join(f.Bookies, ","))
	}
	return tw.Flush()
}

type entryCheckJSON struct {
	ID     int64  `json:"id"`
	Size   int    `json:"size"`
	CRC32C string `json:"crc32c,omitempty"`
	Status string `json:"status"`
	Error  string `json:"error,omitempty"`
}

func newLedgerReadCommand(g *globalOptions) *cobra.Command {
	var from, to int64
	cmd := &cobra.Command{
		Use:   "read ID",
		Short: "Read a ledger's entries and check them: id, size, CRC-32C, status",
		Long: "Reads entries --from..--to (default: all, up to the last add confirmed) without fencing,\n" +
			"one line per entry: id, size, CRC-32C of the payload, and OK, CORRUPT (no good copy; a\n" +
			"bookie reported its copy corrupt) or UNREADABLE (no copy could be read). --output json\n" +
			"prints one object per line. Exits 1 if any entry is not OK.",
		Args: cobra.ExactArgs(1),
		RunE: cli.Run(func(cmd *cobra.Command, args []string) error {
			id, err := parseLedgerID(args[0])
			if err != nil {
				return err
			}
			env, closeEnv, err := g.ledgerEnv()
			if err != nil {
				return err
			}
			defer closeEnv()
			ctx, cancel := g.commandContext(cmd)
			defer cancel()
			r, err := ledger.OpenReader(ctx, env, id)
			if err != nil {
				return ledgerError(id, err)
			}
			lac, err := r.LastAddConfirmed(ctx)
			if err != nil {
				return err
			}
			last := lac
			if cmd.Flags().Changed("to") {
				if to > lac {
					return fmt.Errorf("--to %d: the last add confirmed of ledger %d is %d", to, id, lac)
				}
				last = to
			}
			if from < 0 {
				return fmt.Errorf("--from %d: must not be negative", from)
			}
			p := g.printer(cmd)
			bad := map[ledger.EntryStatus]int{}
			if from <= last {
				err = ledger.CheckEntries(ctx, r, from, last, func(c ledger.EntryCheck) error {
					if c.Status != ledger.EntryOK {
						bad[c.Status]++
					}
					return printEntryCheck(p, c)
				})
				if err != nil {
					return err
				}
			}
			if n := bad[ledger.EntryCorrupt] + bad[ledger.EntryUnreadable]; n > 0 {
				return fmt.Errorf("ledger %d: %d entries not OK (%d corrupt, %d unreadable)", id, n,
					bad[ledger.EntryCorrupt], bad[ledger.EntryUnreadable])
			}
			return nil
		}),
	}
	cmd.Flags().Int64Var(&from, "from", 0, "first entry")
	cmd.Flags().Int64Var(&to, "to", 0, "last entry (default: the last add confirmed)")
	return cmd
}

func printEntryCheck(p *cli.Printer, c ledger.EntryCheck) error {
	if p.Format == cli.FormatJSON {
		out := entryCheckJSON{ID: c.ID, Size: c.Size, Status: string(c.Status)}
		if c.Status == ledger.EntryOK {
			out.CRC32C = fmt.Sprintf("%08x", c.CRC32C)
		} else if c.Err != nil {
			out.Error = c.Err.Error()
		}
		return p.JSON(out)
	}
	if c.Status != ledger.EntryOK {
		_, err := fmt.Fprintf(p.W, "%d\t-\t-\t%s\t%v\n", c.ID, c.Status, c.Err)
		return err
	}
	_, err := fmt.Fprintf(p.W, "%d\t%d\t%08x\t%s\n", c.ID, c.Size, c.CRC32C, c.Status)
	return err
}

func newLedgerDeleteCommand(g *globalOptions) *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "delete ID",
		Short: "Delete a ledger: its metadata, then its entries on every bookie",
		Long: "Deletes the ledger's metadata, then asks every bookie of every fragment to delete its\n" +
			"entries. An open ledger may still have a writer: it is refused unless --force.",
		Args: cobra.ExactArgs(1),
		RunE: cli.Run(func(cmd *cobra.Command, args []string) error {
			id, err := parseLedgerID(args[0])
			if err != nil {
				return err
			}
			env, closeEnv, err := g.ledgerEnv()
			if err != nil {
				return err
			}
			defer closeEnv()
			ctx, cancel := g.commandContext(cmd)
			defer cancel()
			md, _, err := env.Meta.Get(ctx, id)
			if err != nil {
				return ledgerError(id, err)
			}
			if md.GetState() != ledgerpb.LedgerState_CLOSED && !force {
				return fmt.Errorf("ledger %d is %s: a writer may still use it; --force deletes it anyway", id, md.GetState())
			}
			if err := ledger.Delete(ctx, env, id); err != nil {
				if errors.Is(err, metaclient.ErrUnknownOutcome) {
					return fmt.Errorf("ledger %d: the metadata deletion may or may not have happened; run the command again: %w", id, err)
				}
				return ledgerError(id, err)
			}
			p := g.printer(cmd)
			if p.Format == cli.FormatJSON {
				return p.JSON(map[string]uint64{"deleted": id})
			}
			_, err = fmt.Fprintf(p.W, "OK deleted ledger %d\n", id)
			return err
		}),
	}
	cmd.Flags().BoolVar(&force, "force", false, "delete even if the ledger is not closed")
	return cmd
}
