package localpg

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// CreateDatabase creates database name on the server of admin (a URL or a
// keyword/value connection string), retrying while the template is busy (someone
// is connected to template1). name must be a plain identifier.
func CreateDatabase(ctx context.Context, admin, name string) error {
	for {
		err := AdminExec(ctx, admin, "CREATE DATABASE "+name)
		var pgErr *pgconn.PgError
		if err == nil || !errors.As(err, &pgErr) || pgErr.Code != "55006" { // object_in_use
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// DropDatabase drops database name, disconnecting its sessions.
func DropDatabase(ctx context.Context, admin, name string) error {
	return AdminExec(ctx, admin, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
}

// AdminExec runs one statement on a connection of its own.
func AdminExec(ctx context.Context, admin, sql string) error {
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql)
	return err
}

// WithDatabase returns admin with its database replaced by name. admin is a URL, or
// a keyword/value connection string.
func WithDatabase(admin, name string) string {
	if !strings.Contains(admin, "://") {
		return admin + " dbname=" + name
	}
	u, err := url.Parse(admin)
	if err != nil {
		return admin + " dbname=" + name // let the driver report it
	}
	u.Path, u.RawPath = "/"+name, ""
	return u.String()
}
