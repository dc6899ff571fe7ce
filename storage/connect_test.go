package storage_test

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskforge/taskforge/storage"
)

// TestBehindTransactionPooler: a pooled URL drops named prepared statements unless
// the URL chooses its own mode; a direct URL keeps pgx's statement cache.
func TestBehindTransactionPooler(t *testing.T) {
	for _, tc := range []struct {
		url    string
		pooled bool
		want   pgx.QueryExecMode
	}{
		{"postgres://db:5432/tf", false, pgx.QueryExecModeCacheStatement},
		{"postgres://bouncer:6432/tf", true, storage.PooledExecMode},
		{"postgres://bouncer:6432/tf?default_query_exec_mode=exec", true, pgx.QueryExecModeExec},
		{"host=bouncer port=6432 dbname=tf default_query_exec_mode=cache_statement", true, pgx.QueryExecModeCacheStatement},
	} {
		cfg, err := pgxpool.ParseConfig(tc.url)
		if err != nil {
			t.Fatal(err)
		}
		if tc.pooled {
			storage.BehindTransactionPooler(tc.url)(cfg)
		}
		if got := cfg.ConnConfig.DefaultQueryExecMode; got != tc.want {
			t.Errorf("%s (pooled %v): mode %v, want %v", tc.url, tc.pooled, got, tc.want)
		}
	}
}
