package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// enqueueLedger records what the producer was told. Every figure is about API
// calls made through the proxy while faults run.
type enqueueLedger struct {
	mu sync.Mutex
	// ids maps an idempotency key to the task id a 2xx answer gave for it.
	ids map[string]string
	// scheduledAt maps a key to the scheduled_at sent for it (delayed tasks only).
	scheduledAt map[string]time.Time
	requests    int // API calls that got a 2xx in the end
	failedCalls int // calls answered 5xx or cut off (each one retried)
	// committedAnyway counts failed calls whose tasks turned out to exist (the
	// commit happened but the answer was lost); the retry returned them.
	committedAnyway int
	halfMade        []string // failed calls that left some but not all of their tasks
	unchecked       int      // failed calls whose atomicity could not be checked (PostgreSQL down too long)
	problems        []string // 4xx answers, id mismatches, calls that never succeeded
}

func newEnqueueLedger() *enqueueLedger {
	return &enqueueLedger{ids: map[string]string{}, scheduledAt: map[string]time.Time{}}
}

func (l *enqueueLedger) problem(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.problems = append(l.problems, fmt.Sprintf(format, args...))
}

// runEnqueuer sends the plan's requests at their offsets, four at a time, each
// retried with the same idempotency keys and body until it gets a 2xx. It returns
// when every request is done, or soon after ctx ends (the test is failing).
func (h *harness) runEnqueuer(ctx context.Context, p plan, l *enqueueLedger) {
	reqs := make(chan enqueueRequest)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range reqs {
				h.enqueueOne(ctx, p, r, l)
			}
		}()
	}
	defer func() {
		close(reqs)
		wg.Wait()
	}()
	for _, r := range p.Requests {
		timer := time.NewTimer(time.Until(h.start.Add(r.At))) // the request's place in the schedule
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
		reqs <- r
	}
}

// taskBody is one enqueue body as sent.
type taskBody struct {
	Payload        json.RawMessage `json:"payload"`
	Priority       int             `json:"priority"`
	MaxRetries     int             `json:"max_retries"`
	TimeoutSeconds int             `json:"timeout_seconds,omitempty"`
	ScheduledAt    *string         `json:"scheduled_at,omitempty"`
	IdempotencyKey string          `json:"idempotency_key"`
	Group          string          `json:"group,omitempty"`
}

// enqueueOne sends one request until it succeeds. After every failed call it checks
// in PostgreSQL that the call left all or none of its tasks.
func (h *harness) enqueueOne(ctx context.Context, p plan, r enqueueRequest, l *enqueueLedger) {
	now := time.Now()
	bodies := make([]taskBody, len(r.Tasks))
	keys := make([]string, len(r.Tasks))
	for i, ti := range r.Tasks {
		t := p.Tasks[ti]
		bodies[i] = taskBody{Payload: t.Payload, Priority: t.Priority, MaxRetries: t.MaxRetries,
			TimeoutSeconds: t.Timeout, IdempotencyKey: t.Key, Group: t.Group}
		keys[i] = t.Key
		if t.Delay > 0 {
			at := now.Add(t.Delay).UTC().Truncate(time.Millisecond)
			s := at.Format(time.RFC3339Nano)
			bodies[i].ScheduledAt = &s
			l.mu.Lock()
			l.scheduledAt[t.Key] = at
			l.mu.Unlock()
		}
	}
	var (
		path   = "/queues/" + r.Queue + "/tasks/batch"
		body   any
		header http.Header
	)
	if len(bodies) == 1 {
		path = "/queues/" + r.Queue + "/tasks"
		body = bodies[0]
		header = http.Header{"Idempotency-Key": {keys[0]}}
	} else {
		body = map[string]any{"tasks": bodies}
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		status, data, err := h.call(ctx, http.MethodPost, path, body, header)
		switch {
		case err == nil && (status == http.StatusCreated || status == http.StatusOK):
			h.recordEnqueued(keys, data, len(bodies) == 1, l)
			return
		case err == nil && status < 500:
			l.problem("enqueue %s (%d tasks, first key %s): status %d: %s", path, len(keys), keys[0], status, data)
			return
		}
		if ctx.Err() != nil {
			l.problem("enqueue %s (first key %s): abandoned, the test is ending", path, keys[0])
			return
		}
		l.mu.Lock()
		l.failedCalls++
		l.mu.Unlock()
		h.checkAtomic(keys, l)
		if time.Now().After(deadline) {
			l.problem("enqueue %s (first key %s): no 2xx within 2 minutes; last: %d %v", path, keys[0], status, err)
			return
		}
		backoff(200 * time.Millisecond)
	}
}

// recordEnqueued notes the ids a 2xx answer gave.
func (h *harness) recordEnqueued(keys []string, data []byte, single bool, l *enqueueLedger) {
	type task struct {
		ID             string `json:"id"`
		IdempotencyKey string `json:"idempotency_key"`
	}
	var tasks []task
	if single {
		var t task
		if err := json.Unmarshal(data, &t); err != nil {
			l.problem("enqueue answer is not a task: %v: %s", err, data)
			return
		}
		tasks = []task{t}
	} else {
		var b struct {
			Tasks []task `json:"tasks"`
		}
		if err := json.Unmarshal(data, &b); err != nil {
			l.problem("batch answer is not {tasks}: %v: %s", err, data)
			return
		}
		tasks = b.Tasks
	}
	if len(tasks) != len(keys) {
		l.problem("enqueue of %d tasks answered with %d", len(keys), len(tasks))
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.requests++
	for i, t := range tasks {
		if t.IdempotencyKey != keys[i] {
			l.problems = append(l.problems, fmt.Sprintf("answer %d carries key %q, want %q", i, t.IdempotencyKey, keys[i]))
			continue
		}
		if prev, ok := l.ids[keys[i]]; ok && prev != t.ID {
			l.problems = append(l.problems, fmt.Sprintf("key %s answered with task %s, earlier %s", keys[i], t.ID, prev))
		}
		l.ids[keys[i]] = t.ID
	}
}

// checkAtomic counts, in PostgreSQL, the tasks a failed call left: all of them
// (the commit happened, the answer was lost) or none are fine; anything between is
// a half-made enqueue.
func (h *harness) checkAtomic(keys []string, l *enqueueLedger) {
	var n int
	err := h.dbRetry(30*time.Second, func(ctx context.Context) error {
		// With the tasks retention removed meanwhile (the history log keeps them).
		return h.db.QueryRow(ctx, `SELECT count(DISTINCT id) FROM (SELECT id, idempotency_key FROM all_tasks
			UNION ALL SELECT id, idempotency_key FROM chaos_task_shadow) t WHERE idempotency_key = ANY($1)`, keys).Scan(&n)
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case err != nil:
		l.unchecked++
	case n == len(keys):
		l.committedAnyway++
	case n != 0:
		l.halfMade = append(l.halfMade, fmt.Sprintf("%d of %d tasks (first key %s)", n, len(keys), keys[0]))
	}
}
