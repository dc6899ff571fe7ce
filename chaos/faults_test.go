package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// probeResult is what one stale-lease probe saw: the status and error code of each
// call made with a lease that had expired and been reclaimed.
type probeResult struct {
	TaskID    string
	Worker    string
	Stale     map[string]string // call → "409 lease_lost", or what came instead
	Unchanged bool              // the task and its attempts were the same after the stale calls
	// Inconclusive: the fresh lease lapsed while the stale calls were made, so they
	// could not be checked against a live lease.
	Inconclusive bool
	Failure      string // the probe could not run: its task was not handed out, ...
	FinalAck     string // the fresh lease's ack: "200", or what came instead
}

// pauseRecord is one SIGSTOPped worker: when it was stopped and continued, and
// where its log stood at SIGCONT (its late calls are logged after that).
type pauseRecord struct {
	Worker    string
	StoppedAt time.Time
	ContAt    time.Time
	LogPath   string
	LogOffset int64
	Held      int // tasks it held when stopped
}

// injector runs the fault schedule on the test goroutine.
type injector struct {
	h       *harness
	probes  []probeResult
	pauses  []pauseRecord
	probeNo int
}

// run performs f and records it as an event.
func (in *injector) run(f fault) {
	h := in.h
	t := h.t
	switch f.Kind {
	case faultWorkerKill:
		victims := in.pickWorkers(f.Target, f.Count)
		e := &event{Kind: string(f.Kind), At: time.Now()}
		var names []string
		for _, w := range victims {
			id, _ := w.current()
			w.kill()
			e.Victims = append(e.Victims, id)
			names = append(names, id)
		}
		e.Target = strings.Join(names, ",")
		hold(f.Down) // the time the workers stay dead: part of the schedule
		for _, w := range victims {
			if err := w.start(); err != nil {
				t.Fatalf("restart worker: %v", err)
			}
		}
		e.Back = time.Now()
		h.addEvent(e)
	case faultWorkerPause:
		in.pause(f)
	case faultReplicaKill:
		r := h.replica[f.Target]
		e := &event{Kind: string(f.Kind), Target: r.name(), At: time.Now()}
		r.kill()
		hold(f.Down) // the time the replica stays dead: part of the schedule
		r.release()
		if r.waitReady(30 * time.Second) {
			e.Back = time.Now()
		} else {
			e.Note = "not ready within 30s (crash-looping?)"
		}
		h.addEvent(e)
	case faultRedisFlush:
		e := &event{Kind: string(f.Kind), Target: "redis", At: time.Now()}
		if err := flushAll(h.redis.Addr); err != nil {
			t.Fatalf("FLUSHALL: %v", err)
		}
		e.Back = time.Now()
		h.addEvent(e)
	case faultRedisRestart:
		e := &event{Kind: string(f.Kind), Target: "redis", At: time.Now()}
		h.redis.Kill()
		hold(f.Down) // the time Redis stays dead: part of the schedule
		h.redis.Restart(t)
		e.Back = time.Now()
		h.addEvent(e)
	case faultPGFast:
		e := &event{Kind: string(f.Kind), Target: "postgres", At: time.Now()}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		err := h.pg.Restart(ctx) // fast shutdown (in-flight transactions abort), then start
		cancel()
		if err != nil {
			t.Fatalf("restart PostgreSQL: %v", err)
		}
		e.Back = time.Now()
		h.addEvent(e)
	case faultPGKill:
		e := &event{Kind: string(f.Kind), Target: "postgres", At: time.Now()}
		if err := h.pg.Kill(); err != nil {
			t.Fatalf("kill PostgreSQL: %v", err)
		}
		hold(f.Down) // the time PostgreSQL stays dead: part of the schedule
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		err := h.pg.Restart(ctx) // crash recovery
		cancel()
		if err != nil {
			t.Fatalf("restart PostgreSQL after kill: %v", err)
		}
		e.Back = time.Now()
		h.addEvent(e)
	case faultWorkerTerm:
		in.term(f)
	case faultPGPause:
		e := &event{Kind: string(f.Kind), Target: "postgres", At: time.Now()}
		pid, err := postmasterGroup(h.pg.DataDir())
		if err == nil {
			err = stopFor(-pid, f.Down)
		}
		if err != nil {
			t.Fatalf("pause PostgreSQL: %v", err)
		}
		e.Back = time.Now()
		h.addEvent(e)
	case faultRedisPause:
		e := &event{Kind: string(f.Kind), Target: "redis", At: time.Now()}
		pid, err := redisPID(h.redis.Addr)
		if err == nil {
			err = stopFor(pid, f.Down)
		}
		if err != nil {
			t.Fatalf("pause Redis: %v", err)
		}
		e.Back = time.Now()
		h.addEvent(e)
	case faultPartition:
		r := h.replica[f.Target]
		e := &event{Kind: string(f.Kind), Target: r.name(), At: time.Now()}
		r.pgProxy.Cut()
		r.redisProxy.Cut()
		hold(f.Down) // the partition's length: part of the schedule
		r.pgProxy.Restore()
		r.redisProxy.Restore()
		e.Back = time.Now()
		h.addEvent(e)
	default:
		t.Fatalf("unknown fault kind %q", f.Kind)
	}
}

// termRecord is one graceful stop: the worker, when it got SIGTERM, how it exited.
type termRecord struct {
	Worker   string
	At       time.Time
	ExitCode int
}

// term SIGTERMs a worker holding tasks: it stops polling, waits its grace (1 s),
// releases what still runs and exits 0. It is restarted after f.Down.
func (in *injector) term(f fault) {
	h := in.h
	w := in.longHolder()
	if w == nil {
		w = in.pickWorkers(f.Target, 1)[0]
	}
	id, p := w.current()
	e := &event{Kind: string(f.Kind), Target: id, At: time.Now(), Note: fmt.Sprintf("held %d tasks", in.held()[id])}
	p.signal(syscall.SIGTERM)
	rec := termRecord{Worker: id, At: e.At, ExitCode: -2}
	select {
	case <-p.done:
		rec.ExitCode = p.exitCode
	case <-time.After(20 * time.Second):
		p.kill()
		e.Note += "; still running 20 s after SIGTERM, killed"
	}
	hold(f.Down) // the time the worker stays stopped: part of the schedule
	if err := w.start(); err != nil {
		h.t.Fatalf("restart worker: %v", err)
	}
	e.Back = time.Now()
	h.terms = append(h.terms, rec)
	h.addEvent(e)
}

// longHolder waits up to 10 s for a worker to hold a sleep task longer than its
// grace (1 s), so that a graceful stop has something to release; nil if none does.
func (in *injector) longHolder() *workerSlot {
	var holder string
	poll(10*time.Second, func() bool {
		_ = in.h.dbRetry(5*time.Second, func(ctx context.Context) error {
			return in.h.db.QueryRow(ctx, `SELECT coalesce(min(claimed_by), '') FROM tasks
				WHERE status = 'executing' AND queue = $1 AND (payload->>'ms')::int >= 2000`, queueSleep).Scan(&holder)
		})
		return holder != ""
	})
	for _, w := range in.h.workers {
		if id, _ := w.current(); id == holder {
			return w
		}
	}
	return nil
}

// flushAll sends FLUSHALL over a plain connection (RESP), retrying briefly.
func flushAll(addr string) error {
	var err error
	for range 50 {
		if err = flushAllOnce(addr); err == nil {
			return nil
		}
		backoff(100 * time.Millisecond)
	}
	return err
}

func flushAllOnce(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		return err
	}
	if _, err := conn.Write([]byte("*1\r\n$8\r\nFLUSHALL\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if line = strings.TrimSpace(line); line != "+OK" {
		return fmt.Errorf("FLUSHALL answered %q", line)
	}
	return nil
}

// held counts the tasks each worker incarnation is executing, per PostgreSQL.
func (in *injector) held() map[string]int {
	out := map[string]int{}
	_ = in.h.dbRetry(5*time.Second, func(ctx context.Context) error {
		rows, err := in.h.db.Query(ctx, `SELECT claimed_by, count(*) FROM tasks WHERE status = 'executing' GROUP BY claimed_by`)
		if err != nil {
			return err
		}
		m := map[string]int{}
		for rows.Next() {
			var id string
			var n int
			if err := rows.Scan(&id, &n); err != nil {
				return err
			}
			m[id] = n
		}
		if rows.Err() == nil {
			out = m
		}
		return rows.Err()
	})
	return out
}

// pickWorkers returns count workers, preferring those holding tasks, starting at
// slot first. It waits up to 10 s for some worker to hold a task.
func (in *injector) pickWorkers(first, count int) []*workerSlot {
	var held map[string]int
	poll(10*time.Second, func() bool {
		held = in.held()
		for _, w := range in.h.workers {
			if id, _ := w.current(); held[id] > 0 {
				return true
			}
		}
		return false
	})
	ws := in.h.workers
	order := make([]*workerSlot, 0, len(ws))
	for i := range ws {
		order = append(order, ws[(first+i)%len(ws)])
	}
	slices.SortStableFunc(order, func(a, b *workerSlot) int {
		ia, _ := a.current()
		ib, _ := b.current()
		return min(held[ib], 1) - min(held[ia], 1) // holders first, otherwise schedule order
	})
	return order[:count]
}

// pause SIGSTOPs a worker holding tasks while a lease of the test's own goes stale,
// waits until both are reclaimed, makes the stale calls, then SIGCONTs the worker
// and finishes the probe task with a fresh lease. A probe that goes wrong is
// recorded for the verifier; the worker is continued whatever happens.
func (in *injector) pause(f fault) {
	h := in.h
	in.probeNo++
	res := probeResult{Worker: fmt.Sprintf("probe-%d", in.probeNo), Stale: map[string]string{}}
	lease, err := in.takeProbeLease(&res)
	if err != nil {
		res.Failure = err.Error()
	}

	w := in.pickWorkers(f.Target, 1)[0]
	id, p := w.current()
	heldBefore := in.held()[id]
	e := &event{Kind: string(f.Kind), Target: id, Victims: []string{id}, At: time.Now()}
	p.signal(syscall.SIGSTOP)

	// Past the lease: the watchdog has reclaimed the probe's attempt and every task
	// the stopped worker held.
	reclaimed := poll(30*time.Second, func() bool {
		if time.Since(e.At) < leaseTimeout {
			return false
		}
		var live int
		err := h.dbRetry(5*time.Second, func(ctx context.Context) error {
			return h.db.QueryRow(ctx, `SELECT count(*) FROM all_attempts
				WHERE status = 'executing' AND ((task_id::text = $1 AND attempt = $2) OR worker_id = $3)`,
				res.TaskID, lease.Attempt, id).Scan(&live)
		})
		return err == nil && live == 0
	})
	if !reclaimed {
		h.t.Errorf("pause of %s: the stale leases were not reclaimed within 30s", id)
	}
	if res.Failure == "" {
		before := in.probeState(res.TaskID)
		in.staleCalls(&res, "", lease.LeaseToken)
		res.Unchanged = before != "" && before == in.probeState(res.TaskID)
	}

	p.signal(syscall.SIGCONT)
	e.Back = time.Now()
	rec := pauseRecord{Worker: id, StoppedAt: e.At, ContAt: e.Back, LogPath: w.logPath, Held: heldBefore}
	if fi, err := os.Stat(w.logPath); err == nil {
		rec.LogOffset = fi.Size()
	}
	in.pauses = append(in.pauses, rec)
	e.Note = fmt.Sprintf("held %d tasks; probe %s", heldBefore, res.Worker)
	h.addEvent(e)

	if res.Failure == "" {
		if err := in.finishProbe(&res, lease); err != nil {
			res.Failure = err.Error()
		}
	}
	if res.Failure != "" && res.TaskID != "" {
		// Nobody else serves the probe queue: end the task so that the run can settle.
		// The verifier reports the failure.
		_, _, _ = h.mustCall(http.MethodDelete, "/queues/"+queueProbe+"/tasks/"+res.TaskID, nil, 30*time.Second)
	}
	in.probes = append(in.probes, res)
}

// finishProbe takes a fresh lease on the probe task: the task must still be
// runnable. While that lease is live, the stale token must still be refused
// (fencing by token, not only by status) and must not disturb the live attempt; a
// heartbeat with the fresh lease after the stale calls shows it was live
// throughout. Then the fresh lease acks the task.
func (in *injector) finishProbe(res *probeResult, stale polledLease) error {
	h := in.h
	fresh := res.Worker + "-fresh"
	for try := 1; ; try++ {
		l, err := in.takeProbeLeaseOf(fresh, res.TaskID)
		if err != nil {
			return err
		}
		if try == 1 {
			live := in.probeState(res.TaskID)
			in.staleCalls(res, "while re-leased ", stale.LeaseToken)
			status, _, err := h.mustCall(http.MethodPost, "/workers/heartbeat", map[string]any{
				"worker_id": fresh, "task_id": res.TaskID, "lease_token": l.LeaseToken}, 30*time.Second)
			switch {
			case err == nil && status == http.StatusOK:
				res.Unchanged = res.Unchanged && live != "" && live == in.probeState(res.TaskID)
			case in.attemptStatus(res.TaskID, l.Attempt) == "abandoned":
				res.Inconclusive = true // the fresh lease lapsed during the calls (a replica crashed under them)
			default:
				res.Unchanged = false // something but the watchdog ended the fresh lease: a stale call did
			}
		}
		status, data, err := h.mustCall(http.MethodPost, "/workers/ack", map[string]any{
			"worker_id": fresh, "task_id": res.TaskID, "lease_token": l.LeaseToken}, 30*time.Second)
		switch {
		case err != nil:
			res.FinalAck = err.Error()
		case status == http.StatusOK:
			res.FinalAck = "200"
		case status == http.StatusConflict && in.probeDone(res.TaskID):
			res.FinalAck = "200" // the ack committed, its answer was lost with a replica; the retry found it done
		case status == http.StatusConflict && try < 3:
			continue // the lease lapsed before the ack arrived: take the task again
		default:
			res.FinalAck = fmt.Sprintf("%d %s", status, errorCode(data))
		}
		return nil
	}
}

// staleCalls makes a heartbeat, an ack and a nack with a lease that is no longer
// the task's, and records each answer under prefix+call.
func (in *injector) staleCalls(res *probeResult, prefix, token string) {
	calls := []struct {
		name string
		path string
		body map[string]any
	}{
		{"heartbeat", "/workers/heartbeat", map[string]any{}},
		{"ack", "/workers/ack", map[string]any{"result": map[string]any{"late": true}}},
		{"nack", "/workers/nack", map[string]any{"error": "late nack", "retryable": true}},
	}
	for _, c := range calls {
		c.body["worker_id"], c.body["task_id"], c.body["lease_token"] = res.Worker, res.TaskID, token
		status, data, err := in.h.mustCall(http.MethodPost, c.path, c.body, 30*time.Second)
		if err != nil {
			res.Stale[prefix+c.name] = err.Error()
		} else {
			res.Stale[prefix+c.name] = fmt.Sprintf("%d %s", status, errorCode(data))
		}
	}
}

// polledLease is a lease the test holds.
type polledLease struct {
	ID         string `json:"id"`
	Attempt    int    `json:"attempt"`
	LeaseToken string `json:"lease_token"`
}

// takeProbeLease enqueues a probe task (recording its id in res) and polls it.
func (in *injector) takeProbeLease(res *probeResult) (polledLease, error) {
	h := in.h
	key := fmt.Sprintf("probe-%d-%d", h.start.UnixNano(), in.probeNo)
	status, data, err := h.mustCall(http.MethodPost, "/queues/"+queueProbe+"/tasks",
		map[string]any{"payload": map[string]any{"probe": in.probeNo}, "idempotency_key": key}, time.Minute)
	if err != nil || (status != http.StatusCreated && status != http.StatusOK) {
		return polledLease{}, fmt.Errorf("enqueue probe task: %d %v %s", status, err, data)
	}
	var task struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(data, &task); err != nil {
		return polledLease{}, fmt.Errorf("probe task: %w", err)
	}
	res.TaskID = task.ID
	return in.takeProbeLeaseOf(res.Worker, task.ID)
}

// takeProbeLeaseOf polls the probe queue until it hands out task (nothing else is
// ever in it), and returns the lease.
func (in *injector) takeProbeLeaseOf(workerID, task string) (polledLease, error) {
	h := in.h
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		status, data, err := h.call(context.Background(), http.MethodPost, "/workers/poll", map[string]any{
			"worker_id": workerID, "queues": []string{queueProbe}, "max_tasks": 1, "wait_ms": 1000}, nil)
		if err != nil || status != http.StatusOK {
			backoff(100 * time.Millisecond)
			continue
		}
		var out struct {
			Tasks []polledLease `json:"tasks"`
		}
		if err := json.Unmarshal(data, &out); err != nil {
			return polledLease{}, fmt.Errorf("poll answer: %w: %s", err, data)
		}
		for _, l := range out.Tasks {
			if l.ID != task {
				return polledLease{}, fmt.Errorf("probe queue handed out %s, want %s", l.ID, task)
			}
			return l, nil
		}
	}
	return polledLease{}, fmt.Errorf("probe task %s was not handed out within a minute", task)
}

// probeState is the probe task's row and attempt history, as text, for comparison.
func (in *injector) probeState(task string) string {
	var state string
	_ = in.h.dbRetry(30*time.Second, func(ctx context.Context) error {
		var attempts int
		var lastErr *string
		if err := in.h.db.QueryRow(ctx, `SELECT attempts, last_error FROM all_tasks WHERE id = $1`, task).Scan(&attempts, &lastErr); err != nil {
			return err
		}
		rows, err := in.h.db.Query(ctx, `SELECT attempt, status, lease_token::text, finished_at, coalesce(error, '')
			FROM all_attempts WHERE task_id = $1 ORDER BY attempt`, task)
		if err != nil {
			return err
		}
		type att struct {
			N        int
			Status   string
			Token    string
			Finished *time.Time
			Err      string
		}
		list, err := pgx.CollectRows(rows, pgx.RowToStructByPos[att])
		if err != nil {
			return err
		}
		b, _ := json.Marshal(map[string]any{"attempts": attempts, "last_error": lastErr, "history": list})
		state = string(b)
		return nil
	})
	return state
}

// attemptStatus is the status of one attempt of task, or "" when unknown.
func (in *injector) attemptStatus(task string, attempt int) string {
	var status string
	_ = in.h.dbRetry(30*time.Second, func(ctx context.Context) error {
		return in.h.db.QueryRow(ctx, `SELECT status FROM all_attempts WHERE task_id = $1 AND attempt = $2`, task, attempt).Scan(&status)
	})
	return status
}

func (in *injector) probeDone(task string) bool {
	var status string
	err := in.h.dbRetry(30*time.Second, func(ctx context.Context) error {
		return in.h.db.QueryRow(ctx, `SELECT status FROM all_tasks WHERE id = $1`, task).Scan(&status)
	})
	return err == nil && status == "done"
}
