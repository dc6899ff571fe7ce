package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/taskforge/taskforge/client"
)

// workersCommand is `taskforge workers`: the workers the server has seen.
func workersCommand() *cobra.Command {
	o := &cliOptions{}
	cmd := &cobra.Command{
		Use:   "workers",
		Short: "List the workers the server has seen, with the tasks they run",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ws, err := request(o, cmd, func(ctx context.Context, c *client.Client) ([]client.WorkerInfo, error) {
				return c.ListWorkers(ctx)
			})
			if err != nil {
				return err
			}
			if o.output == "json" {
				return printJSON(cmd.OutOrStdout(), map[string]any{"workers": ws})
			}
			rows := make([][]string, len(ws))
			for i, w := range ws {
				rows[i] = []string{w.ID, strings.Join(w.Queues, ","), fmtTime(w.LastHeartbeatAt),
					strconv.Itoa(len(w.CurrentTasks)), strconv.FormatBool(w.Stale)}
			}
			return table(cmd.OutOrStdout(), []string{"ID", "QUEUES", "LAST_HEARTBEAT", "TASKS", "STALE"}, rows)
		},
	}
	setupClientCommand(o, cmd)
	return cmd
}

// statsCommand is `taskforge stats [QUEUE...]`: one line per queue, all by default.
func statsCommand() *cobra.Command {
	o := &cliOptions{}
	cmd := &cobra.Command{
		Use:   "stats [QUEUE...]",
		Short: "Show depth by status, throughput, error rate and DLQ depth of queues (all by default)",
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.client()
			if err != nil {
				return err
			}
			queues := args
			if len(queues) == 0 {
				qs, err := callFor(o, cmd, func(ctx context.Context) ([]client.Queue, error) {
					return c.ListQueues(ctx)
				})
				if err != nil {
					return err
				}
				for _, q := range qs {
					queues = append(queues, q.Name)
				}
			}
			stats := make([]*client.Stats, 0, len(queues))
			for _, q := range queues {
				st, err := callFor(o, cmd, func(ctx context.Context) (*client.Stats, error) {
					return c.Stats(ctx, q)
				})
				if err != nil {
					return err
				}
				stats = append(stats, st)
			}
			// History is shown when all queues are (it is admin's; a restricted token
			// asking for its queues does not need it).
			var hist *client.History
			if len(args) == 0 {
				ctx, cancel := context.WithTimeout(cmd.Context(), o.timeout)
				hist, err = c.History(ctx)
				cancel()
				if err != nil && !errors.Is(err, client.ErrForbidden) {
					return withExitCode(err)
				}
			}
			if o.output == "json" {
				out := map[string]any{"stats": stats}
				if hist != nil {
					out["history"] = hist
				}
				return printJSON(cmd.OutOrStdout(), out)
			}
			statuses := []string{client.StatusPending, client.StatusClaimed, client.StatusExecuting, client.StatusRetry,
				client.StatusDone, client.StatusDead, client.StatusCancelled}
			headers := []string{"QUEUE"}
			for _, s := range statuses {
				headers = append(headers, strings.ToUpper(s))
			}
			headers = append(headers, "THROUGHPUT/S", "ERROR_RATE", "OLDEST_PENDING")
			rows := make([][]string, len(stats))
			for i, st := range stats {
				row := []string{st.Queue}
				for _, s := range statuses {
					row = append(row, strconv.FormatInt(st.Depth[s], 10))
				}
				rows[i] = append(row, fmt.Sprintf("%.2f", st.ThroughputPerSec), fmt.Sprintf("%.1f%%", 100*st.ErrorRate),
					fmt.Sprintf("%.0fs", st.OldestPendingAgeSeconds))
			}
			if err := table(cmd.OutOrStdout(), headers, rows); err != nil || hist == nil {
				return err
			}
			return printHistory(cmd.OutOrStdout(), hist)
		},
	}
	setupClientCommand(o, cmd)
	return cmd
}

// printHistory shows task history's day partitions by status, and the last sweep.
func printHistory(w io.Writer, h *client.History) error {
	fmt.Fprintln(w)
	for _, st := range h.Statuses {
		if st.Partitions == 0 {
			fmt.Fprintf(w, "history %-9s  no day partitions\n", st.Status)
			continue
		}
		fmt.Fprintf(w, "history %-9s  %d days, oldest %s, newest %s, ~%d tasks\n",
			st.Status, st.Partitions, st.OldestDay, st.NewestDay, st.RowsEstimate)
	}
	if s := h.LastSweep; s != nil {
		line := fmt.Sprintf("last retention sweep %s (%dms): %d days dropped (%d tasks), %d tasks deleted in batches",
			fmtTime(s.At), s.TookMs, s.PartitionsDropped, s.RowsDropped, s.BatchDeleted)
		if s.Held > 0 {
			line += fmt.Sprintf(", %d expired days held", s.Held)
		}
		if s.Error != nil {
			line += "; failed: " + *s.Error
		}
		_, err := fmt.Fprintln(w, line)
		return err
	}
	_, err := fmt.Fprintln(w, "no retention sweep yet on this replica")
	return err
}
