package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/taskforge/taskforge/client"
)

// queueCommand is `taskforge queue create|list|get|update|pause|resume|delete|check-counts`.
func queueCommand() *cobra.Command {
	o := &cliOptions{}
	return clientGroup(o, "queue", "Create, inspect, change, pause and delete queues",
		queueCreateCommand(o), queueListCommand(o), queueGetCommand(o), queueUpdateCommand(o),
		queuePauseCommand(o, true), queuePauseCommand(o, false), queueDeleteCommand(o), queueCheckCountsCommand(o))
}

// queueFlags are the settings flags of create and update.
type queueFlags struct {
	maxRetries     int
	rateLimit      string
	rateBurst      string
	maxConcurrency string
	backoffBase    time.Duration
	backoffMax     time.Duration
	paused         bool
	priorityAging  string
	pushURL        string
	pushTimeout    time.Duration
	pushHeaders    []string
	pushSecret     string
	pull           bool
	retention      [3]string // done, cancelled, dead: an age or forever
	retentionReset bool
	idemWindow     time.Duration
	fairness       string
	groupMaxConc   string
	groupRate      string
	groupBurst     string
}

// retentionFlags name the three retention ages, in the order of queueFlags.retention.
var retentionFlags = [3]string{"retention-done", "retention-cancelled", "retention-dead"}

func (f *queueFlags) register(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.IntVar(&f.maxRetries, "max-retries", 3, "retries after the first attempt (0..100)")
	fs.StringVar(&f.rateLimit, "rate-limit", "none", "tasks dispatched per second, or none")
	fs.StringVar(&f.rateBurst, "rate-burst", "default", "token bucket size, or default (ceil of --rate-limit)")
	fs.StringVar(&f.maxConcurrency, "max-concurrency", "none", "tasks executing at once, or none")
	fs.DurationVar(&f.backoffBase, "backoff-base", time.Second, "first retry delay (doubles per attempt)")
	fs.DurationVar(&f.backoffMax, "backoff-max", time.Hour, "longest retry delay")
	fs.BoolVar(&f.paused, "paused", false, "dispatch nothing until resumed")
	fs.StringVar(&f.priorityAging, "priority-aging", "none", "waiting time one priority level is worth (e.g. 30s), or none for strict priority")
	fs.StringVar(&f.pushURL, "push-url", "", "make it a push queue: POST each task to this http(s) URL (replaces the target; docs/push.md)")
	fs.DurationVar(&f.pushTimeout, "push-timeout", 30*time.Second, "with --push-url: how long one push request may take")
	fs.StringArrayVar(&f.pushHeaders, "push-header", nil, "with --push-url: a header sent with every push request, name=value (repeatable)")
	fs.StringVar(&f.pushSecret, "push-secret", "", `with --push-url: sign push requests with this secret ("" removes it; left out, the current one stays)`)
	fs.BoolVar(&f.pull, "pull", false, "make it a pull queue again (no push target)")
	for i, status := range []string{"done", "cancelled", "dead"} {
		fs.StringVar(&f.retention[i], retentionFlags[i], "default",
			fmt.Sprintf("how long %s tasks are kept after they finish (e.g. 7d, 36h; at least 1m), or forever", status))
	}
	fs.DurationVar(&f.idemWindow, "idempotency-window", 24*time.Hour,
		"how long an idempotency key stays reserved after its task's creation, even once the task is deleted (0 to 720h)")
	fs.BoolVar(&f.retentionReset, "retention-default", false, "put every retention age back to the server's default (--retention; dead: forever)")
	fs.StringVar(&f.fairness, "fairness", "none", "round_robin: the queue's groups take weighted turns; none: one line by priority")
	fs.StringVar(&f.groupMaxConc, "group-max-concurrency", "none", "each group's tasks executing at once (>= 1), or none")
	fs.StringVar(&f.groupRate, "group-rate-limit", "none", "each group's tasks dispatched per second (> 0), or none")
	fs.StringVar(&f.groupBurst, "group-rate-burst", "default", "each group's token bucket size (>= 1), or default (ceil of --group-rate-limit)")
}

// groupSettings reads the fairness flags given into s. Values a server would refuse
// for their sign or kind are refused here, naming the flag.
func (f *queueFlags) groupSettings(changed func(string) bool, s *client.QueueSettings) error {
	if changed("fairness") {
		switch strings.ToLower(f.fairness) {
		case "round_robin", "round-robin":
			s.Fairness = client.Set("round_robin")
		case "none", "null", "off":
			s.Fairness = client.Null[string]()
		default:
			return usagef("--fairness %q: want round_robin (groups take turns) or none (one line by priority)", f.fairness)
		}
	}
	var err error
	if changed("group-max-concurrency") {
		if s.GroupMaxConcurrency, err = parseLimit("group-max-concurrency", f.groupMaxConc, atLeastOne); err != nil {
			return usagef("--group-max-concurrency %q: want a whole number of at least 1, or none", f.groupMaxConc)
		}
	}
	if changed("group-rate-limit") {
		if s.GroupRateLimit, err = parseLimit("group-rate-limit", f.groupRate, positiveFloat); err != nil {
			return usagef("--group-rate-limit %q: want tasks per second above 0, or none", f.groupRate)
		}
	}
	if changed("group-rate-burst") {
		if s.GroupRateBurst, err = parseLimit("group-rate-burst", f.groupBurst, atLeastOne); err != nil {
			return usagef("--group-rate-burst %q: want a whole number of at least 1, or default", f.groupBurst)
		}
	}
	return nil
}

// atLeastOne parses a whole number of at least 1.
func atLeastOne(raw string) (int, error) {
	n, err := strconv.Atoi(raw)
	if err == nil && n < 1 {
		err = fmt.Errorf("%d is below 1", n)
	}
	return n, err
}

// positiveFloat parses a number above 0.
func positiveFloat(raw string) (float64, error) {
	v, err := parseFloat(raw)
	if err == nil && !(v > 0) {
		err = fmt.Errorf("%v is not above 0", v)
	}
	return v, err
}

// parseAge reads a retention age: a duration that may start with whole days
// ("7d", "1d12h", "90m"), or forever.
func parseAge(flag, raw string) (client.Nullable[time.Duration], error) {
	if strings.EqualFold(raw, "forever") || strings.EqualFold(raw, "none") {
		return client.Null[time.Duration](), nil
	}
	var d time.Duration
	rest := raw
	if days, after, ok := strings.Cut(raw, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n < 0 {
			return client.Nullable[time.Duration]{}, usagef("--%s %q: want an age such as 7d or 36h, or forever", flag, raw)
		}
		d, rest = time.Duration(n)*24*time.Hour, after
	}
	if rest != "" {
		more, err := time.ParseDuration(rest)
		if err != nil {
			return client.Nullable[time.Duration]{}, usagef("--%s %q: want an age such as 7d or 36h, or forever", flag, raw)
		}
		d += more
	}
	return client.Set(d), nil
}

// fmtAge shows a retention age in days when it is whole days; nil is forever.
func fmtAge(ms *int64) string {
	if ms == nil {
		return "forever"
	}
	d := time.Duration(*ms) * time.Millisecond
	if day := 24 * time.Hour; d >= day && d%day == 0 {
		return fmt.Sprintf("%dd", d/day)
	}
	return d.String()
}

// fmtRetention describes a queue's retention, one age per final status.
func fmtRetention(r client.Retention) string {
	return fmt.Sprintf("done %s, cancelled %s, dead %s", fmtAge(r.DoneMs), fmtAge(r.CancelledMs), fmtAge(r.DeadMs))
}

// settings returns the settings whose flags were given.
func (f *queueFlags) settings(cmd *cobra.Command) (client.QueueSettings, error) {
	var s client.QueueSettings
	var err error
	changed := cmd.Flags().Changed
	if changed("max-retries") {
		s.MaxRetries = &f.maxRetries
	}
	if changed("rate-limit") {
		if s.RateLimit, err = parseLimit("rate-limit", f.rateLimit, parseFloat); err != nil {
			return s, err
		}
	}
	if changed("rate-burst") {
		if s.RateBurst, err = parseLimit("rate-burst", f.rateBurst, strconv.Atoi); err != nil {
			return s, err
		}
	}
	if changed("max-concurrency") {
		if s.MaxConcurrency, err = parseLimit("max-concurrency", f.maxConcurrency, strconv.Atoi); err != nil {
			return s, err
		}
	}
	if changed("backoff-base") {
		s.BackoffBase = &f.backoffBase
	}
	if changed("backoff-max") {
		s.BackoffMax = &f.backoffMax
	}
	if changed("paused") {
		s.Paused = &f.paused
	}
	if changed("priority-aging") {
		if s.PriorityAging, err = parseLimit("priority-aging", f.priorityAging, time.ParseDuration); err != nil {
			return s, err
		}
	}
	if changed("idempotency-window") {
		s.IdempotencyWindow = &f.idemWindow
	}
	if err := f.groupSettings(changed, &s); err != nil {
		return s, err
	}
	var ages client.RetentionSettings
	agesSet := false
	for i, age := range []*client.Nullable[time.Duration]{&ages.Done, &ages.Cancelled, &ages.Dead} {
		if !changed(retentionFlags[i]) {
			continue
		}
		if *age, err = parseAge(retentionFlags[i], f.retention[i]); err != nil {
			return s, err
		}
		agesSet = true
	}
	switch {
	case f.retentionReset && agesSet:
		return s, usagef("--retention-default goes with no other --retention-* flag")
	case f.retentionReset:
		s.Retention = client.Null[client.RetentionSettings]()
	case agesSet:
		s.Retention = client.Set(ages)
	}
	pushing := changed("push-url") || changed("push-timeout") || changed("push-header") || changed("push-secret")
	switch {
	case f.pull && pushing:
		return s, usagef("--pull goes with no --push-* flag")
	case f.pull:
		s.Push = client.Null[*client.PushConfig]()
	case pushing && !changed("push-url"):
		return s, usagef("--push-timeout, --push-header and --push-secret need --push-url (a push target is set as a whole)")
	case pushing:
		p := client.PushConfig{URL: f.pushURL, Timeout: f.pushTimeout}
		for _, h := range f.pushHeaders {
			name, value, ok := strings.Cut(h, "=")
			if !ok || name == "" {
				return s, usagef("--push-header %q: want name=value", h)
			}
			if p.Headers == nil {
				p.Headers = map[string]string{}
			}
			p.Headers[name] = value
		}
		if changed("push-secret") {
			if f.pushSecret == "" {
				p.Secret = client.Null[string]()
			} else {
				p.Secret = client.Set(f.pushSecret)
			}
		}
		s.Push = client.Set(&p)
	}
	return s, nil
}

// fmtGroupLimits describes the limits every group of a queue gets by default.
func fmtGroupLimits(q *client.Queue) string {
	if q.GroupMaxConcurrency == nil && q.GroupRateLimit == nil && q.GroupRateBurst == nil {
		return none
	}
	return fmt.Sprintf("max_concurrency %s, rate_limit %s, rate_burst %s",
		fmtPtr(q.GroupMaxConcurrency), fmtPtr(q.GroupRateLimit), fmtPtr(q.GroupRateBurst))
}

// fmtPush describes a queue's push target, or says it is a pull queue.
func fmtPush(p *client.PushTarget) string {
	if p == nil {
		return "none (pull)"
	}
	out := fmt.Sprintf("%s (timeout %s", p.URL, time.Duration(p.TimeoutMs)*time.Millisecond)
	if len(p.Headers) > 0 {
		out += fmt.Sprintf(", %d headers", len(p.Headers))
	}
	if p.SecretSet {
		out += ", signed"
	}
	return out + ")"
}

func printQueue(w io.Writer, output string, q *client.Queue) error {
	if output == "json" {
		return printJSON(w, q)
	}
	return fields(w, [][2]string{
		{"name", q.Name},
		{"paused", strconv.FormatBool(q.Paused)},
		{"max_retries", strconv.Itoa(q.MaxRetries)},
		{"rate_limit", fmtPtr(q.RateLimit)},
		{"rate_burst", fmtPtr(q.RateBurst)},
		{"max_concurrency", fmtPtr(q.MaxConcurrency)},
		{"backoff", fmt.Sprintf("%s .. %s", time.Duration(q.BackoffBaseMs)*time.Millisecond, time.Duration(q.BackoffMaxMs)*time.Millisecond)},
		{"priority_aging", fmtMillis(q.PriorityAgingMs)},
		{"fairness", fmtPtr(q.Fairness)},
		{"group_limits", fmtGroupLimits(q)},
		{"push", fmtPush(q.Push)},
		{"retention", fmtRetention(q.Retention)},
		{"key_window", (time.Duration(q.IdempotencyWindowMs) * time.Millisecond).String()},
		{"created_at", fmtTime(q.CreatedAt)},
		{"updated_at", fmtTime(q.UpdatedAt)},
	})
}

func queueCreateCommand(o *cliOptions) *cobra.Command {
	var f queueFlags
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a queue",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.client()
			if err != nil {
				return err
			}
			s, err := f.settings(cmd)
			if err != nil {
				return err
			}
			q, err := callFor(o, cmd, func(ctx context.Context) (*client.Queue, error) {
				return c.CreateQueue(ctx, args[0], s)
			})
			if err != nil {
				return err
			}
			return printQueue(cmd.OutOrStdout(), o.output, q)
		},
	}
	f.register(cmd)
	return cmd
}

func queueListCommand(o *cliOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List queues",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			qs, err := request(o, cmd, func(ctx context.Context, c *client.Client) ([]client.Queue, error) {
				return c.ListQueues(ctx)
			})
			if err != nil {
				return err
			}
			if o.output == "json" {
				return printJSON(cmd.OutOrStdout(), map[string]any{"queues": qs})
			}
			rows := make([][]string, len(qs))
			for i, q := range qs {
				rows[i] = []string{q.Name, strconv.FormatBool(q.Paused), strconv.Itoa(q.MaxRetries),
					fmtPtr(q.RateLimit), fmtPtr(q.RateBurst), fmtPtr(q.MaxConcurrency),
					fmt.Sprintf("%s..%s", time.Duration(q.BackoffBaseMs)*time.Millisecond, time.Duration(q.BackoffMaxMs)*time.Millisecond)}
			}
			return table(cmd.OutOrStdout(), []string{"NAME", "PAUSED", "MAX_RETRIES", "RATE_LIMIT", "BURST", "MAX_CONCURRENCY", "BACKOFF"}, rows)
		},
	}
}

func queueGetCommand(o *cliOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "get NAME",
		Short: "Show a queue's settings",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			q, err := request(o, cmd, func(ctx context.Context, c *client.Client) (*client.Queue, error) {
				return c.GetQueue(ctx, args[0])
			})
			if err != nil {
				return err
			}
			return printQueue(cmd.OutOrStdout(), o.output, q)
		},
	}
}

func queueUpdateCommand(o *cliOptions) *cobra.Command {
	var f queueFlags
	cmd := &cobra.Command{
		Use:   "update NAME",
		Short: "Change a queue's settings (only the flags given)",
		Long: "Change a queue's settings. Only the flags given change; --rate-limit none and\n" +
			"--max-concurrency none remove a limit; --retention-dead forever keeps dead tasks for good,\n" +
			"--retention-default puts every retention age back to the server's. Changes apply within\n" +
			"a second on every replica.",
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
			if s == (client.QueueSettings{}) {
				return usagef("nothing to change: give at least one setting flag (see --help)")
			}
			q, err := callFor(o, cmd, func(ctx context.Context) (*client.Queue, error) {
				return c.UpdateQueue(ctx, args[0], s)
			})
			if err != nil {
				return err
			}
			return printQueue(cmd.OutOrStdout(), o.output, q)
		},
	}
	f.register(cmd)
	return cmd
}

func queuePauseCommand(o *cliOptions, pause bool) *cobra.Command {
	use, short, verb := "resume NAME", "Let a paused queue dispatch again", "resumed"
	if pause {
		use, short, verb = "pause NAME", "Stop a queue from dispatching (running tasks go on)", "paused"
	}
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.client()
			if err != nil {
				return err
			}
			var q *client.Queue
			if err := o.call(cmd, func(ctx context.Context) (err error) {
				if pause {
					q, err = c.PauseQueue(ctx, args[0])
				} else {
					q, err = c.ResumeQueue(ctx, args[0])
				}
				return err
			}); err != nil {
				return err
			}
			if o.output == "json" {
				return printJSON(cmd.OutOrStdout(), q)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "queue %s %s\n", q.Name, verb)
			return err
		},
	}
}

func queueDeleteCommand(o *cliOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a queue with no unfinished or dead tasks",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.client()
			if err != nil {
				return err
			}
			if err := o.call(cmd, func(ctx context.Context) error { return c.DeleteQueue(ctx, args[0]) }); err != nil {
				return err
			}
			if o.output == "json" {
				return printJSON(cmd.OutOrStdout(), map[string]string{"deleted": args[0]})
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "queue %s deleted\n", args[0])
			return err
		},
	}
}
