package topic

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/strata-log/strata/client"
	"github.com/strata-log/strata/cmd/strata/internal/cli"
	"github.com/strata-log/strata/proto/brokerpb"
)

// Description is the JSON form of a topic description.
type Description struct {
	Name       string      `json:"name"`
	ID         string      `json:"id"`
	Partitions []Partition `json:"partitions"`
	Configs    []Config    `json:"configs"`
	Internal   bool        `json:"internal,omitempty"`
	CreatedAt  int64       `json:"created_at_ms"`
	Count      int32       `json:"partition_count"`
}

type Config struct {
	Name    string `json:"name"`
	Value   string `json:"value"`
	Default bool   `json:"default"`
}

type Partition struct {
	Partition      int32    `json:"partition"`
	OwnerID        string   `json:"owner_id"`
	OwnerAddress   string   `json:"owner_address"`
	OwnerEpoch     int64    `json:"owner_epoch"`
	LogStartOffset int64    `json:"log_start_offset"`
	HighWatermark  int64    `json:"high_watermark"`
	Live           bool     `json:"live"` // offsets from the owner, not the stored list
	Bytes          int64    `json:"bytes"`
	Ledgers        []Ledger `json:"ledgers"`
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

type Ledger struct {
	LedgerID       uint64 `json:"ledger_id"`
	FirstOffset    int64  `json:"first_offset"`
	LastOffset     int64  `json:"last_offset"`
	Bytes          int64  `json:"bytes"`
	MaxTimestampMs int64  `json:"max_timestamp_ms"`
	Closed         bool   `json:"closed"`
}

// New is d in its JSON form: configs sorted by name, partitions by
// number.
func New(d *brokerpb.TopicDescription) *Description {
	out := &Description{Name: d.GetName(), ID: d.GetId(), Internal: d.GetInternal(), CreatedAt: d.GetCreatedAtMs(),
		Count: d.GetPartitionCount(), Partitions: []Partition{}, Configs: []Config{}}
	for _, c := range d.GetConfigs() {
		out.Configs = append(out.Configs, Config{Name: c.GetName(), Value: c.GetValue(), Default: c.GetIsDefault()})
	}
	sort.Slice(out.Configs, func(i, j int) bool { return out.Configs[i].Name < out.Configs[j].Name })
	for _, p := range d.GetPartitions() {
		pj := Partition{Partition: p.GetPartition(), OwnerID: p.GetOwnerId(), OwnerAddress: p.GetOwnerAddress(),
			OwnerEpoch: p.GetOwnerEpoch(), LogStartOffset: p.GetLogStartOffset(), HighWatermark: p.GetHighWatermark(),
			Bytes: p.GetBytes(), Ledgers: []Ledger{},
			TieredSegments: p.GetTieredSegments(), TieredBytes: p.GetTieredBytes(), TieredEndOffset: p.GetTieredEndOffset(),
			LastRetentionMs: p.GetLastRetentionMs(), LastCompactionMs: p.GetLastCompactionMs(),
			CleanedOffset: p.GetCleanedOffset(), DirtyRatio: p.GetDirtyRatio()}
		for _, l := range p.GetLedgers() {
			pj.Ledgers = append(pj.Ledgers, Ledger{LedgerID: l.GetLedgerId(), FirstOffset: l.GetFirstOffset(),
				LastOffset: l.GetLastOffset(), Bytes: l.GetBytes(), MaxTimestampMs: l.GetMaxTimestampMs(), Closed: l.GetClosed()})
		}
		out.Partitions = append(out.Partitions, pj)
	}
	sort.Slice(out.Partitions, func(i, j int) bool { return out.Partitions[i].Partition < out.Partitions[j].Partition })
	return out
}

// LiveOffsets asks each partition's owner for its log start and end
// (ListOffsets -2 and -1), a few partitions at a time. Partitions whose
// owner does not answer keep the description's numbers (Live false).
func LiveOffsets(ctx context.Context, c *client.Client, topic string, parts []Partition) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i := range parts {
		wg.Add(1)
		sem <- struct{}{}
		go func(p *Partition) {
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

// Print prints t: JSON, or the header, configs and partition table of
// `strata topic describe`.
func Print(p *cli.Printer, t *Description) error {
	if p.Format == cli.FormatJSON {
		return p.JSON(t)
	}
	return printText(p.W, t)
}

// PrintConfigs prints t's configs: JSON of the whole t, or the config
// table (`strata topic alter`).
func PrintConfigs(p *cli.Printer, t *Description) error {
	if p.Format == cli.FormatJSON {
		return p.JSON(t)
	}
	return printConfigsText(p.W, t.Configs)
}

func printText(w io.Writer, t *Description) error {
	fmt.Fprintf(w, "Topic:       %s\n", t.Name)
	fmt.Fprintf(w, "ID:          %s\n", cli.Dash(t.ID))
	fmt.Fprintf(w, "Partitions:  %d\n", t.Count)
	if t.CreatedAt > 0 {
		fmt.Fprintf(w, "Created:     %s\n", time.UnixMilli(t.CreatedAt).UTC().Format(time.RFC3339))
	}
	if t.Internal {
		fmt.Fprintln(w, "Internal:    yes")
	}
	fmt.Fprintln(w, "\nConfigs:")
	if err := printConfigsText(w, t.Configs); err != nil {
		return err
	}
	fmt.Fprintln(w, "\nPartitions:")
	if err := printPartitions(w, t.Partitions); err != nil {
		return err
	}
	return printNotes(w, t)
}

// printPartitions is describe's partition table.
func printPartitions(w io.Writer, parts []Partition) error {
	tw := tabwriter.NewWriter(w, 0, 2, 2, ' ', 0)
	// OFFSETS is END - START (see the package comment).
	fmt.Fprintln(tw, "  PARTITION\tOWNER\tEPOCH\tSTART\tEND\tOFFSETS\tBYTES\tLEDGERS\tTIERED")
	for _, p := range parts {
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
			max(0, p.HighWatermark-p.LogStartOffset), cli.Bytes(uint64(max(0, p.Bytes))), cli.Dash(strings.Join(ledgers, ",")), tiered)
	}
	return tw.Flush()
}

// printNotes prints, under the partition table, when retention and
// compaction last ran, what OFFSETS means for a compacted topic, and
// what a '*' on END means.
func printNotes(w io.Writer, t *Description) error {
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
func (t *Description) compacted() bool {
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

func printConfigsText(w io.Writer, configs []Config) error {
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

// listRow is one topic of `strata topic list --output json`.
type listRow struct {
	Name       string `json:"name"`
	Partitions int32  `json:"partitions"`
	Internal   bool   `json:"internal,omitempty"`
}

// PrintList prints topics sorted by name: a table, or a JSON array.
func PrintList(p *cli.Printer, topics []*brokerpb.TopicSummary) error {
	sort.Slice(topics, func(i, j int) bool { return topics[i].GetName() < topics[j].GetName() })
	if p.Format == cli.FormatJSON {
		rows := []listRow{}
		for _, t := range topics {
			rows = append(rows, listRow{t.GetName(), t.GetPartitions(), t.GetInternal()})
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
}
