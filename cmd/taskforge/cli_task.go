package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/taskforge/taskforge/client"
)

// taskCommand is `taskforge task enqueue|get|wait|list|cancel`.
func taskCommand() *cobra.Command {
	o := &cliOptions{}
	return clientGroup(o, "task", "Enqueue, inspect, await, list and cancel tasks",
		taskEnqueueCommand(o), taskGetCommand(o), taskWaitCommand(o), taskListCommand(o), taskCancelCommand(o))
}

// enqueueFlags are the flags of `task enqueue`.
type enqueueFlags struct {
	payload        string
	file           string
	priority       int
	delay          time.Duration
	at             string
	maxRetries     int
	timeout        time.Duration
	idempotencyKey string
	debounceKey    string
	debounce       time.Duration
	debounceMax    time.Duration
	batchSize      int
	group          string
}

// fileTask is one line of an enqueue file: the API's enqueue body.
type fileTask struct {
	Payload        json.RawMessage `json:"payload"`
	Priority       *int            `json:"priority"`
	ScheduledAt    *time.Time      `json:"scheduled_at"`
	MaxRetries     *int            `json:"max_retries"`
	TimeoutSeconds *int            `json:"timeout_seconds"`
	IdempotencyKey *string         `json:"idempotency_key"`
	DebounceKey    *string         `json:"debounce_key"`
	DebounceMs     *int64          `json:"debounce_ms"`
	DebounceMaxMs  *int64          `json:"debounce_max_ms"`
	Group          *string         `json:"group"`
}

func taskEnqueueCommand(o *cliOptions) *cobra.Command {
	var f enqueueFlags
	cmd := &cobra.Command{
		Use:   "enqueue QUEUE (--payload JSON | --file TASKS.jsonl)",
		Short: "Enqueue one task, or many from a file of JSON lines",
		Long: `Enqueue one task with --payload, or many with --file: a file of JSON lines
(- for standard input), one enqueue body per line as the API takes it, e.g.

  {"payload": {"to": "ada@example.com"}, "priority": 2, "idempotency_key": "welcome-ada"}

Blank lines are skipped. The whole file is checked before anything is sent, then
it is sent in batches of --batch-size (at most 1000); each batch is all or nothing.
With --file, --priority, --delay/--at, --max-retries and --timeout give defaults
for lines that do not set them. Idempotency keys make a re-run after a partial
failure safe.

With --debounce-key K --debounce 30s, the task replaces the queue's task still
waiting with key K (same id, this payload, due 30s from now; --debounce-max caps
how long it waits from its first enqueue), or is created due 30s from now.`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.client()
			if err != nil {
				return err
			}
			tmpl, err := f.template(cmd)
			if err != nil {
				return err
			}
			if f.file != "" {
				return enqueueFile(cmd, o, c, args[0], f, tmpl)
			}
			if cmd.Flags().Changed("batch-size") {
				return usagef("--batch-size goes with --file")
			}
			if !json.Valid([]byte(f.payload)) {
				return usagef("--payload is not valid JSON: %s", f.payload)
			}
			tmpl.Payload = json.RawMessage(f.payload)
			tmpl.IdempotencyKey = f.idempotencyKey
			tmpl.DebounceKey = f.debounceKey
			t, err := callFor(o, cmd, func(ctx context.Context) (*client.Task, error) {
				return c.Enqueue(ctx, args[0], tmpl)
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
	fs := cmd.Flags()
	fs.StringVar(&f.payload, "payload", "", "task payload, any JSON value")
	fs.StringVarP(&f.file, "file", "f", "", "enqueue the tasks of a JSON-lines file (- for stdin)")
	fs.IntVar(&f.priority, "priority", 5, "1 (highest) to 10 (lowest)")
	fs.DurationVar(&f.delay, "delay", 0, "run no sooner than this from now")
	fs.StringVar(&f.at, "at", "", "run no sooner than this RFC 3339 time")
	fs.IntVar(&f.maxRetries, "max-retries", 0, "override the queue's retry budget")
	fs.DurationVar(&f.timeout, "timeout", 0, "time limit of one attempt (whole seconds)")
	fs.StringVar(&f.idempotencyKey, "idempotency-key", "", "repeat-safe key: the same key and request return the first task")
	fs.StringVar(&f.debounceKey, "debounce-key", "", "replace the queue's task waiting with this key, or create one (needs --debounce)")
	fs.DurationVar(&f.debounce, "debounce", 0, "with --debounce-key: the quiet period after which the task is due")
	fs.DurationVar(&f.debounceMax, "debounce-max", 0, "with --debounce-key: the longest the task waits from its first enqueue")
	fs.StringVar(&f.group, "group", "", "the task's group in a fair queue (with --file: the default of lines without one)")
	fs.IntVar(&f.batchSize, "batch-size", client.MaxBatch, "tasks per request with --file (1..1000)")
	return cmd
}

// template returns the task settings the flags give (everything but the payload).
func (f *enqueueFlags) template(cmd *cobra.Command) (client.NewTask, error) {
	var t client.NewTask
	changed := cmd.Flags().Changed
	switch {
	case f.file == "" && !changed("payload"):
		return t, usagef("give --payload JSON or --file TASKS.jsonl")
	case f.file != "" && changed("payload"):
		return t, usagef("--payload and --file exclude each other")
	case f.file != "" && changed("idempotency-key"):
		return t, usagef("--idempotency-key goes with --payload; in a file, set idempotency_key per line")
	case f.file != "" && changed("debounce-key"):
		return t, usagef("--debounce-key goes with --payload; in a file, set debounce_key per line")
	case (changed("debounce") || changed("debounce-max")) && !changed("debounce-key"):
		return t, usagef("--debounce and --debounce-max go with --debounce-key (in a file, set debounce_ms per line)")
	case changed("debounce-key") && (changed("delay") || changed("at") || changed("idempotency-key")):
		return t, usagef("--debounce-key excludes --delay, --at and --idempotency-key: the debounce decides when the task is due")
	case changed("delay") && changed("at"):
		return t, usagef("--delay and --at exclude each other")
	case f.batchSize < 1 || f.batchSize > client.MaxBatch:
		return t, usagef("--batch-size must be 1 to %d", client.MaxBatch)
	}
	if changed("priority") {
		t.Priority = f.priority
	}
	if changed("max-retries") {
		t.MaxRetries = &f.maxRetries
	}
	if changed("timeout") {
		t.Timeout = f.timeout
	}
	t.Debounce, t.DebounceMax = f.debounce, f.debounceMax
	t.Group = f.group
	if changed("delay") {
		t.ScheduledAt = time.Now().Add(f.delay)
	}
	if changed("at") {
		at, err := time.Parse(time.RFC3339Nano, f.at)
		if err != nil {
			return t, usagef("--at %q: want an RFC 3339 time such as 2030-01-02T15:04:05Z", f.at)
		}
		t.ScheduledAt = at
	}
	return t, nil
}

// readTaskFile parses a JSON-lines file into tasks, with tmpl's settings as
// defaults. Any bad line is a usage error naming it.
func readTaskFile(r io.Reader, name string, tmpl client.NewTask) ([]client.NewTask, error) {
	var tasks []client.NewTask
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for line := 1; sc.Scan(); line++ {
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		var ft fileTask
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&ft); err != nil {
			return nil, usagef("%s:%d: %v", name, line, err)
		}
		if dec.More() {
			return nil, usagef("%s:%d: more than one JSON value on the line", name, line)
		}
		if len(ft.Payload) == 0 {
			return nil, usagef(`%s:%d: "payload" is required`, name, line)
		}
		t := tmpl
		t.Payload = ft.Payload
		if ft.Priority != nil {
			t.Priority = *ft.Priority
		}
		if ft.ScheduledAt != nil {
			t.ScheduledAt = *ft.ScheduledAt
		}
		if ft.MaxRetries != nil {
			t.MaxRetries = ft.MaxRetries
		}
		if ft.TimeoutSeconds != nil {
			t.Timeout = time.Duration(*ft.TimeoutSeconds) * time.Second
		}
		if ft.IdempotencyKey != nil {
			t.IdempotencyKey = *ft.IdempotencyKey
		}
		if ft.DebounceKey != nil {
			t.DebounceKey = *ft.DebounceKey
		}
		if ft.Group != nil {
			t.Group = *ft.Group
		}
		if ft.DebounceMs != nil {
			t.Debounce = time.Duration(*ft.DebounceMs) * time.Millisecond
		}
		if ft.DebounceMaxMs != nil {
			t.DebounceMax = time.Duration(*ft.DebounceMaxMs) * time.Millisecond
		}
		tasks = append(tasks, t)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	if len(tasks) == 0 {
		return nil, usagef("%s holds no tasks", name)
	}
	return tasks, nil
}

func enqueueFile(cmd *cobra.Command, o *cliOptions, c *client.Client, queue string, f enqueueFlags, tmpl client.NewTask) error {
	var r io.Reader = cmd.InOrStdin()
	name := "stdin"
	if f.file != "-" {
		file, err := os.Open(f.file)
		if err != nil {
			return usageError(err)
		}
		defer file.Close()
		r, name = file, f.file
	}
	tasks, err := readTaskFile(r, name, tmpl)
	if err != nil {
		return err
	}
	ids := make([]string, 0, len(tasks))
	p := newProgress(cmd.ErrOrStderr(), "enqueued", len(tasks))
	for start := 0; start < len(tasks); start += f.batchSize {
		batch := tasks[start:min(start+f.batchSize, len(tasks))]
		var created []string
		err := o.call(cmd, func(ctx context.Context) (err error) {
			created, err = c.EnqueueBatchMinimal(ctx, queue, batch)
			return err
		})
		if err != nil {
			p.finish()
			var ee exitError
			errors.As(err, &ee)
			return exitError{ee.code, fmt.Errorf("enqueued %d of %d tasks; the batch of tasks %d..%d failed, none of it was enqueued: %w",
				len(ids), len(tasks), start+1, start+len(batch), ee.err)}
		}
		ids = append(ids, created...)
		p.add(len(batch))
	}
	p.finish()
	if o.output == "json" {
		return printJSON(cmd.OutOrStdout(), map[string]any{"enqueued": len(ids), "ids": ids})
	}
	_, err = fmt.Fprintf(cmd.OutOrStdout(), "enqueued %d tasks to %s\n", len(ids), queue)
	return err
}

// printTask writes a task's fields.
func printTask(w io.Writer, t *client.Task) error {
	return fields(w, [][2]string{
		{"id", t.ID},
		{"queue", t.Queue},
		{"status", t.Status},
		{"priority", strconv.Itoa(t.Priority)},
		{"attempts", attemptsLine(t)},
		{"scheduled_at", fmtTime(t.ScheduledAt)},
		{"timeout_seconds", fmtPtr(t.TimeoutSeconds)},
		{"idempotency_key", fmtPtr(t.IdempotencyKey)},
		{"claimed_by", fmtPtr(t.ClaimedBy)},
		{"lease_expires_at", fmtTimePtr(t.LeaseExpiresAt)},
		{"cancel_requested", strconv.FormatBool(t.CancelRequested)},
		{"last_error", oneLine(t.LastError, 200)},
		{"result", fmtResult(t.Result)},
		{"progress", fmtResult(t.Progress)},
		{"payload", fmtJSON(t.Payload)},
		{"replayed_from", fmtPtr(t.ReplayedFrom)},
		{"replay_count", strconv.Itoa(t.ReplayCount)},
		{"schedule", fmtPtr(t.Schedule)},
		{"debounce_key", fmtPtr(t.DebounceKey)},
		{"debounced", strconv.Itoa(t.Debounced)},
		{"group", fmtPtr(t.Group)},
		{"created_at", fmtTime(t.CreatedAt)},
		{"finished_at", fmtTimePtr(t.FinishedAt)},
	})
}

// attemptsLine is the attempts made, the budget, and the releases (by stopping
// workers, or snoozes) that did not spend it.
func attemptsLine(t *client.Task) string {
	line := fmt.Sprintf("%d (max_retries %d)", t.Attempts, t.MaxRetries)
	if t.Releases > 0 {
		line += fmt.Sprintf(", %d released by stopping workers or snoozed (not counted)", t.Releases)
	}
	return line
}

func taskGetCommand(o *cliOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "get QUEUE ID",
		Short: "Show a task and its attempt history",
		Args:  usageArgs(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			t, err := request(o, cmd, func(ctx context.Context, c *client.Client) (*client.Task, error) {
				return c.GetTask(ctx, args[0], args[1])
			})
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if o.output == "json" {
				return printJSON(w, t)
			}
			if err := printTask(w, t); err != nil {
				return err
			}
			if len(t.AttemptHistory) == 0 {
				_, err := fmt.Fprintln(w, "\nno attempts yet")
				return err
			}
			fmt.Fprintln(w)
			rows := make([][]string, len(t.AttemptHistory))
			for i, a := range t.AttemptHistory {
				rows[i] = []string{strconv.Itoa(a.Attempt), a.WorkerID, a.Status, fmtTime(a.StartedAt),
					fmtTimePtr(a.FinishedAt), oneLine(a.Error, 80)}
			}
			return table(w, []string{"ATTEMPT", "WORKER", "STATUS", "STARTED", "FINISHED", "ERROR"}, rows)
		},
	}
}

func taskListCommand(o *cliOptions) *cobra.Command {
	var f client.TaskFilter
	var after, before string
	var all bool
	cmd := &cobra.Command{
		Use:   "list QUEUE",
		Short: "List a queue's tasks, newest first",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.client()
			if err != nil {
				return err
			}
			for _, tf := range []struct {
				flag, raw string
				dst       *time.Time
			}{{"created-after", after, &f.CreatedAfter}, {"created-before", before, &f.CreatedBefore}} {
				if tf.raw == "" {
					continue
				}
				if *tf.dst, err = time.Parse(time.RFC3339Nano, tf.raw); err != nil {
					return usagef("--%s %q: want an RFC 3339 time", tf.flag, tf.raw)
				}
			}
			tasks, next, err := listPages(cmd, o, all, func(ctx context.Context, cursor string) (*client.TaskPage, error) {
				f.Cursor = cursor
				return c.ListTasks(ctx, args[0], f)
			}, f.Cursor)
			if err != nil {
				return err
			}
			return printTaskList(cmd, o, tasks, next, false)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.Status, "status", "", "only tasks in this status (pending, claimed, executing, retry, done, dead, cancelled)")
	fs.StringVar(&f.WorkerID, "worker", "", "only tasks claimed by this worker id")
	fs.StringVar(&f.Group, "group", "", "only tasks of this group of a fair queue")
	fs.StringVar(&after, "created-after", "", "only tasks created at or after this RFC 3339 time")
	fs.StringVar(&before, "created-before", "", "only tasks created before this RFC 3339 time")
	fs.IntVar(&f.Limit, "limit", 100, "tasks per page (1..500)")
	fs.StringVar(&f.Cursor, "cursor", "", "continue after the page that printed this cursor")
	fs.BoolVar(&all, "all", false, "follow the cursor through every page")
	return cmd
}

// listPages fetches one page, or every page from cursor on with all.
func listPages(cmd *cobra.Command, o *cliOptions, all bool, page func(context.Context, string) (*client.TaskPage, error), cursor string) ([]client.Task, string, error) {
	var tasks []client.Task
	for {
		var p *client.TaskPage
		if err := o.call(cmd, func(ctx context.Context) (err error) {
			p, err = page(ctx, cursor)
			return err
		}); err != nil {
			return nil, "", err
		}
		tasks = append(tasks, p.Tasks...)
		if !all || p.NextCursor == "" {
			return tasks, p.NextCursor, nil
		}
		cursor = p.NextCursor
	}
}

// printTaskList writes tasks as a table (dead: with the dead-letter columns), and
// the cursor of the next page when there is one.
func printTaskList(cmd *cobra.Command, o *cliOptions, tasks []client.Task, next string, dead bool) error {
	w := cmd.OutOrStdout()
	if o.output == "json" {
		var cursor *string
		if next != "" {
			cursor = &next
		}
		if tasks == nil {
			tasks = []client.Task{}
		}
		return printJSON(w, map[string]any{"tasks": tasks, "next_cursor": cursor})
	}
	rows := make([][]string, len(tasks))
	for i, t := range tasks {
		if dead {
			rows[i] = []string{t.ID, fmtTimePtr(t.DiedAt), strconv.Itoa(t.Attempts), strconv.Itoa(t.ReplayCount), oneLine(t.LastError, 60)}
		} else {
			rows[i] = []string{t.ID, t.Status, strconv.Itoa(t.Priority), strconv.Itoa(t.Attempts), fmtTime(t.CreatedAt), oneLine(t.LastError, 60)}
		}
	}
	headers := []string{"ID", "STATUS", "PRIORITY", "ATTEMPTS", "CREATED", "LAST_ERROR"}
	if dead {
		headers = []string{"ID", "DIED", "ATTEMPTS", "REPLAYS", "LAST_ERROR"}
	}
	if err := table(w, headers, rows); err != nil {
		return err
	}
	if next != "" {
		fmt.Fprintf(cmd.ErrOrStderr(), "more: add --cursor %s (or --all)\n", next)
	}
	return nil
}

func taskCancelCommand(o *cliOptions) *cobra.Command {
	var status string
	cmd := &cobra.Command{
		Use:   "cancel QUEUE (ID... | --status pending|retry|blocked)",
		Short: "Cancel tasks (an executing one stops at its worker's next heartbeat)",
		Long: `Cancel one task by id, several by id (sent 1000 a request), or every task of
the queue with --status: pending (buffered ones included), retry or blocked. A
task not yet executing ends cancelled at once; an executing one named by id is
flagged, and its worker stops it at its next heartbeat (--status never touches
executing tasks). The server cancels by status in batches, so give it a
--request-timeout long enough for the queue (measured: about 5 minutes per
million tasks on a small machine).`,
		Args: usageArgs(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			queue, ids := args[0], args[1:]
			switch {
			case status != "" && len(ids) > 0:
				return usagef("give task ids or --status, not both")
			case status == "" && len(ids) == 0:
				return usagef("give task ids or --status pending|retry|blocked")
			case status != "":
				return bulkCancel(cmd, o, queue, func(ctx context.Context, c *client.Client) (client.BulkCancel, error) {
					return c.CancelByStatus(ctx, queue, status)
				})
			case len(ids) > 1:
				return cancelIDs(cmd, o, queue, ids)
			}
			t, err := request(o, cmd, func(ctx context.Context, c *client.Client) (*client.Task, error) {
				return c.CancelTask(ctx, queue, ids[0])
			})
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if o.output == "json" {
				return printJSON(w, t)
			}
			if t.Status == client.StatusCancelled {
				_, err = fmt.Fprintf(w, "task %s cancelled\n", t.ID)
			} else {
				_, err = fmt.Fprintf(w, "task %s: cancel requested; it is executing on %s, which stops it at its next heartbeat\n",
					t.ID, fmtPtr(t.ClaimedBy))
			}
			return err
		},
	}
	cmd.Flags().StringVar(&status, "status", "", "cancel every task of the queue with this status: pending, retry or blocked")
	return cmd
}

// cancelIDs cancels ids in requests of client.MaxBatch and prints the totals.
func cancelIDs(cmd *cobra.Command, o *cliOptions, queue string, ids []string) error {
	var total client.BulkCancel
	for start := 0; start < len(ids); start += client.MaxBatch {
		batch := ids[start:min(start+client.MaxBatch, len(ids))]
		res, err := request(o, cmd, func(ctx context.Context, c *client.Client) (client.BulkCancel, error) {
			return c.CancelTasks(ctx, queue, batch)
		})
		if err != nil {
			if start == 0 {
				return err
			}
			var ee exitError
			errors.As(err, &ee)
			return exitError{ee.code, fmt.Errorf("cancelled %d and flagged %d of the first %d tasks; then: %w",
				total.Cancelled, total.CancelRequested, start, ee.err)}
		}
		total.Cancelled += res.Cancelled
		total.CancelRequested += res.CancelRequested
	}
	return printBulkCancel(cmd, o, queue, total)
}

func bulkCancel(cmd *cobra.Command, o *cliOptions, queue string, fn func(ctx context.Context, c *client.Client) (client.BulkCancel, error)) error {
	res, err := request(o, cmd, fn)
	if err != nil {
		return err
	}
	return printBulkCancel(cmd, o, queue, res)
}

func printBulkCancel(cmd *cobra.Command, o *cliOptions, queue string, res client.BulkCancel) error {
	w := cmd.OutOrStdout()
	if o.output == "json" {
		return printJSON(w, res)
	}
	_, err := fmt.Fprintf(w, "cancelled %d tasks of %s", res.Cancelled, queue)
	if err == nil && res.CancelRequested > 0 {
		_, err = fmt.Fprintf(w, "; %d executing tasks stop at their worker's next heartbeat", res.CancelRequested)
	}
	if err == nil {
		_, err = fmt.Fprintln(w)
	}
	return err
}

// lastLookTimeout bounds task wait's one look at the task after its --timeout fell
// before any answer.
const lastLookTimeout = 10 * time.Second

func taskWaitCommand(o *cliOptions) *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "wait QUEUE ID",
		Short: "Wait until a task is done, dead or cancelled, and show it",
		Long: `Wait until the task ends (done, dead or cancelled) and show it as get does.
The server answers as soon as the task ends; the command asks again every 30 s
until then. With --timeout it gives up after that long, shows the task as it is
and exits with 1; without it, it waits until interrupted.`,
		Args: usageArgs(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, timeout)
				defer cancel()
			}
			t, err := c.WaitTask(ctx, args[0], args[1])
			if t == nil && timeout > 0 && errors.Is(err, context.DeadlineExceeded) && cmd.Context().Err() == nil {
				// The timeout fell before the server's first answer (a slow server or
				// a short timeout): look once more, so that the task is shown as it is.
				look, cancel := context.WithTimeout(cmd.Context(), lastLookTimeout)
				t, err = c.GetTask(look, args[0], args[1])
				cancel()
				if err == nil {
					err = context.DeadlineExceeded
				}
			}
			timedOut := err != nil && errors.Is(err, context.DeadlineExceeded) && t != nil
			if err != nil && !timedOut {
				return withExitCode(err)
			}
			w := cmd.OutOrStdout()
			if o.output == "json" {
				err = printJSON(w, t)
			} else {
				err = printTask(w, t)
			}
			if err == nil && timedOut {
				err = exitError{exitFailure, fmt.Errorf("task %s is still %s after %s", t.ID, t.Status, timeout)}
			}
			return err
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "give up after this long (0: wait until the task ends)")
	return cmd
}
