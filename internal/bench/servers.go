package bench

import (
	"context"
	"errors"

	"github.com/taskforge/taskforge/internal/localpg"
	"github.com/taskforge/taskforge/internal/localredis"
)

// ProductionSettings are the PostgreSQL settings of the cluster StartServers
// starts: what a production server runs with (autovacuum and fsync on, so that
// plans follow the tables as they fill and every commit reaches the disk),
// sized for a benchmark's hundreds of connections and its bursts of writes.
var ProductionSettings = map[string]string{
	"autovacuum":         "on",
	"fsync":              "on",
	"full_page_writes":   "on",
	"synchronous_commit": "on",
	"shared_buffers":     "512MB",
	"max_wal_size":       "4GB",
	"max_connections":    "500",
}

// reportedSettings are the PostgreSQL settings every report records
// (Machine.PostgresSettings), whichever server it ran on.
var reportedSettings = []string{
	"autovacuum", "fsync", "full_page_writes", "synchronous_commit", "shared_buffers",
	"max_wal_size", "wal_buffers", "checkpoint_timeout", "max_connections", "work_mem",
}

// Servers are a throwaway PostgreSQL cluster (ProductionSettings) and a
// throwaway Redis that StartServers started for one benchmark run.
type Servers struct {
	// DatabaseURL names the cluster's postgres database as its superuser.
	DatabaseURL string
	// RedisURL names the Redis server.
	RedisURL string

	pg    *localpg.Server
	redis *localredis.Server
}

// StartServers starts a throwaway PostgreSQL cluster from the local server
// binaries, with ProductionSettings, and a redis-server without persistence,
// both on free ports of 127.0.0.1, and returns once both answer. Stop removes
// them; both also die with the calling process.
func StartServers(ctx context.Context) (_ *Servers, err error) {
	s := &Servers{}
	defer func() {
		if err != nil {
			_ = s.Stop()
		}
	}()
	if s.pg, err = localpg.Start(ctx, localpg.Options{Settings: ProductionSettings}); err != nil {
		return nil, err
	}
	s.DatabaseURL = s.pg.URL("postgres")
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	if s.redis, err = localredis.Start(ctx); err != nil {
		return nil, err
	}
	s.RedisURL = s.redis.URL()
	return s, nil
}

// Stop stops both servers and removes everything they kept on disk.
func (s *Servers) Stop() error {
	var errs []error
	if s.pg != nil {
		errs = append(errs, s.pg.Stop())
	}
	if s.redis != nil {
		errs = append(errs, s.redis.Stop())
	}
	return errors.Join(errs...)
}
