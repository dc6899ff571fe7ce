package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/taskforge/taskforge/internal/localpg"
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

	pg       *localpg.Server
	redisPID int
	dir      string
}

// StartServers starts a throwaway PostgreSQL cluster from the local server
// binaries, with ProductionSettings, and a redis-server without persistence,
// both on free ports of 127.0.0.1, and returns once both answer. Stop removes
// them; both also die with the calling process.
func StartServers(ctx context.Context) (_ *Servers, err error) {
	dir, err := os.MkdirTemp("", "taskforge-bench-servers-")
	if err != nil {
		return nil, err
	}
	s := &Servers{dir: dir}
	defer func() {
		if err != nil {
			_ = s.Stop()
		}
	}()
	if s.pg, err = localpg.Start(ctx, localpg.Options{Settings: ProductionSettings}); err != nil {
		return nil, err
	}
	s.DatabaseURL = s.pg.URL("postgres")
	if err := s.startRedis(ctx); err != nil {
		return nil, fmt.Errorf("start redis-server: %w", err)
	}
	return s, nil
}

// startRedis starts redis-server on a free port, picking another when someone
// took it first.
func (s *Servers) startRedis(ctx context.Context) error {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return errors.New("redis-server not found on PATH: install the Debian package `redis-server`")
	}
	logPath := filepath.Join(s.dir, "redis.log")
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err != nil {
			return err
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		err = s.launchRedis(ctx, bin, port, logPath)
		if err == nil {
			s.RedisURL = "redis://" + addr
			return nil
		}
		if ctx.Err() != nil || attempt == 5 {
			return err
		}
	}
}

// launchRedis runs redis-server on port and waits until it answers PING.
func (s *Servers) launchRedis(ctx context.Context, bin string, port int, logPath string) error {
	logFile, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer logFile.Close()
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "",
		"--appendonly", "no", "--dir", s.dir, "--daemonize", "no", "--logfile", "")
	cmd.Dir = s.dir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	s.redisPID = cmd.Process.Pid
	_ = cmd.Process.Release() // reaped with wait4: no goroutine waits on it
	rdb := redis.NewClient(&redis.Options{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		DialTimeout: time.Second, MaxRetries: -1, Protocol: 2, DisableIdentity: true})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	for {
		if localpg.ReapNoHang(s.redisPID) {
			s.redisPID = 0
			b, _ := os.ReadFile(logPath)
			return fmt.Errorf("redis-server exited before answering PING; its log ends:\n%s", lastLines(string(b), 10))
		}
		if rdb.Ping(ctx).Err() == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			s.killRedis()
			return fmt.Errorf("redis-server did not answer PING: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (s *Servers) killRedis() {
	if s.redisPID == 0 {
		return
	}
	_ = syscall.Kill(s.redisPID, syscall.SIGKILL)
	for deadline := time.Now().Add(10 * time.Second); !localpg.ReapNoHang(s.redisPID) && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	s.redisPID = 0
}

// Stop stops both servers and removes everything they kept on disk.
func (s *Servers) Stop() error {
	var err error
	if s.pg != nil {
		err = s.pg.Stop()
	}
	s.killRedis()
	return errors.Join(err, os.RemoveAll(s.dir))
}
