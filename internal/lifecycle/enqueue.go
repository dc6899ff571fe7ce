package lifecycle

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/taskforge/taskforge/buffer"
	"github.com/taskforge/taskforge/ratelimit"
	"github.com/taskforge/taskforge/storage"
	"github.com/taskforge/taskforge/telemetry"
)

// Enqueue stores tasks in queue under an enqueue span that continues ctx's trace
// (the producer's, see telemetry.FromHeader), records that span's traceparent with
// each task, and reports the tasks it created (an idempotent repeat creates none).
// Without withTasks (callers that answer with ids), of each task created it returns
// only what storage.EnqueueOptions.Refs says. Tasks due now go straight into the
// buffer when Config.BufferTarget allows (bufferDirectly, then toBuffer), saving the
// dispatcher's hop and commit; for the others, the statement's NOTIFY tells the
// dispatchers, and with Config.WakeOnEnqueue, this replica's dispatcher is also told
// directly. A task with a debounce key is always pending, due later: it replaces
// the queue's waiting task with that key (Enqueued.Replaced) or is created; either
// way the dispatchers hear of its due time.
func (l *Lifecycle) Enqueue(ctx context.Context, queue string, tasks []storage.NewTask, withTasks bool) ([]storage.Enqueued, error) {
	ctx, span := l.tel.StartSpan(ctx, "taskforge.enqueue",
		attribute.String("taskforge.queue", queue), attribute.Int("taskforge.tasks", len(tasks)))
	defer span.End()
	limits, direct := l.bufferDirectly(ctx, queue, tasks)
	out, err := l.store.EnqueueWith(ctx, queue, tasks,
		storage.EnqueueOptions{Traceparent: telemetry.Traceparent(ctx), Buffered: direct, Refs: !withTasks})
	if err != nil {
		span.RecordError(err)
		return nil, fmt.Errorf("enqueue %d tasks in queue %s: %w", len(tasks), queue, err)
	}
	pending := false
	var buffered []storage.Buffered
	for i := range out {
		e := &out[i] // not a copy: a Task is some 400 bytes, and a batch holds 1,000
		if e.Replaced {
			// A debounce replaced a waiting task: it stays pending, due at a new time.
			pending = true
			continue
		}
		if !e.Created {
			continue
		}
		t := &e.Task
		l.tel.Transition(telemetry.Transition{TaskID: t.ID, Queue: t.Queue, To: storage.StatusPending})
		if t.Status != storage.StatusBuffered {
			pending = true
			continue
		}
		buffered = append(buffered, storage.Buffered{ID: t.ID, Priority: t.Priority, ScheduledAt: t.ScheduledAt,
			FromStatus: storage.StatusPending, Traceparent: t.Traceparent, Group: groupOf(t.Group)})
	}
	// Committed as dispatched: if this ZADD fails or we crash now, the
	// dispatcher's repair pass re-adds them, as after its own lost ZADD.
	if err := l.toBuffer(context.WithoutCancel(ctx), queue, buffered, buffer.LevelWeightMs(limits.AgingMs), limits.Fair); err != nil {
		l.log.Warn("enqueued tasks not buffered; the dispatcher's repair pass will", "queue", queue,
			"tasks", len(buffered), "err", err)
	}
	if pending {
		l.enqueued(queue)
	}
	return out, nil
}

// maxBufferDirectly is the most tasks one enqueue puts in the buffer itself.
const maxBufferDirectly = 100

// bufferDirectly says whether an enqueue of tasks into queue may put them straight
// into the buffer (Config.BufferTarget), with the queue's limits: only tasks due now,
// in a queue that is not paused, whose buffer has room for them all (as this replica
// last saw it, within sizeFresh; else one ZCARD). PostgreSQL has
// the last word (the queue may have been paused since, or hold due work the
// dispatcher has yet to move: see storage.EnqueueOptions.Buffered).
func (l *Lifecycle) bufferDirectly(ctx context.Context, queue string, tasks []storage.NewTask) (ratelimit.Limits, bool) {
	if l.cfg.BufferTarget <= 0 || len(tasks) > maxBufferDirectly ||
		slices.ContainsFunc(tasks, func(t storage.NewTask) bool { return t.ScheduledAt != nil || t.DebounceKey != nil }) {
		return ratelimit.Limits{}, false
	}
	limits, ok, err := l.limits.Get(ctx, queue)
	if err != nil || !ok || limits.Paused {
		return limits, false
	}
	if limits.Fair {
		return limits, l.groupsEmpty(ctx, queue, tasks)
	}
	size, ok := l.sizes.get(queue)
	if !ok {
		sizes, err := l.buf.Sizes(ctx, []string{queue})
		if err != nil {
			return limits, false
		}
		size = int(sizes[queue])
		l.sizes.saw(queue, size)
	}
	return limits, size+len(tasks) <= l.cfg.BufferTarget
}

// groupsEmpty says whether every group of tasks holds nothing in fair queue's
// buffer: a fair queue's enqueue buffers a group's tasks itself only then (and
// PostgreSQL only when the group holds no due pending task either), whatever
// other groups hold, so that another group's backlog never holds a group's first
// tasks back for a dispatcher pass, and a group's buffer grows by at most one
// batch this way (the dispatcher tops it up after that).
func (l *Lifecycle) groupsEmpty(ctx context.Context, queue string, tasks []storage.NewTask) bool {
	var groups []string
	for _, t := range tasks {
		if g := groupOf(t.Group); !slices.Contains(groups, g) {
			groups = append(groups, g)
		}
	}
	sizes, err := l.buf.GroupSizes(ctx, queue, groups)
	if err != nil {
		return false
	}
	for _, g := range groups {
		if sizes[g] > 0 {
			return false
		}
	}
	return true
}

// sizeFresh is how long a buffer size this replica read (or changed) stands in for
// a ZCARD. Other replicas' additions in that time go unseen, so a buffer may exceed
// its target by what they added in a second: the target bounds memory, not
// correctness.
const sizeFresh = time.Second

// bufferSizes remembers the buffer size of each queue as this replica last saw it:
// from a ZCARD, a pop's remainder, plus its own additions since.
type bufferSizes struct {
	mu sync.Mutex
	m  map[string]sizeSeen
}

type sizeSeen struct {
	n  int
	at time.Time
}

// get returns queue's size if seen within sizeFresh.
func (b *bufferSizes) get(queue string) (int, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, ok := b.m[queue]
	if !ok || time.Since(s.at) >= sizeFresh {
		return 0, false
	}
	return s.n, true
}

// saw records that queue's buffer held n ids just now.
func (b *bufferSizes) saw(queue string, n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.m == nil || len(b.m) > 100_000 { // bounded against many short-lived queues
		b.m = map[string]sizeSeen{}
	}
	b.m[queue] = sizeSeen{n: n, at: time.Now()}
}

// added counts n ids this replica added to queue's buffer, keeping the time seen.
func (b *bufferSizes) added(queue string, n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if s, ok := b.m[queue]; ok {
		s.n += n
		b.m[queue] = s
	}
}

// SubmitWorkflow stores workflow w, its steps pending or blocked on their parents,
// under a submit span that continues ctx's trace (the steps' spans join it), and
// reports the steps when it created them (a repeat of an idempotent submission
// creates none and returns the workflow as it is).
func (l *Lifecycle) SubmitWorkflow(ctx context.Context, w storage.NewWorkflow) (storage.SubmittedWorkflow, error) {
	ctx, span := l.tel.StartSpan(ctx, "taskforge.workflow.submit",
		attribute.String("taskforge.workflow_id", w.ID.String()), attribute.Int("taskforge.steps", len(w.Steps)))
	defer span.End()
	w.Traceparent = telemetry.Traceparent(ctx)
	out, err := l.store.SubmitWorkflow(ctx, w)
	if err != nil {
		span.RecordError(err)
		return storage.SubmittedWorkflow{}, fmt.Errorf("submit workflow %s: %w", w.ID, err)
	}
	if !out.Created {
		return out, nil
	}
	l.tel.WorkflowTransition(telemetry.WorkflowChange{WorkflowID: out.Workflow.ID, To: storage.WorkflowRunning})
	var woken []string
	for _, st := range out.Workflow.Steps {
		l.tel.Transition(telemetry.Transition{TaskID: st.TaskID, Queue: *st.Queue, To: *st.Status,
			WorkflowID: out.Workflow.ID, Step: st.Step})
		if *st.Status == storage.StatusPending && !slices.Contains(woken, *st.Queue) {
			woken = append(woken, *st.Queue)
		}
	}
	for _, q := range woken {
		l.enqueued(q)
	}
	return out, nil
}

// enqueued tells this replica's dispatcher of new work in queue when nothing else
// would before its sweep (Config.WakeOnEnqueue).
func (l *Lifecycle) enqueued(queue string) {
	if l.cfg.WakeOnEnqueue {
		l.due(queue)
	}
}
