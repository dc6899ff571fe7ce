package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/taskforge/taskforge/client"
)

// dlqCommand is `taskforge dlq list|replay|discard`.
func dlqCommand() *cobra.Command {
	o := &cliOptions{}
	return clientGroup(o, "dlq", "List, replay and discard dead-lettered tasks",
		dlqListCommand(o), dlqReplayCommand(o), dlqDiscardCommand(o))
}

func dlqListCommand(o *cliOptions) *cobra.Command {
	var limit int
	var cursor string
	var all bool
	cmd := &cobra.Command{
		Use:   "list QUEUE",
		Short: "List a queue's dead tasks, most recently died first",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.client()
			if err != nil {
				return err
			}
			tasks, next, err := listPages(cmd, o, all, func(ctx context.Context, cur string) (*client.TaskPage, error) {
				return c.ListDead(ctx, args[0], limit, cur)
			}, cursor)
			if err != nil {
				return err
			}
			return printTaskList(cmd, o, tasks, next, true)
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 100, "tasks per page (1..500)")
	cmd.Flags().StringVar(&cursor, "cursor", "", "continue after the page that printed this cursor")
	cmd.Flags().BoolVar(&all, "all", false, "follow the cursor through every page")
	return cmd
}

func dlqReplayCommand(o *cliOptions) *cobra.Command {
	var all, skipReplayed bool
	var batchSize int
	cmd := &cobra.Command{
		Use:   "replay QUEUE (ID... | --all)",
		Short: "Replay dead tasks as new pending tasks",
		Long: `Replay dead tasks: each becomes a new pending task (replayed_from names the dead
one, which keeps its history). Give the dead task ids, or --all for every dead
task of the queue; --skip-replayed leaves out those replayed before. Tasks are
replayed in batches of --batch-size, each batch all or nothing, with progress on
standard error.`,
		Args: usageArgs(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.client()
			if err != nil {
				return err
			}
			queue, ids := args[0], args[1:]
			switch {
			case all == (len(ids) > 0):
				return usagef("give dead task ids or --all")
			case skipReplayed && !all:
				return usagef("--skip-replayed goes with --all")
			case batchSize < 1 || batchSize > client.MaxBatch:
				return usagef("--batch-size must be 1 to %d", client.MaxBatch)
			}
			if all {
				if ids, err = deadIDs(cmd, o, c, queue, skipReplayed); err != nil {
					return err
				}
			}
			replayed, err := replayBatches(cmd, o, c, queue, ids, batchSize)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if o.output == "json" {
				return printJSON(w, map[string]any{"replayed": replayed})
			}
			if all {
				_, err := fmt.Fprintf(w, "replayed %d dead tasks of %s\n", len(replayed), queue)
				return err
			}
			rows := make([][]string, len(replayed))
			for i, t := range replayed {
				rows[i] = []string{fmtPtr(t.ReplayedFrom), t.ID, t.Status}
			}
			return table(w, []string{"DEAD_ID", "NEW_ID", "STATUS"}, rows)
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "replay every dead task of the queue")
	cmd.Flags().BoolVar(&skipReplayed, "skip-replayed", false, "with --all, leave out dead tasks replayed before")
	cmd.Flags().IntVar(&batchSize, "batch-size", 500, "dead tasks per request (1..1000)")
	return cmd
}

// deadIDs lists the ids of the queue's dead tasks (oldest death first).
func deadIDs(cmd *cobra.Command, o *cliOptions, c *client.Client, queue string, skipReplayed bool) ([]string, error) {
	tasks, _, err := listPages(cmd, o, true, func(ctx context.Context, cur string) (*client.TaskPage, error) {
		return c.ListDead(ctx, queue, 500, cur)
	}, "")
	if err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(tasks))
	for i := len(tasks) - 1; i >= 0; i-- {
		if !skipReplayed || tasks[i].ReplayCount == 0 {
			ids = append(ids, tasks[i].ID)
		}
	}
	return ids, nil
}

// replayBatches replays ids in batches, reporting progress on stderr.
func replayBatches(cmd *cobra.Command, o *cliOptions, c *client.Client, queue string, ids []string, batchSize int) ([]client.Task, error) {
	replayed := make([]client.Task, 0, len(ids))
	if len(ids) == 0 {
		return replayed, nil
	}
	p := newProgress(cmd.ErrOrStderr(), "replayed", len(ids))
	defer p.finish()
	for start := 0; start < len(ids); start += batchSize {
		batch := ids[start:min(start+batchSize, len(ids))]
		var got []client.Task
		err := o.call(cmd, func(ctx context.Context) (err error) {
			if len(batch) == 1 && len(ids) == 1 {
				var t *client.Task
				if t, err = c.ReplayDead(ctx, queue, batch[0]); err == nil {
					got = []client.Task{*t}
				}
				return err
			}
			got, err = c.ReplayDeadTasks(ctx, queue, batch)
			return err
		})
		if err != nil {
			if start == 0 {
				return nil, err
			}
			var ee exitError
			errors.As(err, &ee)
			return nil, exitError{ee.code, fmt.Errorf("replayed %d of %d dead tasks; the next batch failed, none of it was replayed: %w",
				len(replayed), len(ids), ee.err)}
		}
		replayed = append(replayed, got...)
		p.add(len(batch))
	}
	return replayed, nil
}

func dlqDiscardCommand(o *cliOptions) *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use:   "discard QUEUE (ID... | --all)",
		Short: "Delete dead tasks and their attempt history for good",
		Long: `Delete the dead tasks given by id, one request each (stopping at the first
that fails), or with --all every dead task of the queue in one request, which
the server carries out in batches.`,
		Args: usageArgs(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.client()
			if err != nil {
				return err
			}
			queue, ids := args[0], args[1:]
			if all == (len(ids) > 0) {
				return usagef("give dead task ids or --all (not both)")
			}
			if all {
				var n int
				if err := o.call(cmd, func(ctx context.Context) (err error) { n, err = c.DiscardAllDead(ctx, queue); return err }); err != nil {
					return err
				}
				if o.output == "json" {
					return printJSON(cmd.OutOrStdout(), map[string]any{"discarded": n})
				}
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "discarded %d dead tasks of %s\n", n, queue)
				return err
			}
			discarded := make([]string, 0, len(ids))
			for _, id := range ids {
				if err := o.call(cmd, func(ctx context.Context) error { return c.DiscardDead(ctx, queue, id) }); err != nil {
					if len(discarded) == 0 {
						return err
					}
					var ee exitError
					errors.As(err, &ee)
					return exitError{ee.code, fmt.Errorf("discarded %d of %d dead tasks (%v); then: %w", len(discarded), len(ids), discarded, ee.err)}
				}
				discarded = append(discarded, id)
			}
			if o.output == "json" {
				return printJSON(cmd.OutOrStdout(), map[string]any{"discarded": discarded})
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "discarded %d dead tasks of %s\n", len(discarded), queue)
			return err
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "discard every dead task of the queue")
	return cmd
}
