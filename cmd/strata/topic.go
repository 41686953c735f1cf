package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/strata-log/strata/client"
	"github.com/strata-log/strata/cmd/strata/internal/cli"
	"github.com/strata-log/strata/cmd/strata/internal/cli/stream"
	"github.com/strata-log/strata/cmd/strata/internal/cli/topic"
)

func newTopicCommand(g *globalOptions) *cobra.Command {
	cmd := &cobra.Command{Use: "topic", Short: "Create, list, describe, change and delete topics"}
	cmd.AddCommand(newTopicCreateCommand(g), newTopicListCommand(g), newTopicDescribeCommand(g),
		newTopicDeleteCommand(g), newTopicAlterCommand(g), newTopicAddPartitionsCommand(g))
	return cmd
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
				owned := stream.WaitOwned(ctx, c, args[0], min(g.timeout, 10*time.Second))
				p := g.printer(cmd)
				if p.Format == cli.FormatJSON {
					return p.JSON(topic.New(desc))
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
				return topic.PrintList(g.printer(cmd), topics)
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
				out := topic.New(desc)
				topic.LiveOffsets(ctx, c, desc.GetName(), out.Partitions)
				return topic.Print(g.printer(cmd), out)
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
				return topic.PrintConfigs(g.printer(cmd), topic.New(desc))
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
					return p.JSON(topic.New(desc))
				}
				_, err = fmt.Fprintf(p.W, "topic %s now has %d partitions\n", desc.GetName(), desc.GetPartitionCount())
				return err
			})
		}),
	}
	cmd.Flags().Int32VarP(&total, "partitions", "p", 0, "the new total number of partitions")
	return cmd
}
