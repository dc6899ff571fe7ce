package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/taskforge/taskforge/client"
)

// workflowCommand is `taskforge workflow submit|get|list|cancel`.
func workflowCommand() *cobra.Command {
	o := &cliOptions{}
	return clientGroup(o, "workflow", "Submit, inspect and cancel workflows (DAGs of tasks)",
		workflowSubmitCommand(o), workflowGetCommand(o), workflowListCommand(o), workflowCancelCommand(o))
}

func printWorkflow(w io.Writer, output string, wf *client.Workflow) error {
	if output == "json" {
		return printJSON(w, wf)
	}
	if err := fields(w, [][2]string{
		{"id", wf.ID},
		{"name", fmtPtr(wf.Name)},
		{"status", wf.Status},
		{"idempotency_key", fmtPtr(wf.IdempotencyKey)},
		{"created_at", fmtTime(wf.CreatedAt)},
		{"finished_at", fmtTimePtr(wf.FinishedAt)},
	}); err != nil {
		return err
	}
	fmt.Fprintln(w)
	rows := make([][]string, len(wf.Steps))
	for i, st := range wf.Steps {
		rows[i] = []string{st.Step, fmtPtr(st.Status), fmtPtr(st.Queue), strings.Join(st.DependsOn, ","),
			fmtPtr(st.Attempts), st.TaskID, fmtPtr(st.LastError)}
	}
	return table(w, []string{"STEP", "STATUS", "QUEUE", "DEPENDS_ON", "ATTEMPTS", "TASK", "LAST_ERROR"}, rows)
}

func workflowSubmitCommand(o *cliOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "submit FILE|-",
		Short: "Submit a workflow described in a JSON file (- reads standard input)",
		Long: `Submit a workflow. The file holds the body of POST /workflows:

  {"name": "ci", "idempotency_key": "commit-abc",
   "steps": [{"step": "build", "queue": "ci", "payload": {"commit": "abc"}},
             {"step": "test", "queue": "ci", "payload": {}, "depends_on": ["build"]},
             {"step": "lint", "queue": "ci", "payload": {}, "depends_on": ["build"]},
             {"step": "deploy", "queue": "ci", "payload": {}, "depends_on": ["test", "lint"]}]}

Every step's task is inserted at once; a step runs when all it depends on are done.`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			var raw []byte
			var err error
			if args[0] == "-" {
				raw, err = io.ReadAll(cmd.InOrStdin())
			} else {
				raw, err = os.ReadFile(args[0])
			}
			if err != nil {
				return usagef("read %s: %v", args[0], err)
			}
			var nw client.NewWorkflow
			dec := json.NewDecoder(strings.NewReader(string(raw)))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&nw); err != nil {
				return usagef("%s is not a workflow (name, idempotency_key, steps): %v", args[0], err)
			}
			wf, err := request(o, cmd, func(ctx context.Context, c *client.Client) (*client.Workflow, error) {
				wf, _, err := c.SubmitWorkflow(ctx, nw)
				return wf, err
			})
			if err != nil {
				return err
			}
			return printWorkflow(cmd.OutOrStdout(), o.output, wf)
		},
	}
}

func workflowGetCommand(o *cliOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "get ID",
		Short: "Show a workflow and the state of each step",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			wf, err := request(o, cmd, func(ctx context.Context, c *client.Client) (*client.Workflow, error) {
				return c.GetWorkflow(ctx, args[0])
			})
			if err != nil {
				return err
			}
			return printWorkflow(cmd.OutOrStdout(), o.output, wf)
		},
	}
}

func workflowListCommand(o *cliOptions) *cobra.Command {
	var f client.WorkflowFilter
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List workflows, newest first",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			page, err := request(o, cmd, func(ctx context.Context, c *client.Client) (*client.WorkflowPage, error) {
				return c.ListWorkflows(ctx, f)
			})
			if err != nil {
				return err
			}
			if o.output == "json" {
				return printJSON(cmd.OutOrStdout(), page)
			}
			rows := make([][]string, len(page.Workflows))
			for i, wf := range page.Workflows {
				done := 0
				for _, st := range wf.Steps {
					if st.Status != nil && *st.Status == client.StatusDone {
						done++
					}
				}
				rows[i] = []string{wf.ID, fmtPtr(wf.Name), wf.Status, fmt.Sprintf("%d/%d", done, len(wf.Steps)),
					fmtTime(wf.CreatedAt), fmtTimePtr(wf.FinishedAt)}
			}
			if err := table(cmd.OutOrStdout(), []string{"ID", "NAME", "STATUS", "DONE", "CREATED_AT", "FINISHED_AT"}, rows); err != nil {
				return err
			}
			if page.NextCursor != "" {
				fmt.Fprintf(cmd.ErrOrStderr(), "more: --cursor %s\n", page.NextCursor)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&f.Status, "status", "", "only workflows with this status: running, succeeded, failed or cancelled")
	cmd.Flags().IntVar(&f.Limit, "limit", 50, "workflows per page (1..500)")
	cmd.Flags().StringVar(&f.Cursor, "cursor", "", "continue after a previous page")
	return cmd
}

func workflowCancelCommand(o *cliOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "cancel ID",
		Short: "Cancel a running workflow (executing steps are asked to stop)",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			wf, err := request(o, cmd, func(ctx context.Context, c *client.Client) (*client.Workflow, error) {
				return c.CancelWorkflow(ctx, args[0])
			})
			if err != nil {
				return err
			}
			return printWorkflow(cmd.OutOrStdout(), o.output, wf)
		},
	}
}
