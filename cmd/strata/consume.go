package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/strata-log/strata/client"
	"github.com/strata-log/strata/internal/cli"
)

// consumeEndCheck is how often consume -e re-checks whether every
// partition reached its end while no records arrive.
const consumeEndCheck = 500 * time.Millisecond

type consumeOptions struct {
	partition int32
	offset    string
	count     int64
	exitAtEnd bool
	format    string
	group     string
	raw       bool
}

func newConsumeCommand(g *globalOptions) *cobra.Command {
	o := &consumeOptions{}
	cmd := &cobra.Command{
		Use:   "consume TOPIC",
		Short: "Print records of a topic (every partition, or -p), following the tail",
		Long: `Prints TOPIC's records: every partition unless -p, from -o, following
the tail until -n records were printed, or with -e until every partition
reached the end (its high watermark as last seen); Ctrl-C stops cleanly.
The default -o is earliest.

-o earliest | latest | N (absolute) | -N (N before each partition's end) |
   @TIMESTAMP_MS | @-DURATION (records since now-DURATION, e.g. @-1h)

-f FORMAT (default "%v\n"), kcat's codes: %t topic, %p partition, %o offset,
   %k key, %v value, %h headers (name=value,...), %T timestamp (ms),
   %K key length, %S value length, %% percent; escapes \n \r \t \\.

--output json prints one object per record: topic, partition, offset,
timestamp, key, value, headers; a key or value that is not UTF-8 is base64
with "key_base64"/"value_base64": true. Records of one partition come in
offset order. --timeout bounds connecting, not the stream.

When stdout is a terminal, control characters anywhere in the output
(Unicode Cc: C0, DEL and C1) except newline and tab print escaped, so that
a record cannot drive the terminal (move the cursor, rewrite a line, set
the title): \r, \x1b for ESC, \u007f, \u009b; bytes that are not UTF-8 print
as \xNN (JSON output stays valid JSON of the same data). Pipes and files
get the bytes exactly as stored; --raw prints them exactly on a terminal
too (as kcat does).`,
		Example: `  strata consume orders -e -f '%k=%v (p%p@%o)\n'
  strata consume orders -p 0 -o -10 -n 10
  strata consume orders -o @-1h --output json`,
		Args: cobra.ExactArgs(1),
		RunE: cli.Run(func(cmd *cobra.Command, args []string) error {
			if o.raw || !stdoutIsTerminal(cmd.OutOrStdout()) {
				return runConsume(cmd, g, o, args[0])
			}
			tw := &terminalWriter{w: cmd.OutOrStdout()}
			cmd.SetOut(tw) // the group path (-g) prints through it too
			err := runConsume(cmd, g, o, args[0])
			if ferr := tw.Flush(); err == nil {
				err = ferr
			}
			return err
		}),
	}
	f := cmd.Flags()
	f.Int32VarP(&o.partition, "partition", "p", -1, "read only this partition")
	f.StringVarP(&o.offset, "offset", "o", "earliest", "where to start: earliest, latest, N, -N, @TIMESTAMP_MS, @-DURATION")
	f.Int64VarP(&o.count, "count", "n", 0, "exit after COUNT records (0: no limit)")
	f.BoolVarP(&o.exitAtEnd, "exit", "e", false, "exit once every partition reached its end")
	f.StringVarP(&o.format, "format", "f", cli.DefaultRecordFormat, "output format of each record (text output)")
	f.StringVarP(&o.group, "group", "g", "", "consume as a member of GROUP: resume from its committed offsets (-o applies where none is)")
	f.BoolVar(&o.raw, "raw", false, "print control characters as they are even when stdout is a terminal")
	// -o is the offset here (as in kcat): --output keeps its long form
	// only. Declaring it locally keeps cobra from merging the global
	// --output with its -o shorthand, which would clash.
	f.StringVar(&g.output, "output", string(cli.FormatText), "output format: text or json")
	return cmd
}

// stdoutIsTerminal reports whether w, consume's stdout, is a terminal,
// where control characters are escaped. Tests replace it.
var stdoutIsTerminal = cli.IsTerminal

// terminalWriter writes to a terminal what it is given with every control
// character (Unicode Cc: C0, DEL, C1) but newline and tab escaped, and
// every byte that is not UTF-8 as \xNN; see consume's help. A UTF-8
// sequence split across two writes is held back until the next (Flush
// ends the stream).
type terminalWriter struct {
	w     io.Writer
	carry []byte // the start of a UTF-8 sequence that the last write cut
	buf   []byte
}

func (t *terminalWriter) Write(p []byte) (int, error) {
	n := len(p)
	if len(t.carry) > 0 {
		p = append(t.carry, p...)
		t.carry = nil
	}
	out := t.buf[:0]
	for i := 0; i < len(p); {
		c := p[i]
		if c >= 0x20 && c < 0x7f || c == '\n' || c == '\t' {
			j := i + 1
			for j < len(p) && (p[j] >= 0x20 && p[j] < 0x7f || p[j] == '\n' || p[j] == '\t') {
				j++
			}
			out = append(out, p[i:j]...)
			i = j
			continue
		}
		r, size := utf8.DecodeRune(p[i:])
		switch {
		case r == utf8.RuneError && size <= 1 && !utf8.FullRune(p[i:]):
			t.carry = append(t.carry[:0], p[i:]...) // cut: wait for the rest
			i = len(p)
		case r == utf8.RuneError && size <= 1:
			out = fmt.Appendf(out, `\x%02x`, c)
			i++
		default:
			out = appendEscapedRune(out, r, p[i:i+size])
			i += size
		}
	}
	t.buf = out
	if _, err := t.w.Write(out); err != nil {
		return 0, err
	}
	return n, nil
}

// Flush writes a UTF-8 sequence held back, which no write completed,
// escaped.
func (t *terminalWriter) Flush() error {
	if len(t.carry) == 0 {
		return nil
	}
	var out []byte
	for _, c := range t.carry {
		out = fmt.Appendf(out, `\x%02x`, c)
	}
	t.carry = nil
	_, err := t.w.Write(out)
	return err
}

// appendEscapedRune appends r (encoded as b): escaped when it is a control
// character, as is otherwise.
func appendEscapedRune(dst []byte, r rune, b []byte) []byte {
	switch {
	case r == '\a':
		return append(dst, `\a`...)
	case r == '\b':
		return append(dst, `\b`...)
	case r == '\f':
		return append(dst, `\f`...)
	case r == '\r':
		return append(dst, `\r`...)
	case r == '\v':
		return append(dst, `\v`...)
	case r < 0x20:
		return fmt.Appendf(dst, `\x%02x`, r)
	case r >= 0x7f && r <= 0x9f:
		// \u: valid in JSON as well, for --output json.
		return fmt.Appendf(dst, `\u%04x`, r)
	}
	return append(dst, b...)
}

func runConsume(cmd *cobra.Command, g *globalOptions, o *consumeOptions, topic string) error {
	usage := func(err error) error { return cli.Exit(cli.ExitUsage, err) }
	spec, err := cli.ParseOffset(o.offset, time.Now())
	if err != nil {
		return usage(fmt.Errorf("-o: %w", err))
	}
	format, err := cli.ParseRecordFormat(o.format)
	if err != nil {
		return usage(fmt.Errorf("-f: %w", err))
	}
	if o.count < 0 {
		return usage(fmt.Errorf("-n %d: want 0 or more", o.count))
	}
	if o.group != "" {
		return runGroupConsume(cmd, g, o, topic)
	}

	ctx := cmd.Context()
	setupCtx, cancel := g.commandContext(cmd)
	defer cancel()
	c, err := g.brokerClient(setupCtx)
	if err != nil {
		return err
	}
	defer c.Close()
	src, err := assignPartitions(setupCtx, c, topic, o.partition, spec, o.exitAtEnd)
	if err != nil {
		return err
	}
	defer src.Close()
	cancel()

	out := bufio.NewWriterSize(cmd.OutOrStdout(), 64<<10)
	defer out.Flush()
	asJSON := g.format == cli.FormatJSON
	var (
		printed int64
		buf     []byte
		cr      cli.ConsumedRecord
	)
	for {
		if o.exitAtEnd && src.AtEnd() {
			return nil
		}
		pollCtx, cancelPoll := ctx, context.CancelFunc(func() {})
		if o.exitAtEnd {
			pollCtx, cancelPoll = context.WithTimeout(ctx, consumeEndCheck)
		}
		recs, err := src.Poll(pollCtx)
		cancelPoll()
		if ctx.Err() != nil {
			return nil // Ctrl-C: a clean stop
		}
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		for _, r := range recs {
			cr = cli.ConsumedRecord{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset,
				TimestampMs: r.Timestamp.UnixMilli(), Key: r.Key, Value: r.Value, Headers: cr.Headers[:0]}
			for _, h := range r.Headers {
				cr.Headers = append(cr.Headers, cli.RecordHeader{Key: h.Key, Value: h.Value})
			}
			if asJSON {
				b, err := json.Marshal(cli.NewJSONRecord(&cr))
				if err != nil {
					return err
				}
				buf = append(append(buf[:0], b...), '\n')
			} else {
				buf = format.Append(buf[:0], &cr)
			}
			if _, err := out.Write(buf); err != nil {
				return err
			}
			printed++
			if o.count > 0 && printed >= o.count {
				return out.Flush()
			}
		}
		if err := out.Flush(); err != nil {
			return err
		}
	}
}

// partitionSource reads assigned partitions with a client.Consumer.
type partitionSource struct {
	*client.Consumer
	tps []client.TopicPartition
	// end is each partition's high watermark when consume started: the
	// end until a fetch reports a newer one.
	end map[client.TopicPartition]int64
	// empty partitions (start == end) are at their end even before a
	// position is known.
	empty map[client.TopicPartition]bool
}

// assignPartitions assigns partition (or every partition, for -1) of topic
// at spec. withEnds looks up each partition's current end for AtEnd.
func assignPartitions(ctx context.Context, c *client.Client, topic string, partition int32, spec cli.OffsetSpec, withEnds bool) (*partitionSource, error) {
	n, err := partitionCount(ctx, c, topic)
	if err != nil {
		return nil, err
	}
	src := &partitionSource{end: map[client.TopicPartition]int64{}, empty: map[client.TopicPartition]bool{}}
	switch {
	case partition >= n:
		return nil, cli.Exit(cli.ExitUsage, fmt.Errorf("-p %d: topic %s has partitions 0 to %d", partition, topic, n-1))
	case partition >= 0:
		src.tps = []client.TopicPartition{{Topic: topic, Partition: partition}}
	default:
		for p := range n {
			src.tps = append(src.tps, client.TopicPartition{Topic: topic, Partition: p})
		}
	}
	if withEnds {
		for _, tp := range src.tps {
			resp, err := c.ListOffsets(ctx, tp, -1)
			if err != nil {
				return nil, fmt.Errorf("end of %s: %w", tp, err)
			}
			src.end[tp] = resp.GetOffset()
			src.empty[tp] = resp.GetLogStartOffset() >= resp.GetOffset()
		}
	}
	cons, err := c.NewConsumer(client.ConsumerConfig{})
	if err != nil {
		return nil, err
	}
	assign := map[client.TopicPartition]client.Offset{}
	for _, tp := range src.tps {
		assign[tp] = clientOffset(spec)
	}
	if err := cons.Assign(ctx, assign); err != nil {
		cons.Close()
		return nil, err
	}
	src.Consumer = cons
	return src, nil
}

func (s *partitionSource) AtEnd() bool {
	for _, tp := range s.tps {
		end, ok := s.HighWatermark(tp)
		if !ok {
			end = s.end[tp]
		}
		pos, ok := s.Position(tp)
		if !ok {
			if s.empty[tp] {
				continue
			}
			return false
		}
		if pos < end {
			return false
		}
	}
	return true
}

// partitionCount asks the brokers how many partitions topic has.
func partitionCount(ctx context.Context, c *client.Client, topic string) (int32, error) {
	md, err := c.Metadata(ctx, topic)
	if err != nil {
		return 0, err
	}
	for _, t := range md.GetTopics() {
		if t.GetName() != topic {
			continue
		}
		if e := t.GetError(); e != nil {
			return 0, fmt.Errorf("topic %s: %s", topic, e.GetMessage())
		}
		if len(t.GetPartitions()) == 0 {
			return 0, fmt.Errorf("topic %s has no partitions", topic)
		}
		return int32(len(t.GetPartitions())), nil
	}
	return 0, fmt.Errorf("%w: %s", client.ErrUnknownTopic, topic)
}

func clientOffset(o cli.OffsetSpec) client.Offset {
	switch o.Kind {
	case cli.OffsetEarliest:
		return client.OffsetEarliest()
	case cli.OffsetAbsolute:
		return client.OffsetAt(o.N)
	case cli.OffsetFromEnd:
		return client.OffsetFromEnd(o.N)
	case cli.OffsetTimestamp:
		return client.OffsetAtTime(o.Time)
	}
	return client.OffsetLatest()
}
