package main

// Client commands: queue, task, dlq, workers, stats. They talk to a server over
// the HTTP API through the client package and follow one exit-code contract
// (docs/sdk.md):
//
//	0 success
//	1 any other failure
//	2 usage error: bad flags or arguments, or a request the server rejected as
//	  invalid (400 invalid_request, 413 payload_too_large)
//	3 not found: queue, task or route
//	4 conflict: queue exists, queue not empty, task not cancellable,
//	  idempotency conflict, lease lost
//	5 server unavailable or unreachable (503, 502, 504, refused, timed out)

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/taskforge/taskforge/client"
)

// Exit codes of the client commands.
const (
	exitFailure     = 1
	exitUsage       = 2
	exitNotFound    = 3
	exitConflict    = 4
	exitUnavailable = 5
)

// usageError marks err as a usage error (exit 2).
func usageError(err error) error { return exitError{exitUsage, err} }

func usagef(format string, args ...any) error { return usageError(fmt.Errorf(format, args...)) }

// withExitCode gives err the exit code its kind calls for.
func withExitCode(err error) error {
	if err == nil {
		return nil
	}
	var already exitError
	if errors.As(err, &already) {
		return err
	}
	return exitError{exitCodeOf(err), err}
}

// exitCodeOf maps an error of the client package to the exit-code contract.
func exitCodeOf(err error) int {
	is := func(targets ...error) bool {
		for _, t := range targets {
			if errors.Is(err, t) {
				return true
			}
		}
		return false
	}
	switch {
	case is(client.ErrUnavailable, context.DeadlineExceeded):
		return exitUnavailable
	case is(client.ErrQueueNotFound, client.ErrTaskNotFound, client.ErrNotFound, client.ErrScheduleNotFound,
		client.ErrWorkflowNotFound, client.ErrGroupNotFound):
		return exitNotFound
	case is(client.ErrQueueExists, client.ErrQueueNotEmpty, client.ErrTaskNotCancellable,
		client.ErrIdempotencyConflict, client.ErrLeaseLost, client.ErrScheduleExists, client.ErrWorkflowNotCancellable):
		return exitConflict
	case is(client.ErrInvalidRequest, client.ErrPayloadTooLarge):
		return exitUsage
	default:
		return exitFailure
	}
}

// defaultServer is $TASKFORGE_URL, else the local default.
func defaultServer() string {
	if v := os.Getenv("TASKFORGE_URL"); v != "" {
		return v
	}
	return client.DefaultURL
}

// cliOptions are the flags every client command shares.
type cliOptions struct {
	server  string
	token   string
	output  string
	timeout time.Duration
}

// register adds the shared flags to a top-level command, for it and its subcommands.
func (o *cliOptions) register(cmd *cobra.Command) {
	fs := cmd.PersistentFlags()
	fs.StringVar(&o.server, "server", defaultServer(), "TaskForge server URL ($TASKFORGE_URL)")
	fs.StringVar(&o.token, "token", os.Getenv("TASKFORGE_TOKEN"), "API token sent to the server ($TASKFORGE_TOKEN)")
	fs.StringVarP(&o.output, "output", "o", "table", "output format: table or json")
	fs.DurationVar(&o.timeout, "request-timeout", 30*time.Second, "time limit of each request to the server")
}

// client validates the shared flags and returns a client for the server.
func (o *cliOptions) client() (*client.Client, error) {
	if o.output != "table" && o.output != "json" {
		return nil, usagef("--output %q: want table or json", o.output)
	}
	c, err := client.New(o.server, client.WithToken(o.token))
	if err != nil {
		return nil, usageError(err)
	}
	return c, nil
}

// request builds the client and runs one request with the request timeout, mapping
// its error to the CLI's exit codes.
func request[T any](o *cliOptions, cmd *cobra.Command, fn func(ctx context.Context, c *client.Client) (T, error)) (T, error) {
	c, err := o.client()
	if err != nil {
		var zero T
		return zero, err
	}
	return callFor(o, cmd, func(ctx context.Context) (T, error) { return fn(ctx, c) })
}

// callFor runs one request with the request timeout and returns its result, its
// error mapped to the CLI's exit codes.
func callFor[T any](o *cliOptions, cmd *cobra.Command, fn func(ctx context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(cmd.Context(), o.timeout)
	defer cancel()
	v, err := fn(ctx)
	return v, withExitCode(err)
}

// call runs one request with the request timeout.
func (o *cliOptions) call(cmd *cobra.Command, fn func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(cmd.Context(), o.timeout)
	defer cancel()
	return withExitCode(fn(ctx))
}

// clientGroup returns a top-level command that only holds subcommands: shared
// flags, usage errors for bad flags and unknown subcommands.
func clientGroup(o *cliOptions, use, short string, subs ...*cobra.Command) *cobra.Command {
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cmd.Help()
		},
	}
	setupClientCommand(o, cmd)
	cmd.AddCommand(subs...)
	return cmd
}

// setupClientCommand gives a top-level client command the shared flags and makes
// its flag errors (and its subcommands') usage errors.
func setupClientCommand(o *cliOptions, cmd *cobra.Command) {
	o.register(cmd)
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError(err) })
}

// usageArgs makes an argument validator's errors usage errors.
func usageArgs(v cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := v(cmd, args); err != nil {
			return usageError(err)
		}
		return nil
	}
}

// printJSON writes v as indented JSON.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// table writes rows under headers, aligned in columns.
func table(w io.Writer, headers []string, rows [][]string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(headers, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

// fields writes "key: value" lines, aligned.
func fields(w io.Writer, kv [][2]string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, p := range kv {
		fmt.Fprintf(tw, "%s:\t%s\n", p[0], p[1])
	}
	return tw.Flush()
}

const none = "-"

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return none
	}
	return t.UTC().Format(time.RFC3339)
}

func fmtTimePtr(t *time.Time) string {
	if t == nil {
		return none
	}
	return fmtTime(*t)
}

func fmtPtr[T any](p *T) string {
	if p == nil {
		return none
	}
	return fmt.Sprint(*p)
}

// fmtResult shows a task's result; JSON null means none.
func fmtResult(raw json.RawMessage) string {
	if string(raw) == "null" {
		return none
	}
	return fmtJSON(raw)
}

func fmtJSON(raw json.RawMessage) string {
	if len(raw) == 0 {
		return none
	}
	return string(raw)
}

// oneLine is the first line of s, cut to n characters, for table cells.
func oneLine(s *string, n int) string {
	if s == nil || *s == "" {
		return none
	}
	line, _, cut := strings.Cut(*s, "\n")
	if r := []rune(line); len(r) > n {
		line, cut = string(r[:n]), true
	}
	if cut {
		line += "…"
	}
	return line
}

// progress reports how far a long operation got on stderr: a line redrawn in
// place on a terminal, one line per step otherwise (logs, CI).
type progress struct {
	w     io.Writer
	tty   bool
	what  string
	total int
	done  int
}

func newProgress(w io.Writer, what string, total int) *progress {
	tty := false
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil {
			tty = st.Mode()&os.ModeCharDevice != 0
		}
	}
	return &progress{w: w, tty: tty, what: what, total: total}
}

// add records n more items done.
func (p *progress) add(n int) {
	p.done += n
	pct := 100
	if p.total > 0 {
		pct = p.done * 100 / p.total
	}
	if p.tty {
		const width = 30
		bar := strings.Repeat("█", pct*width/100) + strings.Repeat("░", width-pct*width/100)
		fmt.Fprintf(p.w, "\r%s %s %d/%d (%d%%)", p.what, bar, p.done, p.total, pct)
		return
	}
	fmt.Fprintf(p.w, "%s %d/%d (%d%%)\n", p.what, p.done, p.total, pct)
}

// finish ends the progress line.
func (p *progress) finish() {
	if p.tty {
		fmt.Fprintln(p.w)
	}
}

// fmtMillis shows optional milliseconds as a duration.
func fmtMillis(ms *int64) string {
	if ms == nil {
		return none
	}
	return (time.Duration(*ms) * time.Millisecond).String()
}

// parseLimit reads an optional limit flag: "none" (or "unlimited") clears it.
func parseLimit[T int | float64 | time.Duration](flag, raw string, parse func(string) (T, error)) (client.Nullable[T], error) {
	switch strings.ToLower(raw) {
	case "none", "unlimited", "null", "default":
		return client.Null[T](), nil
	}
	v, err := parse(raw)
	if err != nil {
		return client.Nullable[T]{}, usagef("--%s %q: want a value or none", flag, raw)
	}
	return client.Set(v), nil
}

func parseFloat(s string) (float64, error) { return strconv.ParseFloat(s, 64) }
