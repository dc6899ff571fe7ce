package main

import (
	"context"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/taskforge/taskforge/client"
)

// taskforge group: a fair queue's groups (docs/flow-control.md).
func groupCommand() *cobra.Command {
	o := &cliOptions{}
	return clientGroup(o, "group", "List and inspect a fair queue's groups; set and delete their overrides",
		groupListCommand(o), groupGetCommand(o), groupSetCommand(o), groupDeleteCommand(o))
}

func printGroup(cmd *cobra.Command, o *cliOptions, g *client.Group) error {
	if o.output == "json" {
		return printJSON(cmd.OutOrStdout(), g)
	}
	override := func(s string, set bool) string {
		if set {
			return s + " (override)"
		}
		return s
	}
	return fields(cmd.OutOrStdout(), [][2]string{
		{"group", g.Group},
		{"weight", override(strconv.Itoa(g.Effective.Weight), g.Weight != nil)},
		{"max_concurrency", override(fmtPtr(g.Effective.MaxConcurrency), g.MaxConcurrency != nil)},
		{"rate_limit", override(fmtPtr(g.Effective.RateLimit), g.RateLimit != nil)},
		{"rate_burst", override(fmtPtr(g.Effective.RateBurst), g.RateBurst != nil)},
		{"pending", strconv.FormatInt(g.Pending, 10)},
		{"claimed", strconv.FormatInt(g.Claimed, 10)},
		{"executing", strconv.FormatInt(g.Executing, 10)},
		{"retry", strconv.FormatInt(g.Retry, 10)},
		{"blocked", strconv.FormatInt(g.Blocked, 10)},
		{"dead", strconv.FormatInt(g.Dead, 10)},
	})
}

func groupListCommand(o *cliOptions) *cobra.Command {
	var f client.GroupFilter
	cmd := &cobra.Command{
		Use:   "list QUEUE",
		Short: "List a queue's groups by name (--active: those with waiting or running work)",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := request(o, cmd, func(ctx context.Context, c *client.Client) (*client.GroupPage, error) {
				return c.ListGroups(ctx, args[0], f)
			})
			if err != nil {
				return err
			}
			if o.output == "json" {
				return printJSON(cmd.OutOrStdout(), p)
			}
			rows := make([][]string, len(p.Groups))
			for i, g := range p.Groups {
				rows[i] = []string{g.Group, strconv.Itoa(g.Effective.Weight), fmtPtr(g.Effective.MaxConcurrency),
					fmtPtr(g.Effective.RateLimit), strconv.FormatInt(g.Pending, 10), strconv.FormatInt(g.Claimed, 10),
					strconv.FormatInt(g.Executing, 10), strconv.FormatInt(g.Retry, 10), strconv.FormatInt(g.Dead, 10)}
			}
			if err := table(cmd.OutOrStdout(), []string{"GROUP", "WEIGHT", "MAX_CONCURRENCY", "RATE_LIMIT", "PENDING",
				"CLAIMED", "EXECUTING", "RETRY", "DEAD"}, rows); err != nil {
				return err
			}
			if p.NextCursor != "" {
				cmd.PrintErrf("more: --cursor %s\n", p.NextCursor)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&f.Active, "active", false, "only groups with pending, claimed or executing tasks")
	cmd.Flags().IntVar(&f.Limit, "limit", 100, "groups per page (1..500)")
	cmd.Flags().StringVar(&f.Cursor, "cursor", "", "continue after the previous page")
	return cmd
}

func groupGetCommand(o *cliOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "get QUEUE GROUP",
		Short: "Show a group's settings and counts",
		Args:  usageArgs(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			g, err := request(o, cmd, func(ctx context.Context, c *client.Client) (*client.Group, error) {
				return c.GetGroup(ctx, args[0], args[1])
			})
			if err != nil {
				return err
			}
			return printGroup(cmd, o, g)
		},
	}
}

func groupSetCommand(o *cliOptions) *cobra.Command {
	var weight, maxConcurrency, burst int
	var rate float64
	cmd := &cobra.Command{
		Use:   "set QUEUE GROUP",
		Short: "Replace a group's overrides of the queue's group defaults (flags not given: the default)",
		Args:  usageArgs(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			var s client.GroupSettings
			changed := cmd.Flags().Changed
			if changed("weight") {
				s.Weight = &weight
			}
			if changed("max-concurrency") {
				s.MaxConcurrency = &maxConcurrency
			}
			if changed("rate-limit") {
				s.RateLimit = &rate
			}
			if changed("rate-burst") {
				s.RateBurst = &burst
			}
			g, err := request(o, cmd, func(ctx context.Context, c *client.Client) (*client.Group, error) {
				return c.PutGroup(ctx, args[0], args[1], s)
			})
			if err != nil {
				return err
			}
			return printGroup(cmd, o, g)
		},
	}
	fs := cmd.Flags()
	fs.IntVar(&weight, "weight", 1, "turns per round (1..1000)")
	fs.IntVar(&maxConcurrency, "max-concurrency", 0, "the group's tasks executing at once")
	fs.Float64Var(&rate, "rate-limit", 0, "the group's tasks handed out per second")
	fs.IntVar(&burst, "rate-burst", 0, "the group's token bucket size")
	return cmd
}

func groupDeleteCommand(o *cliOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "delete QUEUE GROUP",
		Short: "Forget a group's overrides (its tasks stay)",
		Args:  usageArgs(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.call(cmd, func(ctx context.Context) error {
				c, err := o.client()
				if err != nil {
					return err
				}
				return c.DeleteGroup(ctx, args[0], args[1])
			})
		},
	}
}
