package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"github.com/taskforge/taskforge/server"
)

// registerAuth adds the authentication and abuse-limit flags of serve.
func (f *serverFlags) registerAuth(fs *pflag.FlagSet) {
	c := &f.cfg.Auth
	insecure, _ := strconv.ParseBool(envOr("TASKFORGE_INSECURE", "false"))
	fs.BoolVar(&f.insecure, "insecure", insecure,
		"serve without authentication on a non-loopback address while no API token exists ($TASKFORGE_INSECURE)")
	rate, err := strconv.ParseFloat(envOr("TASKFORGE_TOKEN_RATE_LIMIT", "500"), 64)
	if err != nil {
		f.envErrs = append(f.envErrs, fmt.Errorf("$TASKFORGE_TOKEN_RATE_LIMIT: %w", err))
	}
	fs.Float64Var(&c.RateLimit, "token-rate-limit", rate,
		"requests per second each API token may make on each replica, unless the token sets its own; negative = unlimited ($TASKFORGE_TOKEN_RATE_LIMIT)")
	polls, err := strconv.Atoi(envOr("TASKFORGE_MAX_POLLS_PER_WORKER", "4"))
	if err != nil {
		f.envErrs = append(f.envErrs, fmt.Errorf("$TASKFORGE_MAX_POLLS_PER_WORKER: %w", err))
	}
	fs.IntVar(&c.MaxPollsPerWorker, "max-polls-per-worker", polls,
		"concurrent long polls one worker id may hold on each replica; negative = unbounded ($TASKFORGE_MAX_POLLS_PER_WORKER)")
}

// errExposed refuses to serve an open API to the network.
var errExposed = errors.New("no API token exists, so the API would be open to anyone who can reach it")

// checkExposure refuses to listen on a non-loopback address while authentication is
// off (no token exists), unless insecure.
func checkExposure(ctx context.Context, srv *server.Server, listen string, insecure bool, log *slog.Logger) error {
	on, err := srv.Auth.Enabled(ctx)
	if err != nil {
		return fmt.Errorf("check API tokens: %w", err)
	}
	switch {
	case on:
		return nil
	case loopback(listen):
		log.Warn("no API token exists: the API is open (listening on loopback only)")
		return nil
	case insecure:
		log.Warn("no API token exists and --insecure is set: the API is open to the network", "listen", listen)
		return nil
	}
	return fmt.Errorf("%w on %s.\n  Create an admin token first:  taskforge token create --role admin --database-url \"$DATABASE_URL\"\n"+
		"  or listen on loopback (--listen 127.0.0.1:8080), or pass --insecure to serve openly anyway", errExposed, listen)
}

// loopback reports whether listen ("host:port") binds loopback interfaces only.
func loopback(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil || host == "" {
		return false // ":8080" binds every interface
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
