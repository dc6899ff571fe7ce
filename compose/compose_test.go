// Package compose_test checks the docker compose deployment in this directory
// without a Docker engine: it loads docker-compose.yml with the Compose
// specification's reference loader and checks the services, their health checks
// and dependencies, their environment, the load balancer's configuration, the
// Dockerfile they build, and runs redis-server with the compose file's command.
package compose_test

import (
	"bufio"
	"context"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/redis/go-redis/v9"

	"github.com/taskforge/taskforge/internal/testenv"
	"github.com/taskforge/taskforge/internal/testserver"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// load loads docker-compose.yml as `docker compose` would, with only env as the
// environment (nil: every variable takes its default).
func load(t *testing.T, env []string) *types.Project {
	t.Helper()
	return loadFiles(t, env, "docker-compose.yml")
}

// loadFiles loads compose files as `docker compose -f ... -f ...` would, each later
// file overriding the ones before it.
func loadFiles(t *testing.T, env []string, files ...string) *types.Project {
	t.Helper()
	opts, err := cli.NewProjectOptions(files,
		cli.WithWorkingDirectory("."), cli.WithEnv(env), cli.WithInterpolation(true),
		cli.WithResolvedPaths(true))
	if err != nil {
		t.Fatal(err)
	}
	p, err := opts.LoadProject(context.Background())
	if err != nil {
		t.Fatalf("load %v: %v", files, err)
	}
	return p
}

func service(t *testing.T, p *types.Project, name string) types.ServiceConfig {
	t.Helper()
	s, err := p.GetService(name)
	if err != nil {
		t.Fatalf("service %s: %v", name, err)
	}
	return s
}

func env(s types.ServiceConfig, key string) string {
	if v := s.Environment[key]; v != nil {
		return *v
	}
	return ""
}

func TestServicesAndHealthConditions(t *testing.T) {
	t.Parallel()
	p := load(t, nil)
	if p.Name != "taskforge" {
		t.Errorf("project name %q, want taskforge", p.Name)
	}
	names := p.ServiceNames()
	required := []string{"lb", "postgres", "redis", "taskforge-1", "taskforge-2", "worker"}
	for _, want := range required {
		if !slices.Contains(names, want) {
			t.Fatalf("no service %s among %v", want, names)
		}
		if s := service(t, p, want); s.Restart != types.RestartPolicyUnlessStopped {
			t.Errorf("%s restart policy %q, want %s", want, s.Restart, types.RestartPolicyUnlessStopped)
		}
	}

	// Every dependency waits for a health check that exists.
	wantDeps := map[string][]string{
		"taskforge-1": {"postgres", "redis"},
		"taskforge-2": {"postgres", "redis"},
		"lb":          {"taskforge-1", "taskforge-2"},
		"worker":      {"lb"},
	}
	for _, name := range names {
		s := service(t, p, name)
		var deps []string
		for dep, d := range s.DependsOn {
			deps = append(deps, dep)
			if d.Condition != types.ServiceConditionHealthy {
				t.Errorf("%s depends on %s with condition %q, want %s", name, dep, d.Condition, types.ServiceConditionHealthy)
			}
			hc := service(t, p, dep).HealthCheck
			if hc == nil || hc.Disable || len(hc.Test) < 2 {
				t.Errorf("%s waits for %s to be healthy, but %s has no health check", name, dep, dep)
			}
		}
		slices.Sort(deps)
		if want, known := wantDeps[name]; known && !slices.Equal(deps, want) {
			t.Errorf("%s depends on %v, want %v", name, deps, wantDeps[name])
		}
	}

	checks := map[string]string{
		"postgres":    "pg_isready -h 127.0.0.1",
		"redis":       "redis-cli ping",
		"taskforge-1": "/usr/local/bin/taskforge-healthcheck",
		"taskforge-2": "/usr/local/bin/taskforge-healthcheck",
		"lb":          "http://127.0.0.1:8080/healthz",
	}
	for name, want := range checks {
		hc := service(t, p, name).HealthCheck
		if got := strings.Join(hc.Test, " "); !strings.Contains(got, want) {
			t.Errorf("%s health check %q does not run %q", name, got, want)
		}
	}
	if hc := service(t, p, "worker").HealthCheck; hc == nil || !hc.Disable {
		t.Error("worker must disable the image's HTTP health check: it serves no HTTP")
	}

	// State lives in named volumes.
	for name, target := range map[string]string{"postgres": "/var/lib/postgresql/data", "redis": "/data"} {
		s := service(t, p, name)
		ok := false
		for _, v := range s.Volumes {
			if v.Type == types.VolumeTypeVolume && v.Target == target && p.Volumes[v.Source].Name != "" {
				ok = true
			}
		}
		if !ok {
			t.Errorf("%s keeps no named volume at %s: %+v", name, target, s.Volumes)
		}
	}
}

func TestReplicasShareBackendsAndDrainWithinTheirStopGrace(t *testing.T) {
	t.Parallel()
	p := load(t, nil)
	a, b := service(t, p, "taskforge-1"), service(t, p, "taskforge-2")
	pg := service(t, p, "postgres")
	for _, key := range []string{"DATABASE_URL", "REDIS_URL", "TASKFORGE_LISTEN", "TASKFORGE_LEASE_TIMEOUT"} {
		if env(a, key) == "" || env(a, key) != env(b, key) {
			t.Errorf("%s differs between the replicas or is empty: %q vs %q", key, env(a, key), env(b, key))
		}
	}
	for _, s := range []types.ServiceConfig{a, b} {
		// serve listens beyond loopback here; on a fresh database (no API token yet) it
		// refuses to start unless TASKFORGE_INSECURE allows it.
		if v, err := strconv.ParseBool(env(s, "TASKFORGE_INSECURE")); err != nil || !v {
			t.Errorf("%s: TASKFORGE_INSECURE=%q; a first start on a fresh database would exit", s.Name, env(s, "TASKFORGE_INSECURE"))
		}
		if !slices.Equal(s.Command, []string{"serve"}) {
			t.Errorf("%s command %v, want [serve]", s.Name, s.Command)
		}
		if s.Build == nil || s.Image == "" {
			t.Errorf("%s must build the image it runs", s.Name)
		} else if df := filepath.Join(s.Build.Context, s.Build.Dockerfile); !fileExists(df) {
			t.Errorf("%s builds from %s, which does not exist", s.Name, df)
		}
		// serve stops within 25 s of SIGTERM (three phases of 10, 10 and 5 s); compose
		// must not SIGKILL it sooner.
		if s.StopGracePeriod == nil || time.Duration(*s.StopGracePeriod) < 26*time.Second {
			t.Errorf("%s stop_grace_period %v, want at least 26s", s.Name, s.StopGracePeriod)
		}
	}

	// DATABASE_URL points at the postgres service with its role, password and database.
	db, err := url.Parse(env(a, "DATABASE_URL"))
	if err != nil {
		t.Fatal(err)
	}
	pass, _ := db.User.Password()
	if db.Hostname() != "postgres" || db.Port() != "5432" || db.User.Username() != env(pg, "POSTGRES_USER") ||
		pass != env(pg, "POSTGRES_PASSWORD") || strings.TrimPrefix(db.Path, "/") != env(pg, "POSTGRES_DB") {
		t.Errorf("DATABASE_URL %s does not match the postgres service's %v", db.Redacted(), pg.Environment)
	}
	if r, err := url.Parse(env(a, "REDIS_URL")); err != nil || r.Scheme != "redis" || r.Hostname() != "redis" {
		t.Errorf("REDIS_URL %q does not point at the redis service", env(a, "REDIS_URL"))
	}
	if _, err := redis.ParseURL(env(a, "REDIS_URL")); err != nil {
		t.Errorf("REDIS_URL does not parse as serve parses it: %v", err)
	}

	// Settings flow from the environment (.env) into both replicas and postgres.
	custom := load(t, []string{"POSTGRES_PASSWORD=s3cret", "TASKFORGE_LEASE_TIMEOUT=45s"})
	for _, name := range []string{"taskforge-1", "taskforge-2"} {
		s := service(t, custom, name)
		if !strings.Contains(env(s, "DATABASE_URL"), ":s3cret@postgres:") || env(s, "TASKFORGE_LEASE_TIMEOUT") != "45s" {
			t.Errorf("%s ignores the environment: %v", name, s.Environment)
		}
	}
	if got := env(service(t, custom, "postgres"), "POSTGRES_PASSWORD"); got != "s3cret" {
		t.Errorf("postgres password %q, want the one from the environment", got)
	}
}

func TestLoadBalancerSpreadsOverBothReplicas(t *testing.T) {
	t.Parallel()
	p := load(t, nil)
	lb := service(t, p, "lb")
	if len(lb.Ports) != 1 || lb.Ports[0].Target != 8080 || lb.Ports[0].Published != "8080" || lb.Ports[0].HostIP != "127.0.0.1" {
		t.Errorf("lb publishes %+v, want 127.0.0.1:8080 -> 8080 by default", lb.Ports)
	}
	cfgPath := ""
	for _, v := range lb.Volumes {
		if v.Target == "/usr/local/etc/haproxy/haproxy.cfg" && v.ReadOnly {
			cfgPath = v.Source
		}
	}
	if cfgPath == "" {
		t.Fatalf("lb mounts no haproxy.cfg read-only: %+v", lb.Volumes)
	}
	cfg, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	text := string(cfg)
	servers := regexp.MustCompile(`(?m)^\s*server\s+\S+\s+([\w.-]+):(\d+)`).FindAllStringSubmatch(text, -1)
	var targets []string
	for _, s := range servers {
		targets = append(targets, s[1]+":"+s[2])
	}
	if want := []string{"taskforge-1:8080", "taskforge-2:8080"}; !slices.Equal(targets, want) {
		t.Errorf("haproxy.cfg balances over %v, want %v", targets, want)
	}
	for _, want := range []string{"bind :8080", "option httpchk GET /healthz", "timeout server 65s", "timeout client 65s"} {
		if !strings.Contains(text, want) {
			t.Errorf("haproxy.cfg lacks %q", want)
		}
	}

	w := service(t, p, "worker")
	if want := []string{"worker", "--server", "http://lb:8080", "--queue", "demo=sleep"}; !slices.Equal(w.Command, want) {
		t.Errorf("worker command %v, want %v", w.Command, want)
	}
	if _, ok := w.Environment["TASKFORGE_TOKEN"]; !ok {
		t.Error("the worker takes no TASKFORGE_TOKEN: it could not poll once authentication is on")
	}
	if w.Image != service(t, p, "taskforge-1").Image {
		t.Errorf("worker runs image %q, not the replicas' %q", w.Image, service(t, p, "taskforge-1").Image)
	}
}

// TestRedisCommandSetsNoeviction runs redis-server with the compose file's own
// command line (on a free port and a temporary directory) and asks it for the
// settings that TaskForge depends on.
func TestRedisCommandSetsNoeviction(t *testing.T) {
	t.Parallel()
	cmdline := service(t, load(t, nil), "redis").Command
	if len(cmdline) == 0 || cmdline[0] != "redis-server" {
		t.Fatalf("redis command %v does not start redis-server", cmdline)
	}
	if i := slices.Index(cmdline, "--maxmemory-policy"); i < 0 || i+1 >= len(cmdline) || cmdline[i+1] != "noeviction" {
		t.Fatalf("redis command %v does not set --maxmemory-policy noeviction", cmdline)
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal("redis-server is not installed (the test suite needs it): ", err)
	}
	port := testenv.FreePort(t)
	dir := t.TempDir()
	args := append(slices.Clone(cmdline[1:]), "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
		"--daemonize", "no", "--save", "")
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	log, err := os.Create(filepath.Join(dir, "redis.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })

	rdb := redis.NewClient(&redis.Options{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), MaxRetries: -1})
	defer rdb.Close()
	ctx := context.Background()
	testserver.Eventually(t, 10*time.Second, "redis-server with the compose command up", func() bool {
		select {
		case <-exited:
			b, _ := os.ReadFile(log.Name())
			t.Fatalf("redis-server %v exited:\n%s", args, b)
		default:
		}
		return rdb.Ping(ctx).Err() == nil
	})
	want := map[string]string{"maxmemory-policy": "noeviction", "appendonly": "yes", "maxmemory": strconv.Itoa(256 << 20)}
	for key, value := range want {
		got, err := rdb.ConfigGet(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got[key] != value {
			t.Errorf("redis %s = %q, want %q", key, got[key], value)
		}
	}
}

// TestEnvExampleMatchesTheComposeFile: every setting in .env.example is one the
// compose file reads, and its value is the default, so the example documents the
// deployment exactly; loading with it changes nothing.
func TestEnvExampleMatchesTheComposeFile(t *testing.T) {
	t.Parallel()
	compose, err := os.ReadFile("docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(".env.example")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var vars []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		key, value, ok := strings.Cut(line, "=")
		if !ok {
			t.Errorf(".env.example: %q is not KEY=VALUE", line)
			continue
		}
		if !strings.Contains(string(compose), "${"+key+":-"+value+"}") {
			t.Errorf(".env.example sets %s=%s, but docker-compose.yml has no ${%s:-%s}", key, value, key, value)
		}
		vars = append(vars, line)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(vars) < 5 {
		t.Fatalf(".env.example holds only %d settings", len(vars))
	}
	// Every variable the compose file reads is in the example.
	for _, m := range regexp.MustCompile(`\$\{(\w+):-`).FindAllStringSubmatch(string(compose), -1) {
		if !slices.ContainsFunc(vars, func(v string) bool { return strings.HasPrefix(v, m[1]+"=") }) {
			t.Errorf("docker-compose.yml reads %s, which .env.example does not list", m[1])
		}
	}
	withDefaults, withExample := load(t, nil), load(t, vars)
	for _, name := range withDefaults.ServiceNames() {
		a, b := service(t, withDefaults, name), service(t, withExample, name)
		if !slices.Equal(a.Command, b.Command) || !mapsEqual(a.Environment, b.Environment) {
			t.Errorf("service %s differs between the defaults and .env.example", name)
		}
	}
}

func mapsEqual(a, b types.MappingWithEquals) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		w, ok := b[k]
		if !ok || (v == nil) != (w == nil) || (v != nil && *v != *w) {
			return false
		}
	}
	return true
}

// TestDockerfile checks what cannot be built here (no Docker engine): a static
// build, a non-root user, the health probe, and the entrypoint and command.
func TestDockerfile(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	for _, want := range []string{
		"ENV CGO_ENABLED=0",
		"FROM scratch",
		"./cmd/taskforge",
		"./compose/healthcheck",
		`CMD ["/usr/local/bin/taskforge-healthcheck"]`,
		`ENTRYPOINT ["taskforge"]`,
		`CMD ["serve"]`,
		"EXPOSE 8080",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
	// A `# syntax=` line would make every build fetch a frontend image from a registry.
	if regexp.MustCompile(`(?mi)^#\s*syntax\s*=`).MatchString(text) {
		t.Error("the Dockerfile names a frontend image (# syntax=): builds would need a registry")
	}
	if !regexp.MustCompile(`(?m)^ARG BUILD_IMAGE=golang:\S+\n+FROM \$\{BUILD_IMAGE\} AS build$`).MatchString(text) {
		t.Error("the build stage must come from ARG BUILD_IMAGE (default golang:…), so a local Go image can stand in")
	}
	users := regexp.MustCompile(`(?m)^USER\s+(\S+)`).FindAllStringSubmatch(text, -1)
	if len(users) == 0 || strings.HasPrefix(users[len(users)-1][1], "0") || strings.HasPrefix(users[len(users)-1][1], "root") {
		t.Errorf("the image must run as a non-root user, USER lines: %v", users)
	}
	if !fileExists("healthcheck/main.go") || !fileExists("../cmd/taskforge/main.go") {
		t.Error("the Dockerfile builds packages that do not exist")
	}
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
