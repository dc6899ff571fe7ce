package compose_test

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/types"

	"github.com/taskforge/taskforge/client/wire"
	"github.com/taskforge/taskforge/internal/testserver"
)

// The loopback ports of docker-compose.test.yml.
const (
	testPostgresPort = 15432
	testRedisPort    = 16379
	testLBPort       = 18080
)

var testReplicaPorts = map[string]int{"taskforge-1": 18081, "taskforge-2": 18082}

// loadTestStack loads the deployment as test/stack.sh runs it: docker-compose.yml
// with the loopback override docker-compose.test.yml.
func loadTestStack(t *testing.T) *types.Project {
	t.Helper()
	return loadFiles(t, nil, "docker-compose.yml", "docker-compose.test.yml")
}

// isLoopback reports whether host is an address in 127.0.0.0/8.
func isLoopback(host string) bool {
	ip := net.ParseIP(host)
	return ip != nil && ip.To4() != nil && ip.IsLoopback()
}

// loopbackPort checks that hostport is a 127.0.0.0/8 address and returns its port.
func loopbackPort(t *testing.T, what, hostport string) int {
	t.Helper()
	host, port, err := net.SplitHostPort(hostport)
	n, perr := strconv.Atoi(port)
	if err != nil || perr != nil || !isLoopback(host) {
		t.Errorf("%s: %q is not a loopback address with a port", what, hostport)
		return 0
	}
	return n
}

// TestOverrideKeepsTheStackOnLoopback checks, without a Docker engine, that the test
// override runs the deployment's own services on host networking with every listener
// and every address on 127.0.0.0/8, on ports of its own, and changes nothing else.
func TestOverrideKeepsTheStackOnLoopback(t *testing.T) {
	t.Parallel()
	p, base := loadTestStack(t), load(t, nil)
	if want := []string{"lb", "postgres", "redis", "taskforge-1", "taskforge-2", "worker"}; !slices.Equal(p.ServiceNames(), want) {
		t.Fatalf("the test stack starts %v, want %v (prometheus and grafana only with their profile)", p.ServiceNames(), want)
	}
	ports := map[int]string{}
	use := func(port int, who string) {
		if other, dup := ports[port]; dup {
			t.Errorf("%s and %s both use port %d", who, other, port)
		}
		if port == 5432 || port == 6379 || port == 8080 {
			t.Errorf("%s uses port %d, which the host's own services use", who, port)
		}
		ports[port] = who
	}
	for _, name := range p.ServiceNames() {
		s, b := service(t, p, name), service(t, base, name)
		if s.NetworkMode != "host" || len(s.Networks) != 0 || len(s.Ports) != 0 {
			t.Errorf("%s: network_mode %q, networks %v, ports %v; want host networking and nothing published",
				name, s.NetworkMode, s.Networks, s.Ports)
		}
		// The deployment's own images, volumes, dependencies and lifecycle.
		sd, bd := s.GetDependencies(), b.GetDependencies()
		slices.Sort(sd)
		slices.Sort(bd)
		if s.Image != b.Image || s.Restart != b.Restart || !slices.Equal(sd, bd) ||
			fmt.Sprint(s.StopGracePeriod) != fmt.Sprint(b.StopGracePeriod) {
			t.Errorf("%s: image %s, restart %s, depends on %v, stop grace %v; the deployment has %s, %s, %v, %v",
				name, s.Image, s.Restart, sd, s.StopGracePeriod, b.Image, b.Restart, bd, b.StopGracePeriod)
		}
		if name != "lb" && fmt.Sprint(s.Volumes) != fmt.Sprint(b.Volumes) {
			t.Errorf("%s: volumes %v, want the deployment's %v", name, s.Volumes, b.Volumes)
		}
	}

	pg := service(t, p, "postgres")
	if env(pg, "PGPORT") != strconv.Itoa(testPostgresPort) || !slices.Contains(pg.Command, "listen_addresses=127.0.0.1") {
		t.Errorf("postgres: PGPORT %q, command %v; want %d on 127.0.0.1 only", env(pg, "PGPORT"), pg.Command, testPostgresPort)
	}
	if env(pg, "POSTGRES_INITDB_ARGS") != "--auth-host=scram-sha-256" {
		t.Errorf("postgres: POSTGRES_INITDB_ARGS %q; over loopback the replicas' password would go unchecked", env(pg, "POSTGRES_INITDB_ARGS"))
	}
	use(testPostgresPort, "postgres")
	// pg_isready takes PGPORT from the container's environment.
	if got, want := strings.Join(pg.HealthCheck.Test, " "), strings.Join(service(t, base, "postgres").HealthCheck.Test, " "); got != want {
		t.Errorf("postgres health check %q, want the deployment's %q", got, want)
	}

	rd, baseRedis := service(t, p, "redis"), service(t, base, "redis")
	flag := func(cmd []string, name string) string {
		if i := slices.Index(cmd, name); i >= 0 && i+1 < len(cmd) {
			return cmd[i+1]
		}
		return ""
	}
	if flag(rd.Command, "--bind") != "127.0.0.1" || flag(rd.Command, "--port") != strconv.Itoa(testRedisPort) {
		t.Errorf("redis command %v does not listen on 127.0.0.1:%d only", rd.Command, testRedisPort)
	}
	for i := 1; i < len(baseRedis.Command); i += 2 {
		if flag(rd.Command, baseRedis.Command[i]) != baseRedis.Command[i+1] {
			t.Errorf("redis command %v lacks the deployment's %s %s", rd.Command, baseRedis.Command[i], baseRedis.Command[i+1])
		}
	}
	if got := strings.Join(rd.HealthCheck.Test, " "); !strings.Contains(got, "redis-cli -p "+strconv.Itoa(testRedisPort)+" ping") {
		t.Errorf("redis health check %q asks another port (the host's own Redis would answer)", got)
	}
	use(testRedisPort, "redis")

	for name, port := range testReplicaPorts {
		s, b := service(t, p, name), service(t, base, name)
		if got := loopbackPort(t, name+" TASKFORGE_LISTEN", env(s, "TASKFORGE_LISTEN")); got != port {
			t.Errorf("%s listens on %d, want %d", name, got, port)
		}
		use(port, name)
		db, err := url.Parse(env(s, "DATABASE_URL"))
		if err != nil || loopbackPort(t, name+" DATABASE_URL", db.Host) != testPostgresPort {
			t.Errorf("%s: DATABASE_URL %q is not the test postgres", name, env(s, "DATABASE_URL"))
		}
		if bdb, _ := url.Parse(env(b, "DATABASE_URL")); err == nil && (db.User.String() != bdb.User.String() || db.Path != bdb.Path || db.RawQuery != bdb.RawQuery) {
			t.Errorf("%s: DATABASE_URL differs from the deployment's in more than its address", name)
		}
		if r, err := url.Parse(env(s, "REDIS_URL")); err != nil || loopbackPort(t, name+" REDIS_URL", r.Host) != testRedisPort {
			t.Errorf("%s: REDIS_URL %q is not the test redis", name, env(s, "REDIS_URL"))
		}
		for key := range b.Environment {
			if key != "DATABASE_URL" && key != "REDIS_URL" && key != "TASKFORGE_LISTEN" && env(s, key) != env(b, key) {
				t.Errorf("%s: %s=%q, the deployment has %q", name, key, env(s, key), env(b, key))
			}
		}
	}

	lb := service(t, p, "lb")
	cfgPath := ""
	for _, v := range lb.Volumes {
		if v.Target == "/usr/local/etc/haproxy/haproxy.cfg" && v.ReadOnly {
			cfgPath = v.Source
		}
	}
	if len(lb.Volumes) != 1 || !strings.HasSuffix(cfgPath, "/test/haproxy.cfg") {
		t.Fatalf("lb mounts %v, want only test/haproxy.cfg", lb.Volumes)
	}
	if got := strings.Join(lb.HealthCheck.Test, " "); !strings.Contains(got, fmt.Sprintf("http://127.0.0.1:%d/healthz", testLBPort)) {
		t.Errorf("lb health check %q does not ask the test port", got)
	}
	use(testLBPort, "lb")
	w := service(t, p, "worker")
	if i := slices.Index(w.Command, "--server"); i < 0 || i+1 >= len(w.Command) ||
		w.Command[i+1] != fmt.Sprintf("http://127.0.0.1:%d", testLBPort) {
		t.Errorf("worker command %v does not poll the test load balancer", w.Command)
	}

	// test/haproxy.cfg is ../haproxy.cfg with loopback addresses and nothing else.
	real, err := os.ReadFile("haproxy.cfg")
	if err != nil {
		t.Fatal(err)
	}
	test, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	want := haproxyDirectives(string(real), true)
	for i, line := range want {
		line = strings.Replace(line, "bind :8080", fmt.Sprintf("bind 127.0.0.1:%d", testLBPort), 1)
		line = strings.Replace(line, " resolvers docker", "", 1)
		for name, port := range testReplicaPorts {
			line = strings.Replace(line, name+":8080", fmt.Sprintf("127.0.0.1:%d", port), 1)
		}
		want[i] = line
	}
	if got := haproxyDirectives(string(test), false); !slices.Equal(got, want) {
		t.Errorf("test/haproxy.cfg differs from haproxy.cfg in more than its addresses:\n got %q\nwant %q", got, want)
	}
	for _, m := range regexp.MustCompile(`(?m)^\s*(?:bind|server \S+)\s+(\S+)`).FindAllStringSubmatch(string(test), -1) {
		loopbackPort(t, "test/haproxy.cfg", m[1])
	}
}

// haproxyDirectives returns the configuration's lines without comments and blank
// lines, and without its resolvers sections if asked (Docker's DNS, which host
// networking lacks).
func haproxyDirectives(cfg string, dropResolvers bool) []string {
	var out []string
	inResolvers := false
	for line := range strings.Lines(cfg) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if section := strings.Fields(line)[0]; slices.Contains([]string{"global", "defaults", "frontend", "backend", "listen", "resolvers"}, section) {
			inResolvers = dropResolvers && section == "resolvers"
		}
		if !inResolvers {
			out = append(out, line)
		}
	}
	return out
}

// TestComposeDeployment runs the deployment for real (compose/test/stack.sh): the
// images built from this repository, every health check passed, a task through the
// load balancer done by the worker container, a serve replica SIGKILLed without
// losing the next task, a down and up that keeps the data, and a teardown that
// leaves nothing behind but the cached base image. It takes ~20 minutes on a cold
// machine (the debootstrap), under 2 when the base image is cached: `make compose-test`.
func TestComposeDeployment(t *testing.T) {
	if os.Getenv("TASKFORGE_COMPOSE_TEST") != "1" {
		t.Skip("runs a Docker engine and the whole stack: make compose-test (TASKFORGE_COMPOSE_TEST=1, as root)")
	}
	if os.Geteuid() != 0 {
		t.Fatal("TASKFORGE_COMPOSE_TEST=1 asks for the real run, and its private dockerd needs root")
	}
	start, loadBefore := time.Now(), loadAverage()
	ifacesBefore := interfaceNames(t)
	var steps []string
	stepTimes := regexp.MustCompile(`^stack: step (\S+) took (\S+)$`)
	stack := func(args ...string) string {
		t.Helper()
		var out bytes.Buffer
		cmd := exec.Command("test/stack.sh", args...)
		lw := &lineLogger{t: t, prefix: strings.Join(args[:min(len(args), 2)], " ") + ": "}
		cmd.Stdout, cmd.Stderr = &out, lw
		err := cmd.Run()
		lw.flush()
		for _, line := range lw.lines {
			if m := stepTimes.FindStringSubmatch(line); m != nil {
				steps = append(steps, args[0]+"/"+m[1]+" "+m[2])
			}
		}
		if err != nil {
			t.Fatalf("stack.sh %v: %v\n%s", args, err, out.String())
		}
		return out.String()
	}
	timed := func(what string, f func()) {
		t.Helper()
		t0 := time.Now()
		f()
		d := time.Since(t0).Round(100 * time.Millisecond)
		steps = append(steps, what+" "+d.String())
		t.Logf("== %s took %s", what, d)
	}
	downDone := false
	t.Cleanup(func() {
		if !downDone {
			stack("down")
		}
		t.Logf("== steps (stack.sh's and the test's):\n  %s\n== total %s; load average %s at the start, %s at the end",
			strings.Join(steps, "\n  "), time.Since(start).Round(time.Second), loadBefore, loadAverage())
	})

	stack("up")
	waitHealthy(t, stack)
	lbURL := fmt.Sprintf("http://127.0.0.1:%d", testLBPort)
	checkLoopbackOnly(t, ifacesBefore)

	do := func(want int, method, path string, body any) testserver.Response {
		t.Helper()
		r := testserver.Do(t, lbURL, method, path, body, nil)
		if r.Status != want {
			t.Fatalf("%s %s through the load balancer: %d, want %d: %s", method, path, r.Status, want, r.Body)
		}
		return r
	}
	enqueue := func() wire.Task {
		t.Helper()
		var task wire.Task
		do(http.StatusCreated, "POST", "/queues/demo/tasks", map[string]any{"payload": map[string]any{"ms": 50}}).JSON(t, &task)
		return task
	}
	// awaitDone waits (on the server's own wait_ms) until the task is done.
	awaitDone := func(id string) wire.Task {
		t.Helper()
		deadline := time.Now().Add(90 * time.Second)
		for {
			var task wire.Task
			do(http.StatusOK, "GET", "/queues/demo/tasks/"+id+"?wait_ms=10000", nil).JSON(t, &task)
			if task.Status == "done" {
				return task
			}
			if time.Now().After(deadline) {
				t.Fatalf("task %s still %s after 90 s: %+v", id, task.Status, task)
			}
		}
	}
	workerID := func() string {
		t.Helper()
		logs := stack("compose", "logs", "--no-color", "--no-log-prefix", "worker")
		m := regexp.MustCompile(`msg="worker started" worker_id=(\S+)`).FindAllStringSubmatch(logs, -1)
		if len(m) == 0 {
			t.Fatalf("the worker container logged no start:\n%s", logs)
		}
		return m[len(m)-1][1]
	}

	var first, second wire.Task
	timed("first task through the lb", func() {
		do(http.StatusCreated, "POST", "/queues", map[string]any{"name": "demo"})
		first = awaitDone(enqueue().ID)
	})
	if id := workerID(); len(first.AttemptHistory) != 1 || first.AttemptHistory[0].WorkerID != id {
		t.Fatalf("task %s done by %+v, not by the worker container %s", first.ID, first.AttemptHistory, id)
	}
	t.Logf("task %s done by the worker container (%s) through the load balancer", first.ID, first.AttemptHistory[0].WorkerID)

	// A worker that leaves in the middle of a long poll: the load balancer aborts the
	// poll on the replica too (option abortonclose), so a task enqueued after is not
	// handed to the reader that is gone. Without it the task was executing, leased to
	// "gone", until its lease ran out. The poll waits 8 s; the check waits 9 s on the
	// server, past the end of that poll.
	timed("abandoned long poll claims nothing", func() {
		do(http.StatusCreated, "POST", "/queues", map[string]any{"name": "abandoned"})
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		body := strings.NewReader(`{"worker_id": "gone", "queues": ["abandoned"], "max_tasks": 1, "wait_ms": 8000}`)
		req, _ := http.NewRequestWithContext(ctx, "POST", lbURL+"/workers/poll", body)
		req.Header.Set("Content-Type", "application/json")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			t.Fatalf("the long poll on an empty queue answered %d within a second", resp.StatusCode)
		}
		var task wire.Task
		do(http.StatusCreated, "POST", "/queues/abandoned/tasks", map[string]any{"payload": map[string]any{}}).JSON(t, &task)
		do(http.StatusOK, "GET", "/queues/abandoned/tasks/"+task.ID+"?wait_ms=9000", nil).JSON(t, &task)
		if task.ClaimedBy != nil || task.Status == "executing" {
			t.Fatalf("the abandoned poll took task %s: %s, claimed by %q", task.ID, task.Status, *cmp.Or(task.ClaimedBy, new(string)))
		}
	})

	// SIGKILL taskforge-1 as a crash would, with its restart policy lifted so that it
	// stays down, and see the next task go through taskforge-2.
	victim := strings.TrimSpace(stack("compose", "ps", "-q", "taskforge-1"))
	stack("docker", "update", "--restart=no", victim)
	pid, err := strconv.Atoi(strings.TrimSpace(stack("docker", "inspect", "-f", "{{.State.Pid}}", victim)))
	if err != nil || pid <= 1 {
		t.Fatalf("taskforge-1's pid: %v", err)
	}
	timed("kill taskforge-1, next task done", func() {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatalf("SIGKILL taskforge-1 (pid %d): %v", pid, err)
		}
		if state := strings.TrimSpace(stack("docker", "wait", victim)); state != "137" {
			t.Fatalf("taskforge-1 exited with %s, want 137 (SIGKILL)", state)
		}
		second = awaitDone(enqueue().ID)
	})
	if running := strings.TrimSpace(stack("docker", "inspect", "-f", "{{.State.Running}}", victim)); running != "false" {
		t.Fatalf("taskforge-1 came back before the second task was checked (running=%s)", running)
	}
	t.Logf("task %s done with taskforge-1 dead", second.ID)
	stack("docker", "update", "--restart=unless-stopped", victim)
	timed("taskforge-1 back to healthy", func() {
		stack("compose", "up", "-d", "--no-build", "--wait", "--wait-timeout", "180")
	})

	// down and up again: the named volumes keep the queue and the tasks.
	timed("down keeping volumes", func() { stack("compose", "down", "--timeout", "30") })
	vols := strings.Fields(stack("docker", "volume", "ls", "-q"))
	if !slices.Contains(vols, "taskforge_pgdata") || !slices.Contains(vols, "taskforge_redisdata") {
		t.Fatalf("volumes after down: %v", vols)
	}
	timed("up again to healthy", func() {
		stack("compose", "up", "-d", "--no-build", "--wait", "--wait-timeout", "180")
	})
	waitHealthy(t, stack)
	for _, id := range []string{first.ID, second.ID} {
		var task wire.Task
		do(http.StatusOK, "GET", "/queues/demo/tasks/"+id, nil).JSON(t, &task)
		if task.Status != "done" {
			t.Fatalf("after down and up, task %s is %q", id, task.Status)
		}
	}
	timed("task after the restart", func() { awaitDone(enqueue().ID) })
	t.Log("after down and up: both tasks still done, a new one done")

	stack("down") // fails unless it left nothing but the cached base image
	downDone = true
	if _, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", testLBPort), time.Second); err == nil {
		t.Error("something still listens on the load balancer's port after down")
	}
	if _, err := os.Stat("/run/taskforge-compose/docker.sock"); err == nil {
		t.Error("the private dockerd's socket is still there after down")
	}
}

// lineLogger logs what a command writes, line by line, as it comes.
type lineLogger struct {
	t       *testing.T
	prefix  string
	partial []byte
	lines   []string
}

func (l *lineLogger) Write(p []byte) (int, error) {
	l.partial = append(l.partial, p...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			return len(p), nil
		}
		l.emit(string(l.partial[:i]))
		l.partial = l.partial[i+1:]
	}
}

func (l *lineLogger) emit(line string) {
	l.lines = append(l.lines, line)
	l.t.Log(l.prefix + line)
}

func (l *lineLogger) flush() {
	if len(l.partial) > 0 {
		l.emit(string(l.partial))
		l.partial = nil
	}
}

// waitHealthy checks that every service of the test stack runs, and that all but the
// worker (which has no health check) are healthy.
func waitHealthy(t *testing.T, stack func(...string) string) {
	t.Helper()
	out := stack("compose", "ps", "--all", "--format", "json")
	seen := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var c struct{ Service, State, Health string }
		if err := json.Unmarshal([]byte(line), &c); err != nil {
			t.Fatalf("compose ps: %v: %s", err, line)
		}
		seen[c.Service] = true
		if c.State != "running" || (c.Service != "worker" && c.Health != "healthy") {
			t.Errorf("%s is %s/%s", c.Service, c.State, c.Health)
		}
	}
	for _, name := range []string{"lb", "postgres", "redis", "taskforge-1", "taskforge-2", "worker"} {
		if !seen[name] {
			t.Errorf("no container for %s: %s", name, out)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
}

// loadAverage is the machine's 1-, 5- and 15-minute load, for the figures' context.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "unknown"
}

func interfaceNames(t *testing.T) []string {
	t.Helper()
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, i := range ifs {
		names = append(names, i.Name)
	}
	slices.Sort(names)
	return names
}

// checkLoopbackOnly checks that the stack made no network interface and that every
// one of its listeners is bound to 127.0.0.1 (from /proc/net/tcp and tcp6).
func checkLoopbackOnly(t *testing.T, ifacesBefore []string) {
	t.Helper()
	if after := interfaceNames(t); !slices.Equal(after, ifacesBefore) {
		t.Errorf("network interfaces before the stack %v, with it %v", ifacesBefore, after)
	}
	want := map[int]bool{testPostgresPort: false, testRedisPort: false, testLBPort: false}
	for _, port := range testReplicaPorts {
		want[port] = false
	}
	for _, file := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) < 4 || f[3] != "0A" { // LISTEN
				continue
			}
			addr, portHex, _ := strings.Cut(f[1], ":")
			port, _ := strconv.ParseInt(portHex, 16, 32)
			if _, ours := want[int(port)]; !ours {
				continue
			}
			if addr != "0100007F" {
				t.Errorf("port %d listens on %s (%s), not 127.0.0.1", port, addr, file)
			}
			want[int(port)] = true
		}
	}
	for port, seen := range want {
		if !seen {
			t.Errorf("nothing listens on 127.0.0.1:%d", port)
		}
	}
}
