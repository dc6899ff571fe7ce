package main

import (
	"context"
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/taskforge/taskforge/client"
)

// auditCommand is `taskforge audit`: the operator actions the server recorded.
func auditCommand() *cobra.Command {
	o := &cliOptions{}
	var queue, cursor string
	var limit int
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "List recorded operator actions (queue changes, cancels, DLQ replays, tokens), newest first",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 1 || limit > 500 {
				return usagef("--limit must be 1 to 500")
			}
			p, err := request(o, cmd, func(ctx context.Context, c *client.Client) (*client.AuditPage, error) {
				return c.ListAudit(ctx, queue, limit, cursor)
			})
			if err != nil {
				return err
			}
			if o.output == "json" {
				var next *string
				if p.NextCursor != "" {
					next = &p.NextCursor
				}
				entries := p.Entries
				if entries == nil {
					entries = []client.AuditEntry{}
				}
				return printJSON(cmd.OutOrStdout(), map[string]any{"entries": entries, "next_cursor": next})
			}
			rows := make([][]string, len(p.Entries))
			for i, e := range p.Entries {
				target := ""
				if e.Target != nil {
					target = *e.Target
				}
				qn := ""
				if e.Queue != nil {
					qn = *e.Queue
				}
				req := string(e.Request)
				if req == "null" {
					req = ""
				}
				rows[i] = []string{fmtTime(e.At), e.Actor, e.Via, e.Method + " " + e.Route, qn, target,
					strconv.Itoa(e.Status), oneLine(&req, 60), e.RemoteAddr}
			}
			if err := table(cmd.OutOrStdout(), []string{"AT", "ACTOR", "VIA", "ACTION", "QUEUE", "TARGET", "STATUS", "REQUEST", "FROM"}, rows); err != nil {
				return err
			}
			if p.NextCursor != "" {
				fmt.Fprintf(cmd.ErrOrStderr(), "more: add --cursor %s\n", p.NextCursor)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&queue, "queue", "", "only the actions on this queue")
	cmd.Flags().IntVar(&limit, "limit", 50, "entries per page (1..500)")
	cmd.Flags().StringVar(&cursor, "cursor", "", "continue after the page that printed this cursor")
	setupClientCommand(o, cmd)
	return cmd
}
