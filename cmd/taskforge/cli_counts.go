package main

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/taskforge/taskforge/storage"
)

// exitDrift is the exit code of `queue check-counts` when a kept count differs
// from a recount.
const exitDrift = 6

// queueDrift is one queue's result of `queue check-counts`: per status, the kept
// count minus the recount (no entry: exact).
type queueDrift struct {
	Queue string           `json:"queue"`
	Drift map[string]int64 `json:"drift"`
}

// queueCheckCountsCommand is `taskforge queue check-counts [NAME...]`: it recounts
// queues the slow way, straight from PostgreSQL (storage.Store.TallyDrift), and
// compares the counts that stats, /metrics and the dashboard read.
func queueCheckCountsCommand(o *cliOptions) *cobra.Command {
	var databaseURL string
	cmd := &cobra.Command{
		Use:   "check-counts [NAME...]",
		Short: "Recount queues' tasks by status in PostgreSQL and report any kept count that is off (exit 6)",
		Long: `check-counts recounts each named queue's tasks by status (every queue by default) with
count(*) in one read-only snapshot per queue, finished tasks in history included, and
compares the counts TaskForge keeps for stats, /metrics and the dashboard. It talks
to PostgreSQL directly (--database-url or $DATABASE_URL), not to the server, and
reads every row of the queue: run it off peak on a large queue. It changes nothing.

It prints the statuses whose kept count is off, with kept minus counted, and exits 6
when any is; 0 when every count is exact.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.output != "table" && o.output != "json" {
				return usagef("--output %q: want table or json", o.output)
			}
			if databaseURL == "" {
				return usageError(errors.New("--database-url or $DATABASE_URL is required"))
			}
			ctx := cmd.Context()
			pool, err := storage.Connect(ctx, databaseURL, 1)
			if err != nil {
				return err
			}
			defer pool.Close()
			store := storage.New(pool)
			queues := args
			if len(queues) == 0 {
				qs, err := store.ListQueues(ctx)
				if err != nil {
					return err
				}
				for _, q := range qs {
					queues = append(queues, q.Name)
				}
			}
			out := make([]queueDrift, 0, len(queues))
			drifted := 0
			for _, name := range queues {
				if _, err := store.GetQueue(ctx, name); err != nil {
					if errors.Is(err, storage.ErrQueueNotFound) {
						return exitError{exitNotFound, err}
					}
					return err
				}
				drift, err := store.TallyDrift(ctx, name)
				if err != nil {
					return err
				}
				if len(drift) > 0 {
					drifted++
				}
				out = append(out, queueDrift{Queue: name, Drift: drift})
			}
			if err := printDrift(cmd, o.output, out, drifted); err != nil {
				return err
			}
			if drifted > 0 {
				return exitError{exitDrift, fmt.Errorf("the kept counts of %d of %d queues differ from a recount", drifted, len(out))}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&databaseURL, "database-url", envOr("DATABASE_URL", ""), "PostgreSQL URL ($DATABASE_URL)")
	return cmd
}

// printDrift prints the queues' drift: as JSON, every queue; as a table, the
// statuses that are off, or one line saying all counts are exact.
func printDrift(cmd *cobra.Command, output string, out []queueDrift, drifted int) error {
	if output == "json" {
		return printJSON(cmd.OutOrStdout(), out)
	}
	if drifted == 0 {
		cmd.Printf("the kept counts of %d queues match a recount\n", len(out))
		return nil
	}
	var rows [][]string
	for _, q := range out {
		for _, status := range slices.Sorted(maps.Keys(q.Drift)) {
			rows = append(rows, []string{q.Queue, status, signed(q.Drift[status])})
		}
	}
	return table(cmd.OutOrStdout(), []string{"QUEUE", "STATUS", "KEPT-COUNTED"}, rows)
}

// signed formats n with its sign, + included.
func signed(n int64) string {
	if n > 0 {
		return "+" + strconv.FormatInt(n, 10)
	}
	return strconv.FormatInt(n, 10)
}
