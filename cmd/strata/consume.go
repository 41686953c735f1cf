package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/strata-log/strata/cmd/strata/internal/cli"
	"github.com/strata-log/strata/cmd/strata/internal/cli/stream"
)

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
			tw := &cli.TerminalWriter{W: cmd.OutOrStdout()}
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

// consumeFlags are consume's parsed flags.
type consumeFlags struct {
	spec   cli.OffsetSpec
	format *cli.RecordFormat // nil: JSON
}

func (o *consumeOptions) parse(g *globalOptions) (consumeFlags, error) {
	usage := func(err error) error { return cli.Exit(cli.ExitUsage, err) }
	spec, err := cli.ParseOffset(o.offset, time.Now())
	if err != nil {
		return consumeFlags{}, usage(fmt.Errorf("-o: %w", err))
	}
	format, err := cli.ParseRecordFormat(o.format)
	if err != nil {
		return consumeFlags{}, usage(fmt.Errorf("-f: %w", err))
	}
	if o.count < 0 {
		return consumeFlags{}, usage(fmt.Errorf("-n %d: want 0 or more", o.count))
	}
	if g.format == cli.FormatJSON {
		format = nil
	}
	return consumeFlags{spec: spec, format: format}, nil
}

func runConsume(cmd *cobra.Command, g *globalOptions, o *consumeOptions, topic string) error {
	f, err := o.parse(g)
	if err != nil {
		return err
	}
	if o.group != "" {
		return runGroupConsume(cmd, g, o, f, topic)
	}
	setupCtx, cancel := g.commandContext(cmd)
	defer cancel()
	c, err := g.brokerClient(setupCtx)
	if err != nil {
		return err
	}
	defer c.Close()
	src, err := stream.Assign(setupCtx, c, topic, o.partition, f.spec, o.exitAtEnd)
	if err != nil {
		return err
	}
	defer src.Close()
	cancel()
	loop := stream.Loop{Count: o.count, ExitAtEnd: o.exitAtEnd}
	if o.exitAtEnd {
		loop.PollTimeout = stream.EndCheck
	}
	return loop.Run(cmd.Context(), src, stream.NewRecordWriter(cmd.OutOrStdout(), f.format))
}
