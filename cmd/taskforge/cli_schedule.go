package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/taskforge/taskforge/client"
)

// scheduleCommand is `taskforge schedule create|list|get|update|delete|trigger`.
func scheduleCommand() *cobra.Command {
	o := &cliOptions{}
	return clientGroup(o, "schedule", "Create, inspect, change, pause, delete and trigger cron schedules",
		scheduleCreateCommand(o), scheduleListCommand(o), scheduleGetCommand(o), scheduleUpdateCommand(o),
		scheduleDeleteCommand(o), scheduleTriggerCommand(o))
}

// scheduleFlags are the settings flags of create and update.
type scheduleFlags struct {
	queue, cron, timezone, payload string
	priority                       int
	maxRetries, timeout            string
	paused                         bool
}

func (f *scheduleFlags) register(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&f.queue, "queue", "", "queue the schedule's tasks go to")
	fs.StringVar(&f.cron, "cron", "", `cron expression: 5 fields, 6 with leading seconds, @daily etc., or "@every 10m"`)
	fs.StringVar(&f.timezone, "timezone", "UTC", "IANA time zone the expression is read in (e.g. Europe/Berlin)")
	fs.StringVar(&f.payload, "payload", "", "payload of every task, any JSON value")
	fs.IntVar(&f.priority, "priority", 5, "priority of its tasks, 1 (highest) to 10")
	fs.StringVar(&f.maxRetries, "max-retries", "default", "retries of its tasks (0..100), or default (the queue's)")
	fs.StringVar(&f.timeout, "timeout", "none", "timeout_seconds of each attempt, or none")
	fs.BoolVar(&f.paused, "paused", false, "fire nothing until resumed (update --paused=false resumes)")
}

// settings returns the settings whose flags were given.
func (f *scheduleFlags) settings(cmd *cobra.Command) (client.ScheduleSettings, error) {
	var s client.ScheduleSettings
	changed := cmd.Flags().Changed
	if changed("queue") {
		s.Queue = &f.queue
	}
	if changed("cron") {
		s.Cron = &f.cron
	}
	if changed("timezone") {
		s.Timezone = &f.timezone
	}
	if changed("payload") {
		if !json.Valid([]byte(f.payload)) {
			return s, usagef("--payload is not valid JSON: %s", f.payload)
		}
		s.Payload = json.RawMessage(f.payload)
	}
	if changed("priority") {
		s.Priority = &f.priority
	}
	if changed("max-retries") {
		if f.maxRetries == "default" {
			s.MaxRetries = client.Null[int]()
		} else if n, err := strconv.Atoi(f.maxRetries); err == nil {
			s.MaxRetries = client.Set(n)
		} else {
			return s, usagef("--max-retries %q: want an integer or default", f.maxRetries)
		}
	}
	if changed("timeout") {
		if f.timeout == "none" {
			s.TimeoutSeconds = client.Null[int]()
		} else if n, err := strconv.Atoi(f.timeout); err == nil {
			s.TimeoutSeconds = client.Set(n)
		} else {
			return s, usagef("--timeout %q: want a number of seconds or none", f.timeout)
		}
	}
	if changed("paused") {
		s.Paused = &f.paused
	}
	return s, nil
}

// anyChanged reports whether any settings flag was given.
func (f *scheduleFlags) anyChanged(cmd *cobra.Command) bool {
	for _, name := range []string{"queue", "cron", "timezone", "payload", "priority", "max-retries", "timeout", "paused"} {
		if cmd.Flags().Changed(name) {
			return true
		}
	}
	return false
}

func printSchedule(w io.Writer, output string, s *client.Schedule) error {
	if output == "json" {
		return printJSON(w, s)
	}
	return fields(w, [][2]string{
		{"name", s.Name},
		{"queue", s.Queue},
		{"cron", s.Cron},
		{"timezone", s.Timezone},
		{"paused", strconv.FormatBool(s.Paused)},
		{"next_run_at", fmtTimePtr(s.NextRunAt)},
		{"last_run_at", fmtTimePtr(s.LastRunAt)},
		{"last_task_id", fmtPtr(s.LastTaskID)},
		{"payload", fmtJSON(s.Payload)},
		{"priority", strconv.Itoa(s.Priority)},
		{"max_retries", fmtPtr(s.MaxRetries)},
		{"timeout_seconds", fmtPtr(s.TimeoutSeconds)},
		{"created_at", fmtTime(s.CreatedAt)},
		{"updated_at", fmtTime(s.UpdatedAt)},
	})
}

func scheduleCreateCommand(o *cliOptions) *cobra.Command {
	var f scheduleFlags
	cmd := &cobra.Command{
		Use:   "create NAME --queue QUEUE --cron EXPR --payload JSON",
		Short: "Create a schedule that enqueues one task per tick",
		Long: `Create a schedule. Exactly one task is enqueued per tick, whatever the number of
replicas; a replica that returns after all were down enqueues only the most recent
missed tick. Examples of --cron: "*/5 * * * *", "0 30 2 * * *" (with seconds),
"@daily", "@every 90s".`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.client()
			if err != nil {
				return err
			}
			for _, name := range []string{"queue", "cron", "payload"} {
				if !cmd.Flags().Changed(name) {
					return usagef("--%s is required", name)
				}
			}
			s, err := f.settings(cmd)
			if err != nil {
				return err
			}
			sch, err := callFor(o, cmd, func(ctx context.Context) (*client.Schedule, error) {
				return c.CreateSchedule(ctx, args[0], s)
			})
			if err != nil {
				return err
			}
			return printSchedule(cmd.OutOrStdout(), o.output, sch)
		},
	}
	f.register(cmd)
	return cmd
}

func scheduleListCommand(o *cliOptions) *cobra.Command {
	var queue string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List schedules, with their next and last runs",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			list, err := request(o, cmd, func(ctx context.Context, c *client.Client) ([]client.Schedule, error) {
				return c.ListSchedules(ctx, queue)
			})
			if err != nil {
				return err
			}
			if o.output == "json" {
				return printJSON(cmd.OutOrStdout(), map[string]any{"schedules": list})
			}
			rows := make([][]string, len(list))
			for i, s := range list {
				rows[i] = []string{s.Name, s.Queue, s.Cron, s.Timezone, strconv.FormatBool(s.Paused),
					fmtTimePtr(s.NextRunAt), fmtTimePtr(s.LastRunAt), fmtPtr(s.LastTaskID)}
			}
			return table(cmd.OutOrStdout(), []string{"NAME", "QUEUE", "CRON", "TIMEZONE", "PAUSED", "NEXT_RUN_AT", "LAST_RUN_AT", "LAST_TASK"}, rows)
		},
	}
	cmd.Flags().StringVar(&queue, "queue", "", "only the schedules of this queue")
	return cmd
}

func scheduleGetCommand(o *cliOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "get NAME",
		Short: "Show a schedule",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			sch, err := request(o, cmd, func(ctx context.Context, c *client.Client) (*client.Schedule, error) {
				return c.GetSchedule(ctx, args[0])
			})
			if err != nil {
				return err
			}
			return printSchedule(cmd.OutOrStdout(), o.output, sch)
		},
	}
}

func scheduleUpdateCommand(o *cliOptions) *cobra.Command {
	var f scheduleFlags
	cmd := &cobra.Command{
		Use:   "update NAME",
		Short: "Change a schedule (only the flags given); --paused pauses, --paused=false resumes",
		Long: "Change a schedule. Only the flags given change; the next tick is recomputed from now.\n" +
			"A paused schedule fires nothing; resuming it fires from the next tick on.",
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.client()
			if err != nil {
				return err
			}
			s, err := f.settings(cmd)
			if err != nil {
				return err
			}
			if !f.anyChanged(cmd) {
				return usagef("nothing to change: give at least one setting flag (see --help)")
			}
			sch, err := callFor(o, cmd, func(ctx context.Context) (*client.Schedule, error) {
				return c.UpdateSchedule(ctx, args[0], s)
			})
			if err != nil {
				return err
			}
			return printSchedule(cmd.OutOrStdout(), o.output, sch)
		},
	}
	f.register(cmd)
	return cmd
}

func scheduleDeleteCommand(o *cliOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a schedule (the tasks it created stay)",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.client()
			if err != nil {
				return err
			}
			if err := o.call(cmd, func(ctx context.Context) error { return c.DeleteSchedule(ctx, args[0]) }); err != nil {
				return err
			}
			if o.output == "json" {
				return printJSON(cmd.OutOrStdout(), map[string]string{"deleted": args[0]})
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "schedule %s deleted\n", args[0])
			return err
		},
	}
}

func scheduleTriggerCommand(o *cliOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "trigger NAME",
		Short: "Enqueue the schedule's task now (its next tick is unchanged)",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			t, err := request(o, cmd, func(ctx context.Context, c *client.Client) (*client.Task, error) {
				return c.TriggerSchedule(ctx, args[0])
			})
			if err != nil {
				return err
			}
			if o.output == "json" {
				return printJSON(cmd.OutOrStdout(), t)
			}
			return printTask(cmd.OutOrStdout(), t)
		},
	}
}
