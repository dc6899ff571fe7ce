package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/taskforge/taskforge/auth"
	"github.com/taskforge/taskforge/client"
	"github.com/taskforge/taskforge/migrations"
	"github.com/taskforge/taskforge/storage"
)

// tokenOptions are the token commands' flags: the shared client flags plus the
// database URL of direct mode.
type tokenOptions struct {
	cliOptions
	databaseURL string
}

// direct reports whether the command talks to PostgreSQL instead of the server:
// --database-url was given, or $DATABASE_URL is set and no token was given.
func (o *tokenOptions) direct(cmd *cobra.Command) bool {
	if cmd.Flags().Changed("database-url") {
		return o.databaseURL != ""
	}
	return o.databaseURL != "" && o.token == ""
}

// store opens the database of direct mode, applying pending migrations (the
// bootstrap may run before the first `serve`).
func (o *tokenOptions) store(cmd *cobra.Command) (*storage.Store, func(), error) {
	pool, err := storage.Connect(cmd.Context(), o.databaseURL, 2)
	if err != nil {
		return nil, nil, err
	}
	if _, err := migrations.Apply(cmd.Context(), pool); err != nil {
		pool.Close()
		return nil, nil, err
	}
	return storage.New(pool), pool.Close, nil
}

// tokenCommand is `taskforge token create|list|revoke`.
func tokenCommand() *cobra.Command {
	o := &tokenOptions{}
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Create, list and revoke API tokens",
		Long: `Create, list and revoke API tokens (roles: producer, worker, admin).

The commands talk to the server (POST/GET/DELETE /tokens) with an admin token
(--token or $TASKFORGE_TOKEN). To create the first token, or to recover when every
admin token is lost, they talk to PostgreSQL directly instead: pass --database-url,
or set $DATABASE_URL without a token. Direct mode applies pending migrations first,
and may revoke any token, the last admin one included.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	setupClientCommand(&o.cliOptions, cmd)
	cmd.PersistentFlags().StringVar(&o.databaseURL, "database-url", envOr("DATABASE_URL", ""),
		"talk to PostgreSQL directly instead of the server (bootstrap) ($DATABASE_URL, used when no token is given)")
	cmd.AddCommand(tokenCreateCommand(o), tokenListCommand(o), tokenRevokeCommand(o))
	return cmd
}

func tokenCreateCommand(o *tokenOptions) *cobra.Command {
	var (
		role, name string
		queues     []string
		expires    time.Duration
		rate       float64
	)
	cmd := &cobra.Command{
		Use:   "create --role ROLE",
		Short: "Create a token and print it (it is shown only once)",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.output != "table" && o.output != "json" {
				return usagef("--output %q: want table or json", o.output)
			}
			spec := auth.Spec{Name: name, Role: auth.Role(role), Queues: queues, TTL: expires}
			if len(queues) == 0 {
				spec.Queues = nil
			}
			if rate != 0 {
				spec.RateLimit = &rate
			}
			if err := spec.Validate(); err != nil {
				return usageError(err)
			}
			var created client.CreatedToken
			if o.direct(cmd) {
				st, closeFn, err := o.store(cmd)
				if err != nil {
					return err
				}
				defer closeFn()
				secret, t, err := auth.Create(cmd.Context(), st, spec)
				if err != nil {
					return err
				}
				created = client.CreatedToken{Token: fromStored(t), Secret: secret}
			} else {
				c, err := o.client()
				if err != nil {
					return err
				}
				if err := o.call(cmd, func(ctx context.Context) error {
					out, err := c.CreateToken(ctx, client.TokenSpec{Name: name, Role: role, Queues: spec.Queues,
						ExpiresIn: expires, RateLimit: spec.RateLimit})
					if out != nil {
						created = *out
					}
					return err
				}); err != nil {
					return err
				}
			}
			if o.output == "json" {
				return printJSON(cmd.OutOrStdout(), created)
			}
			fmt.Fprintln(cmd.ErrOrStderr(), "Store this token now: it is not shown again.")
			fmt.Fprintln(cmd.OutOrStdout(), created.Secret)
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&role, "role", "", "producer, worker or admin (required)")
	fs.StringSliceVar(&queues, "queues", nil, "restrict a producer or worker token to these queues (comma-separated)")
	fs.DurationVar(&expires, "expires", 0, "lifetime, e.g. 720h (default: never expires)")
	fs.StringVar(&name, "name", "", "a label shown by token list")
	fs.Float64Var(&rate, "rate-limit", 0, "requests per second this token may make per replica (default: the server's)")
	return cmd
}

// fromStored converts a stored token into the client's view of it.
func fromStored(t storage.Token) client.Token {
	b, _ := json.Marshal(t)
	var out client.Token
	_ = json.Unmarshal(b, &out)
	return out
}

func tokenListCommand(o *tokenOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List tokens (never their secrets), revoked ones included",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.output != "table" && o.output != "json" {
				return usagef("--output %q: want table or json", o.output)
			}
			var ts []client.Token
			if o.direct(cmd) {
				st, closeFn, err := o.store(cmd)
				if err != nil {
					return err
				}
				defer closeFn()
				stored, err := st.ListTokens(cmd.Context())
				if err != nil {
					return err
				}
				for _, t := range stored {
					ts = append(ts, fromStored(t))
				}
			} else {
				c, err := o.client()
				if err != nil {
					return err
				}
				if err := o.call(cmd, func(ctx context.Context) (err error) {
					ts, err = c.ListTokens(ctx)
					return err
				}); err != nil {
					return err
				}
			}
			if o.output == "json" {
				if ts == nil {
					ts = []client.Token{}
				}
				return printJSON(cmd.OutOrStdout(), map[string]any{"tokens": ts})
			}
			rows := make([][]string, len(ts))
			for i, t := range ts {
				qs := "*"
				if t.Queues != nil {
					qs = strings.Join(t.Queues, ",")
				}
				state := "active"
				switch {
				case t.RevokedAt != nil:
					state = "revoked"
				case t.ExpiresAt != nil && !time.Now().Before(*t.ExpiresAt):
					state = "expired"
				}
				rows[i] = []string{t.ID, fmtOr(t.Name), t.Role, qs, state, fmtTime(t.CreatedAt), fmtTimePtr(t.ExpiresAt), fmtPtr(t.RateLimit)}
			}
			return table(cmd.OutOrStdout(), []string{"ID", "NAME", "ROLE", "QUEUES", "STATE", "CREATED", "EXPIRES", "RATE_LIMIT"}, rows)
		},
	}
}

func fmtOr(s string) string {
	if s == "" {
		return none
	}
	return s
}

func tokenRevokeCommand(o *tokenOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "revoke ID",
		Short: "Revoke a token: every replica refuses it within about a second",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.direct(cmd) {
				id, err := uuid.Parse(args[0])
				if err != nil {
					return usagef("token id %q: want a UUID (see token list)", args[0])
				}
				st, closeFn, err := o.store(cmd)
				if err != nil {
					return err
				}
				defer closeFn()
				if _, err := st.RevokeToken(cmd.Context(), id, false); errors.Is(err, storage.ErrTokenNotFound) {
					return exitError{exitNotFound, err}
				} else if err != nil {
					return err
				}
			} else {
				c, err := o.client()
				if err != nil {
					return err
				}
				if err := o.call(cmd, func(ctx context.Context) error { return c.RevokeToken(ctx, args[0]) }); err != nil {
					return err
				}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "revoked %s\n", args[0])
			return nil
		},
	}
}
