package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/strata-log/strata/client"
	"github.com/strata-log/strata/cmd/strata/internal/cli"
	"github.com/strata-log/strata/cmd/strata/internal/cli/stream"
)

// produceBufferBytes bounds the records produce has read but not yet had
// acknowledged.
const produceBufferBytes = 16 << 20

type produceOptions struct {
	keySeparator string
	key          string
	headers      []string
	partition    int32
	acks         string
	compression  string
	nullEmpty    bool
}

func newProduceCommand(g *globalOptions) *cobra.Command {
	o := &produceOptions{}
	cmd := &cobra.Command{
		Use:   "produce TOPIC",
		Short: "Produce records read from stdin, one per line",
		Long: `Reads records from stdin, one per line, and produces them to TOPIC.

  -K SEP   split each line at the first SEP: key before, value after
           (a line without SEP is all value, with no key)
  -k KEY   the same key for every record
  -Z       an empty value is a tombstone (null value); an empty key, no key
  -H n=v   add a header to every record (repeatable)

Input streams: memory stays bounded whatever its size (the producer
back-pressures). Exits 0 only when every record was acknowledged, printing
the count to stderr; otherwise prints how many failed and the first error,
and exits 1. --timeout bounds connecting, not the stream.`,
		Example: `  printf 'k1:hello\nk2:world\n' | strata produce orders -K:
  seq 1000000 | strata produce numbers --acks one --compression zstd`,
		Args: cobra.ExactArgs(1),
		RunE: cli.Run(func(cmd *cobra.Command, args []string) error {
			return runProduce(cmd, g, o, args[0])
		}),
	}
	f := cmd.Flags()
	f.StringVarP(&o.keySeparator, "key-separator", "K", "", "split each line into key and value at the first SEP")
	f.StringVarP(&o.key, "key", "k", "", "key of every record")
	f.StringArrayVarP(&o.headers, "header", "H", nil, "header name=value for every record (repeatable)")
	f.Int32VarP(&o.partition, "partition", "p", -1, "partition (default: by key hash, sticky without a key)")
	f.StringVar(&o.acks, "acks", "quorum", "acknowledgement: none, one, quorum or all")
	f.StringVar(&o.compression, "compression", "none", "compression: none, gzip, snappy, lz4 or zstd")
	f.BoolVarP(&o.nullEmpty, "null", "Z", false, "send an empty value as a tombstone (null) and an empty key as no key")
	return cmd
}

func parseHeaders(hs []string) ([]client.Header, error) {
	var out []client.Header
	for _, h := range hs {
		k, v, ok := strings.Cut(h, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("-H %q: want name=value", h)
		}
		out = append(out, client.Header{Key: k, Value: []byte(v)})
	}
	return out, nil
}

// produceFlags are produce's parsed flags.
type produceFlags struct {
	acks  client.Acks
	codec client.Compression
	opts  stream.ProduceOptions
}

func (o *produceOptions) parse(cmd *cobra.Command, topic string) (produceFlags, error) {
	usage := func(err error) error { return cli.Exit(cli.ExitUsage, err) }
	if o.keySeparator != "" && cmd.Flags().Changed("key") {
		return produceFlags{}, usage(errors.New("-K and -k exclude each other"))
	}
	if cmd.Flags().Changed("key-separator") && o.keySeparator == "" {
		return produceFlags{}, usage(errors.New("-K: the separator is empty"))
	}
	acks, err := client.ParseAcks(o.acks)
	if err != nil {
		return produceFlags{}, usage(err)
	}
	codec, err := client.ParseCompression(o.compression)
	if err != nil {
		return produceFlags{}, usage(err)
	}
	headers, err := parseHeaders(o.headers)
	if err != nil {
		return produceFlags{}, usage(err)
	}
	split := cli.LineSplitter{KeySeparator: []byte(o.keySeparator), NullEmpty: o.nullEmpty}
	if cmd.Flags().Changed("key") {
		split.Key = []byte(o.key)
	}
	return produceFlags{acks: acks, codec: codec,
		opts: stream.ProduceOptions{Topic: topic, Partition: o.partition, Split: split, Headers: headers}}, nil
}

func runProduce(cmd *cobra.Command, g *globalOptions, o *produceOptions, topic string) error {
	f, err := o.parse(cmd, topic)
	if err != nil {
		return err
	}
	connectCtx, cancel := g.commandContext(cmd)
	c, err := g.brokerClient(connectCtx)
	cancel()
	if err != nil {
		return err
	}
	defer c.Close()
	// A smaller buffer than the client default: the CLI streams, its
	// throughput needs little read-ahead, and memory stays modest.
	prod, err := c.NewProducer(client.ProducerConfig{Acks: f.acks, Compression: f.codec, MaxBufferedBytes: produceBufferBytes})
	if err != nil {
		return err
	}
	res := stream.Produce(cmd.Context(), cmd.InOrStdin(), prod, f.opts)
	fmt.Fprintf(cmd.ErrOrStderr(), "produced %d records to %s (acks=%s)\n", res.Acked, topic, f.acks)
	return res.Err()
}
