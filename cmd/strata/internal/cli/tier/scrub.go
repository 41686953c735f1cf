package tier

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/strata-log/strata/cmd/strata/internal/cli"
	"github.com/strata-log/strata/metad/metaclient"
	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/proto/metadpb"
	"github.com/strata-log/strata/tiering/objstore"
	"github.com/strata-log/strata/tiering/scrub"
	"github.com/strata-log/strata/tiering/segfile"
)

// Lister is the part of *metaclient.Client Segments uses.
type Lister interface {
	List(ctx context.Context, prefix string, opts ...metaclient.ReadOption) ([]*metadpb.KeyValue, int64, error)
}

// Getter is the part of *metaclient.Client Listed uses.
type Getter interface {
	Get(ctx context.Context, key string, opts ...metaclient.ReadOption) (*metadpb.KeyValue, error)
}

// Listed is scrub.Config.Listed over metad: whether the segment's
// partition still lists its object, as metad says now (a scrub runs for
// hours; retention and compaction unlink objects meanwhile).
func Listed(c Getter) func(context.Context, scrub.Segment) (bool, error) {
	return func(ctx context.Context, s scrub.Segment) (bool, error) {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		kv, err := c.Get(ctx, fmt.Sprintf("%s%s/%d", brokerpb.PartitionPrefix, s.Topic, s.Partition))
		if errors.Is(err, metaclient.ErrNotFound) {
			return false, nil // the topic was deleted
		}
		if err != nil {
			return false, err
		}
		var pl brokerpb.PartitionLog
		if err := proto.Unmarshal(kv.GetValue(), &pl); err != nil {
			return false, fmt.Errorf("metad key %s: %w", kv.GetKey(), err)
		}
		return slices.ContainsFunc(pl.GetTiered(), func(t *brokerpb.TieredSegment) bool {
			return t.GetObjectKey() == s.Tiered.GetObjectKey()
		}), nil
	}
}

// TierKey reads the cluster's tier key from metad
// (brokerpb.TierSegmentMACKey): nil when there is none (no broker with a
// tier store ever ran, so no object is authenticated).
func TierKey(ctx context.Context, c Getter) (*segfile.Key, error) {
	kv, err := c.Get(ctx, brokerpb.TierSegmentMACKey)
	switch {
	case errors.Is(err, metaclient.ErrNotFound):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading the tier key %s (scrub checks objects' MACs with it; only brokers and admins may read it): %w",
			brokerpb.TierSegmentMACKey, err)
	}
	key, err := segfile.NewKey(kv.GetValue())
	if err != nil {
		return nil, fmt.Errorf("metad key %s: %w", brokerpb.TierSegmentMACKey, err)
	}
	return key, nil
}

// ScrubOptions are how Scrub runs.
type ScrubOptions struct {
	// Key: scrub.Config.Key, the cluster's tier key (TierKey).
	Key *segfile.Key
	// Listed: scrub.Config.Listed (nil: every problem is reported).
	Listed   func(context.Context, scrub.Segment) (bool, error)
	Parallel int
	// ShowProgress draws a progress line on Stderr.
	ShowProgress bool
	Stderr       io.Writer
}

// Scrub checks segs in store, printing each problem (text) or the report
// (JSON) through p, the progress line and a summary on o.Stderr. A
// damaged object is exit code 2, an unreadable one 1; objects written
// before authentication are listed (unauthenticated) but fail nothing.
func Scrub(ctx context.Context, store objstore.Store, segs []scrub.Segment, p *cli.Printer, o ScrubOptions) error {
	line := cli.NewProgressLine(o.Stderr, o.ShowProgress)
	cfg := scrub.Config{
		Key:      o.Key,
		Listed:   o.Listed,
		Parallel: o.Parallel,
		Progress: func(pr scrub.Progress) { line.Update(progressText(pr)) },
	}
	if p.Format != cli.FormatJSON {
		cfg.Problem = func(pr scrub.Problem) {
			line.Clear()
			fmt.Fprintln(p.W, pr)
		}
	}
	start := time.Now()
	rep, err := scrub.Run(ctx, store, segs, cfg)
	line.Clear()
	fmt.Fprintln(o.Stderr, summary(rep, len(segs), time.Since(start)))
	if err != nil {
		return err
	}
	if p.Format == cli.FormatJSON {
		if err := p.JSON(newScrubJSON(rep, len(segs))); err != nil {
			return err
		}
	}
	switch {
	case rep.Damaged() > 0:
		return cli.Exit(cli.ExitUsage, nil)
	case rep.Counts()[scrub.KindUnreadable] > 0:
		return cli.Exit(cli.ExitRuntime, nil)
	}
	return nil
}

// Segments lists the committed segment objects of every partition
// (of topic, when not empty) from the PartitionLogs in metad.
func Segments(ctx context.Context, c Lister, topic string) ([]scrub.Segment, error) {
	prefix := brokerpb.PartitionPrefix
	if topic != "" {
		prefix += topic + "/"
	}
	kvs, _, err := c.List(ctx, prefix)
	if err != nil {
		return nil, err
	}
	if topic != "" && len(kvs) == 0 {
		return nil, fmt.Errorf("topic %s: no partition in metad", topic)
	}
	var segs []scrub.Segment
	for _, kv := range kvs {
		rest := strings.TrimPrefix(kv.GetKey(), brokerpb.PartitionPrefix)
		i := strings.LastIndexByte(rest, '/')
		part, perr := strconv.ParseInt(rest[i+1:], 10, 32)
		if i < 0 || perr != nil {
			return nil, fmt.Errorf("metad key %s: not /strata/partitions/TOPIC/PARTITION", kv.GetKey())
		}
		var pl brokerpb.PartitionLog
		if err := proto.Unmarshal(kv.GetValue(), &pl); err != nil {
			return nil, fmt.Errorf("metad key %s: %w", kv.GetKey(), err)
		}
		for _, t := range pl.GetTiered() {
			segs = append(segs, scrub.Segment{Topic: rest[:i], Partition: int32(part), Tiered: t})
		}
	}
	return segs, nil
}

// progressText is the progress line of a running scrub.
func progressText(p scrub.Progress) string {
	pct := 100.0
	if p.TotalBytes > 0 {
		pct = 100 * float64(p.Bytes) / float64(p.TotalBytes)
	}
	return fmt.Sprintf("scrub: %d/%d objects, %s/%s (%.0f%%), %s", p.Objects, p.TotalObjects,
		cli.Bytes(uint64(p.Bytes)), cli.Bytes(uint64(p.TotalBytes)), pct, plural(p.Problems, "problem"))
}

// summary is the last line of a scrub, on stderr.
func summary(rep scrub.Report, total int, elapsed time.Duration) string {
	s := fmt.Sprintf("scrub: checked %d of %d objects (%s) in %s: ", rep.Objects, total, cli.Bytes(uint64(rep.Bytes)),
		elapsed.Round(time.Millisecond))
	if rep.Gone > 0 {
		s += plural(rep.Gone, "object") + " deleted by retention or compaction while checked, "
	}
	if len(rep.Problems) == 0 {
		return s + "no problems"
	}
	counts := rep.Counts()
	var kinds []string
	for k, n := range counts {
		kinds = append(kinds, fmt.Sprintf("%d %s", n, k))
	}
	sort.Strings(kinds)
	return s + plural(len(rep.Problems), "problem") + " (" + strings.Join(kinds, ", ") + ")"
}

// plural is "1 what" or "n whats".
func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// ScrubJSON is the JSON form of a scrub's report.
type ScrubJSON struct {
	Objects      int            `json:"objects"`
	TotalObjects int            `json:"total_objects"`
	Bytes        int64          `json:"bytes"`
	Damaged      int            `json:"damaged"`
	Problems     []ScrubProblem `json:"problems"`
}

// ScrubProblem is one damaged or unreadable object in ScrubJSON.
type ScrubProblem struct {
	Topic      string `json:"topic"`
	Partition  int32  `json:"partition"`
	BaseOffset int64  `json:"base_offset"`
	LastOffset int64  `json:"last_offset"`
	Key        string `json:"key"`
	Kind       string `json:"kind"`
	Detail     string `json:"detail"`
}

func newScrubJSON(rep scrub.Report, total int) ScrubJSON {
	out := ScrubJSON{Objects: rep.Objects, TotalObjects: total, Bytes: rep.Bytes, Damaged: rep.Damaged(),
		Problems: []ScrubProblem{}}
	for _, p := range rep.Problems {
		t := p.Segment.Tiered
		out.Problems = append(out.Problems, ScrubProblem{Topic: p.Segment.Topic, Partition: p.Segment.Partition,
			BaseOffset: t.GetBaseOffset(), LastOffset: t.GetLastOffset(), Key: t.GetObjectKey(), Kind: string(p.Kind), Detail: p.Detail})
	}
	return out
}
