package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/strata-log/strata/client"
	"github.com/strata-log/strata/internal/cli"
	"github.com/strata-log/strata/proto/brokerpb"
)

func newTopicCommand(g *globalOptions) *cobra.Command {
	topic := &cobra.Command{Use: "topic", Short: "Create, list, describe, change and delete topics"}
	topic.AddCommand(newTopicCreateCommand(g), newTopicListCommand(g), newTopicDescribeCommand(g),
		newTopicDeleteCommand(g), newTopicAlterCommand(g), newTopicAddPartitionsCommand(g))
	return topic
}

// parseConfigs turns repeated -c key=value flags into a map.
func parseConfigs(kvs []string) (map[string]string, error) {
	out := map[string]string{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, fmt.Errorf("-c %q: want key=value", kv)
		}
		out[strings.TrimSpace(k)] = v
	}
	return out, nil
}

func newTopicCreateCommand(g *globalOptions) *cobra.Command {
	var (
		partitions int32
		configs    []string
	)
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a topic",
		Long: "Creates a topic with -p partitions and -c key=value configs (retention.ms, cleanup.policy, ...;\n" +
			"see 'strata topic describe'). Waits (within --timeout) until every partition has an owner.",
		Args: cobra.ExactArgs(1),
		RunE: cli.Run(func(cmd *cobra.Command, args []string) error {
			cfg, err := parseConfigs(configs)
			if err != nil {
				return cli.Exit(cli.ExitUsage, err)
			}
			if partitions < 1 {
				return cli.Exit(cli.ExitUsage, fmt.Errorf("-p %d: want at least 1", partitions))
			}
			return g.withBroker(cmd, func(ctx context.Context, c *client.Client) error {
				desc, err := c.CreateTopic(ctx, args[0], partitions, cfg)
				if err != nil {
					return err
				}
				owned := waitOwned(ctx, c, args[0], min(g.timeout, 10*time.Second))
				p := g.printer(cmd)
				if p.Format == cli.FormatJSON {
					return p.JSON(newTopicJSON(desc))
				}
				fmt.Fprintf(p.W, "created topic %s with %d partitions\n", desc.GetName(), desc.GetPartitionCount())
				if !owned {
					fmt.Fprintf(cmd.ErrOrStderr(), "strata: note: not every partition has an owner yet; producers wait for them\n")
				}
				return nil
			})
		}),
	}
	cmd.Flags().Int32VarP(&partitions, "partitions", "p", 1, "number of partitions")
	cmd.Flags().StringArrayVarP(&configs, "config", "c", nil, "topic config key=value (repeatable)")
	return cmd
}

// waitOwned polls the topic's metadata until every partition has an owner,
// for at most wait. It reports whether they all do.
func waitOwned(ctx context.Context, c *client.Client, topic string, wait time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for {
		if md, err := c.Metadata(ctx, topic); err == nil && allOwned(md, topic) {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func allOwned(md *brokerpb.MetadataResponse, topic string) bool {
	for _, t := range md.GetTopics() {
		if t.GetName() != topic || t.GetError() != nil || len(t.GetPartitions()) == 0 {
			continue
		}
		for _, p := range t.GetPartitions() {
			if p.GetOwnerAddress() == "" {
				return false
			}
		}
		return true
	}
	return false
}

func newTopicListCommand(g *globalOptions) *cobra.Command {
	var internal bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List topics and their partition counts",
		Args:  cobra.NoArgs,
		RunE: cli.Run(func(cmd *cobra.Command, _ []string) error {
			return g.withBroker(cmd, func(ctx context.Context, c *client.Client) error {
				topics, err := c.ListTopics(ctx, internal)
				if err != nil {
					return err
				}
				sort.Slice(topics, func(i, j int) bool { return topics[i].GetName() < topics[j].GetName() })
				p := g.printer(cmd)
				if p.Format == cli.FormatJSON {
					type row struct {
						Name       string `json:"name"`
						Partitions int32  `json:"partitions"`
						Internal   bool   `json:"internal,omitempty"`
					}
					rows := []row{}
					for _, t := range topics {
						rows = append(rows, row{t.GetName(), t.GetPartitions(), t.GetInternal()})
					}
					return p.JSON(rows)
				}
				tw := tabwriter.NewWriter(p.W, 0, 2, 2, ' ', 0)
				fmt.Fprintln(tw, "NAME\tPARTITIONS")
				for _, t := range topics {
					name := t.GetName()
					if t.GetInternal() {
						name += " (internal)"
					}
					fmt.Fprintf(tw, "%s\t%d\n", name, t.GetPartitions())
				}
				return tw.Flush()
			})
		}),
	}
	cmd.Flags().BoolVar(&internal, "internal", false, "include internal topics")
	return cmd
}

func newTopicDescribeCommand(g *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "describe NAME",
		Short: "Show a topic's configs (marking defaults) and, per partition, owner, offsets, bytes, ledgers",
		Long: "Shows the topic's configs, marking those left at their defaults, and for each partition its\n" +
			"owner, log start and end offsets (asked of the owner, so live), stored bytes and ledgers.",
		Args: cobra.ExactArgs(1),
		RunE: cli.Run(func(cmd *cobra.Command, args []string) error {
			return g.withBroker(cmd, func(ctx context.Context, c *client.Client) error {
				desc, err := c.DescribeTopic(ctx, args[0])
				if err != nil {
					return err
				}
				out := newTopicJSON(desc)
				liveOffsets(ctx, c, desc.GetName(), out.Partitions)
				p := g.printer(cmd)
				if p.Format == cli.FormatJSON {
					return p.JSON(out)
				}
				return printTopic(p.W, out)
			})
		}),
	}
}

func newTopicDeleteCommand(g *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a topic and its data",
		Args:  cobra.ExactArgs(1),
		RunE: cli.Run(func(cmd *cobra.Command, args []string) error {
			return g.withBroker(cmd, func(ctx context.Context, c *client.Client) error {
				if err := c.DeleteTopic(ctx, args[0]); err != nil {
					return err
				}
				p := g.printer(cmd)
				if p.Format == cli.FormatJSON {
					return p.JSON(map[string]string{"deleted": args[0]})
				}
				_, err := fmt.Fprintf(p.W, "deleted topic %s\n", args[0])
				return err
			})
		}),
	}
}

func newTopicAlterCommand(g *globalOptions) *cobra.Command {
	var (
		set []string
		del []string
	)
	cmd := &cobra.Command{
		Use:   "alter NAME -c key=value... [--delete-config key]...",
		Short: "Change a topic's configs (--delete-config resets a key to its default)",
		Args:  cobra.ExactArgs(1),
		RunE: cli.Run(func(cmd *cobra.Command, args []string) error {
			cfg, err := parseConfigs(set)
			if err != nil {
				return cli.Exit(cli.ExitUsage, err)
			}
			if len(cfg) == 0 && len(del) == 0 {
				return cli.Exit(cli.ExitUsage, fmt.Errorf("nothing to change: give -c key=value or --delete-config key"))
			}
			return g.withBroker(cmd, func(ctx context.Context, c *client.Client) error {
				desc, err := c.AlterTopicConfigs(ctx, args[0], cfg, del)
				if err != nil {
					return err
				}
				out := newTopicJSON(desc)
				p := g.printer(cmd)
				if p.Format == cli.FormatJSON {
					return p.JSON(out)
				}
				return printConfigs(p.W, out.Configs)
			})
		}),
	}
	cmd.Flags().StringArrayVarP(&set, "config", "c", nil, "config key=value to set (repeatable)")
	cmd.Flags().StringArrayVar(&del, "delete-config", nil, "config key to reset to its default (repeatable)")
	return cmd
}

func newTopicAddPartitionsCommand(g *globalOptions) *cobra.Command {
	var total int32
	cmd := &cobra.Command{
		Use:   "add-partitions NAME -p TOTAL",
		Short: "Grow a topic to TOTAL partitions (keys may map to other partitions afterwards)",
		Args:  cobra.ExactArgs(1),
		RunE: cli.Run(func(cmd *cobra.Command, args []string) error {
			if total < 1 {
				return cli.Exit(cli.ExitUsage, fmt.Errorf("-p: give the new total number of partitions"))
			}
			return g.withBroker(cmd, func(ctx context.Context, c *client.Client) error {
				desc, err := c.AddPartitions(ctx, args[0], total)
				if err != nil {
					return err
				}
				p := g.printer(cmd)
				if p.Format == cli.FormatJSON {
					return p.JSON(newTopicJSON(desc))
				}
				_, err = fmt.Fprintf(p.W, "topic %s now has %d partitions\n", desc.GetName(), desc.GetPartitionCount())
				return err
			})
		}),
	}
	cmd.Flags().Int32VarP(&total, "partitions", "p", 0, "the new total number of partitions")
	return cmd
}

// topicJSON is the JSON form of a topic description.
type topicJSON struct {
	Name       string          `json:"name"`
	ID         string          `json:"id"`
	Partitions []partitionJSON `json:"partitions"`
	Configs    []configJSON    `json:"configs"`
	Internal   bool            `json:"internal,omitempty"`
	CreatedAt  int64           `json:"created_at_ms"`
	Count      int32           `json:"partition_count"`
}

type configJSON struct {
	Name    string `json:"name"`
	Value   string `json:"value"`
	Default bool   `json:"default"`
}

type partitionJSON struct {
	Partition      int32        `json:"partition"`
	OwnerID        string       `json:"owner_id"`
	OwnerAddress   string       `json:"owner_address"`
	OwnerEpoch     int64        `json:"owner_epoch"`
	LogStartOffset int64        `json:"log_start_offset"`
	HighWatermark  int64        `json:"high_watermark"`
	Live           bool         `json:"live"` // offsets from the owner, not the stored list
	Bytes          int64        `json:"bytes"`
	Ledgers        []ledgerJSON `json:"ledgers"`
	// The object-store tier: segment objects, their bytes and the first
	// offset they do not cover (0: nothing tiered).
	TieredSegments  int32 `json:"tiered_segments"`
	TieredBytes     int64 `json:"tiered_bytes"`
	TieredEndOffset int64 `json:"tiered_end_offset"`
	// LastRetentionMs: when the owner last applied retention (0: not
	// known to the broker that answered).
	LastRetentionMs int64 `json:"last_retention_ms"`
	// Compaction (cleanup.policy compact): when the last pass was
	// swapped in (0: never), the offset it cleaned up to, and the dirty
	// ratio of the cleanable ledgers (0 when not known to the broker that
	// answered).
	LastCompactionMs int64   `json:"last_compaction_ms"`
	CleanedOffset    int64   `json:"cleaned_offset"`
	DirtyRatio       float64 `json:"dirty_ratio"`
}

type ledgerJSON struct {
	LedgerID       uint64 `json:"ledger_id"`
	FirstOffset    int64  `json:"first_offset"`
	LastOffset     int64  `json:"last_offset"`
	Bytes          int64  `json:"bytes"`
	MaxTimestampMs int64  `json:"max_timestamp_ms"`
	Closed         bool   `json:"closed"`
}

func newTopicJSON(d *brokerpb.TopicDescription) *topicJSON {
	out := &topicJSON{Name: d.GetName(), ID: d.GetId(), Internal: d.GetInternal(), CreatedAt: d.GetCreatedAtMs(),
		Count: d.GetPartitionCount(), Partitions: []partitionJSON{}, Configs: []configJSON{}}
	for _, c := range d.GetConfigs() {
		out.Configs = append(out.Configs, configJSON{Name: c.GetName(), Value: c.GetValue(), Default: c.GetIsDefault()})
	}
	sort.Slice(out.Configs, func(i, j int) bool { return out.Configs[i].Name < out.Configs[j].Name })
	for _, p := range d.GetPartitions() {
		pj := partitionJSON{Partition: p.GetPartition(), OwnerID: p.GetOwnerId(), OwnerAddress: p.GetOwnerAddress(),
			OwnerEpoch: p.GetOwnerEpoch(), LogStartOffset: p.GetLogStartOffset(), HighWatermark: p.GetHighWatermark(),
			Bytes: p.GetBytes(), Ledgers: []ledgerJSON{},
			TieredSegments: p.GetTieredSegments(), TieredBytes: p.GetTieredBytes(), TieredEndOffset: p.GetTieredEndOffset(),
			LastRetentionMs: p.GetLastRetentionMs(), LastCompactionMs: p.GetLastCompactionMs(),
			CleanedOffset: p.GetCleanedOffset(), DirtyRatio: p.GetDirtyRatio()}
		for _, l := range p.GetLedgers() {
			pj.Ledgers = append(pj.Ledgers, ledgerJSON{LedgerID: l.GetLedgerId(), FirstOffset: l.GetFirstOffset(),
				LastOffset: l.GetLastOffset(), Bytes: l.GetBytes(), MaxTimestampMs: l.GetMaxTimestampMs(), Closed: l.GetClosed()})
		}
		out.Partitions = append(out.Partitions, pj)
	}
	sort.Slice(out.Partitions, func(i, j int) bool { return out.Partitions[i].Partition < out.Partitions[j].Partition })
	return out
}

// liveOffsets asks each partition's owner for its log start and end
// (ListOffsets -2 and -1), a few partitions at a time. Partitions whose
// owner does not answer keep the description's numbers (Live false).
func liveOffsets(ctx context.Context, c *client.Client, topic string, parts []partitionJSON) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i := range parts {
		wg.Add(1)
		sem <- struct{}{}
		go func(p *partitionJSON) {
			defer wg.Done()
			defer func() { <-sem }()
			tp := client.TopicPartition{Topic: topic, Partition: p.Partition}
			start, err := c.ListOffsets(ctx, tp, -2)
			if err != nil {
				return
			}
			end, err := c.ListOffsets(ctx, tp, -1)
			if err != nil {
				return
			}
			p.LogStartOffset, p.HighWatermark, p.Live = start.GetOffset(), end.GetOffset(), true
		}(&parts[i])
	}
	wg.Wait()
}

func printTopic(w io.Writer, t *topicJSON) error {
	fmt.Fprintf(w, "Topic:       %s\n", t.Name)
	fmt.Fprintf(w, "ID:          %s\n", dash(t.ID))
	fmt.Fprintf(w, "Partitions:  %d\n", t.Count)
	if t.CreatedAt > 0 {
		fmt.Fprintf(w, "Created:     %s\n", time.UnixMilli(t.CreatedAt).UTC().Format(time.RFC3339))
	}
	if t.Internal {
		fmt.Fprintln(w, "Internal:    yes")
	}
	fmt.Fprintln(w, "\nConfigs:")
	if err := printConfigs(w, t.Configs); err != nil {
		return err
	}
	fmt.Fprintln(w, "\nPartitions:")
	tw := tabwriter.NewWriter(w, 0, 2, 2, ' ', 0)
	// OFFSETS is END - START, as Kafka's tools show offsets: it counts
	// the records only where none was removed from between (compaction
	// leaves holes; transaction markers take offsets too).
	fmt.Fprintln(tw, "  PARTITION\tOWNER\tEPOCH\tSTART\tEND\tOFFSETS\tBYTES\tLEDGERS\tTIERED")
	for _, p := range t.Partitions {
		owner := "-"
		if p.OwnerID != "" {
			owner = p.OwnerID + " (" + p.OwnerAddress + ")"
		}
		end := fmt.Sprint(p.HighWatermark)
		if !p.Live {
			end += "*"
		}
		var ledgers []string
		for _, l := range p.Ledgers {
			s := fmt.Sprint(l.LedgerID)
			if !l.Closed {
				s += "(open)"
			}
			ledgers = append(ledgers, s)
		}
		tiered := "-"
		if p.TieredSegments > 0 {
			tiered = fmt.Sprintf("%d objects, %s, to offset %d", p.TieredSegments, cli.Bytes(uint64(p.TieredBytes)), p.TieredEndOffset)
		}
		fmt.Fprintf(tw, "  %d\t%s\t%d\t%d\t%s\t%d\t%s\t%s\t%s\n", p.Partition, owner, p.OwnerEpoch, p.LogStartOffset, end,
			max(0, p.HighWatermark-p.LogStartOffset), cli.Bytes(uint64(max(0, p.Bytes))), dash(strings.Join(ledgers, ",")), tiered)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var ran []string
	for _, p := range t.Partitions {
		if p.LastRetentionMs > 0 {
			ran = append(ran, fmt.Sprintf("%d at %s", p.Partition, time.UnixMilli(p.LastRetentionMs).UTC().Format(time.TimeOnly)))
		}
	}
	if len(ran) > 0 {
		fmt.Fprintf(w, "  retention last ran (UTC): partition %s\n", strings.Join(ran, ", "))
	}
	var compacted []string
	for _, p := range t.Partitions {
		if p.LastCompactionMs > 0 || p.DirtyRatio > 0 {
			last := "never"
			if p.LastCompactionMs > 0 {
				last = "at " + time.UnixMilli(p.LastCompactionMs).UTC().Format(time.TimeOnly) + fmt.Sprintf(" to offset %d", p.CleanedOffset)
			}
			compacted = append(compacted, fmt.Sprintf("%d %s, dirty ratio %.2f", p.Partition, last, p.DirtyRatio))
		}
	}
	if len(compacted) > 0 {
		fmt.Fprintf(w, "  compaction last ran (UTC): partition %s\n", strings.Join(compacted, "; "))
	}
	if t.compacted() {
		fmt.Fprintln(w, "  OFFSETS is END - START, not a record count: compaction removes records and keeps offsets")
	}
	for _, p := range t.Partitions {
		if !p.Live {
			_, err := fmt.Fprintln(w, "  * the owner did not answer: end of the last closed ledger")
			return err
		}
	}
	return nil
}

// compacted: the topic compacts, or a pass ran on it (a topic switched
// back to delete keeps its holes).
func (t *topicJSON) compacted() bool {
	for _, c := range t.Configs {
		if c.Name == "cleanup.policy" && strings.Contains(c.Value, "compact") {
			return true
		}
	}
	for _, p := range t.Partitions {
		if p.LastCompactionMs > 0 || p.CleanedOffset > 0 {
			return true
		}
	}
	return false
}

func printConfigs(w io.Writer, configs []configJSON) error {
	tw := tabwriter.NewWriter(w, 0, 2, 2, ' ', 0)
	fmt.Fprintln(tw, "  NAME\tVALUE\tSOURCE")
	for _, c := range configs {
		source := "topic"
		if c.Default {
			source = "default"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", c.Name, c.Value, source)
	}
	return tw.Flush()
}
