package tier

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"sync"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/strata-log/strata/client"
	"github.com/strata-log/strata/cmd/strata/internal/cli"
	"github.com/strata-log/strata/proto/brokerpb"
)

// describeParallel is how many topics DescribeTopics describes at once.
const describeParallel = 8

// DescribeTopics describes the topic named in args, or every topic (with
// internal ones when all), a few at a time. Topics deleted meanwhile are
// left out.
func DescribeTopics(ctx context.Context, c *client.Client, args []string, all bool) ([]*brokerpb.TopicDescription, error) {
	if len(args) == 1 {
		d, err := c.DescribeTopic(ctx, args[0])
		if err != nil {
			return nil, err
		}
		return []*brokerpb.TopicDescription{d}, nil
	}
	topics, err := c.ListTopics(ctx, all)
	if err != nil {
		return nil, err
	}
	descs := make([]*brokerpb.TopicDescription, len(topics))
	errs := make([]error, len(topics))
	var wg sync.WaitGroup
	sem := make(chan struct{}, describeParallel)
	for i, t := range topics {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			descs[i], errs[i] = c.DescribeTopic(ctx, t.GetName())
			if status.Code(errs[i]) == codes.NotFound {
				errs[i] = nil
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return slices.DeleteFunc(descs, func(d *brokerpb.TopicDescription) bool { return d == nil }), nil
}

// StatusRow is one partition's line of `tier status`.
type StatusRow struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	// Tiering: the topic's configs let it be tiered (the broker still
	// needs a --tier-store).
	Tiering         bool  `json:"tiering"`
	LogStartOffset  int64 `json:"log_start_offset"`  // -1: unknown
	TieredEndOffset int64 `json:"tiered_end_offset"` // 0: nothing tiered
	TieredObjects   int32 `json:"tiered_objects"`
	TieredBytes     int64 `json:"tiered_bytes"`
	BookieBytes     int64 `json:"bookie_bytes"`
	BookieLedgers   int   `json:"bookie_ledgers"`
	// The upload lag: closed ledgers with offsets at or after the tiered
	// end, their bytes, and now minus the newest record of the oldest of
	// them (0 when none waits).
	LagLedgers int   `json:"upload_lag_ledgers"`
	LagBytes   int64 `json:"upload_lag_bytes"`
	LagMs      int64 `json:"upload_lag_ms"`
}

// StatusRows computes the status of every partition of descs, sorted
// by topic and partition.
func StatusRows(descs []*brokerpb.TopicDescription, now time.Time) []StatusRow {
	rows := []StatusRow{}
	for _, d := range descs {
		tiering := topicTiered(d)
		for _, p := range d.GetPartitions() {
			r := StatusRow{Topic: d.GetName(), Partition: p.GetPartition(), Tiering: tiering,
				LogStartOffset: p.GetLogStartOffset(), TieredEndOffset: p.GetTieredEndOffset(),
				TieredObjects: p.GetTieredSegments(), TieredBytes: p.GetTieredBytes(),
				BookieBytes: p.GetBytes(), BookieLedgers: len(p.GetLedgers())}
			if tiering {
				r.LagLedgers, r.LagBytes, r.LagMs = uploadLag(p, now)
			}
			rows = append(rows, r)
		}
	}
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].Topic != rows[j].Topic {
			return rows[i].Topic < rows[j].Topic
		}
		return rows[i].Partition < rows[j].Partition
	})
	return rows
}

// topicTiered reports whether a topic's configs let the broker tier it:
// remote.storage.enable, not internal (as the broker decides).
func topicTiered(d *brokerpb.TopicDescription) bool {
	if d.GetInternal() {
		return false
	}
	for _, c := range d.GetConfigs() {
		if c.GetName() == "remote.storage.enable" {
			return c.GetValue() == "true"
		}
	}
	return true
}

// uploadLag sums the closed, non-empty ledgers that reach past the tiered
// end offset (not yet in an object), and returns how old the oldest of
// them is: now minus its newest record's timestamp (0 if unknown or in the
// future).
func uploadLag(p *brokerpb.PartitionDescription, now time.Time) (ledgers int, bytes, ageMs int64) {
	oldest := int64(-1)
	for _, l := range p.GetLedgers() {
		if !l.GetClosed() || l.GetLastOffset() < l.GetFirstOffset() || l.GetLastOffset() < p.GetTieredEndOffset() {
			continue
		}
		ledgers++
		bytes += l.GetBytes()
		if ts := l.GetMaxTimestampMs(); ts > 0 && (oldest < 0 || ts < oldest) {
			oldest = ts
		}
	}
	if oldest > 0 {
		ageMs = max(0, now.UnixMilli()-oldest)
	}
	return ledgers, bytes, ageMs
}

// PrintStatus prints rows: a table, or JSON {"partitions": [...]}.
func PrintStatus(p *cli.Printer, rows []StatusRow) error {
	if p.Format == cli.FormatJSON {
		return p.JSON(map[string][]StatusRow{"partitions": rows})
	}
	return printStatusText(p.W, rows)
}

func printStatusText(w io.Writer, rows []StatusRow) error {
	tw := tabwriter.NewWriter(w, 0, 2, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tPARTITION\tSTART\tTIERED END\tOBJECTS\tSTORE\tBOOKIES\tLEDGERS\tLAG\tLAG AGE")
	for _, r := range rows {
		start, end := "-", "-"
		if r.LogStartOffset >= 0 {
			start = strconv.FormatInt(r.LogStartOffset, 10)
		}
		if r.TieredObjects > 0 {
			end = strconv.FormatInt(r.TieredEndOffset, 10)
		}
		lag, age := "off", "-"
		switch {
		case r.Tiering && r.LagLedgers > 0:
			lag = fmt.Sprintf("%s in %s", cli.Bytes(uint64(max(0, r.LagBytes))), plural(r.LagLedgers, "ledger"))
			age = (time.Duration(r.LagMs) * time.Millisecond).Round(time.Second).String()
		case r.Tiering:
			lag = "0"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%s\t%s\t%d\t%s\t%s\n", r.Topic, r.Partition, start, end, r.TieredObjects,
			cli.Bytes(uint64(max(0, r.TieredBytes))), cli.Bytes(uint64(max(0, r.BookieBytes))), r.BookieLedgers, lag, age)
	}
	return tw.Flush()
}
