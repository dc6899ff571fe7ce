package api

import (
	"github.com/taskforge/taskforge/internal/view"

	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"

	"github.com/taskforge/taskforge/client/wire"
	"github.com/taskforge/taskforge/storage"
	"github.com/taskforge/taskforge/telemetry"
)

// MaxBatch is the most tasks one batch enqueue may carry.
const MaxBatch = 1000

// enqueueRequest is the body of POST /queues/:name/tasks and one element of a batch.
type enqueueRequest struct {
	Payload        json.RawMessage `json:"payload"`
	Priority       *int            `json:"priority"`
	ScheduledAt    *time.Time      `json:"scheduled_at"`
	MaxRetries     *int            `json:"max_retries"`
	TimeoutSeconds *int            `json:"timeout_seconds"`
	IdempotencyKey *string         `json:"idempotency_key"`
	DebounceKey    *string         `json:"debounce_key"`
	DebounceMs     *int64          `json:"debounce_ms"`
	DebounceMaxMs  *int64          `json:"debounce_max_ms"`
	Group          *string         `json:"group"`
}

// Debounce bounds: the quiet period is at most a day, the cap at most 30 days.
const (
	maxDebounceMs    = 86_400_000
	maxDebounceMaxMs = 30 * maxDebounceMs
)

type batchRequest struct {
	Tasks []enqueueRequest `json:"tasks"`
}

// toNewTask validates r and returns the task to insert.
func (s *Server) toNewTask(queue string, r enqueueRequest) (storage.NewTask, error) {
	if len(r.Payload) == 0 {
		return storage.NewTask{}, invalid("payload is required (any JSON value)")
	}
	if int64(len(r.Payload)) > s.cfg.MaxPayloadBytes {
		return storage.NewTask{}, tooLarge("payload is %d bytes; the limit is %d", len(r.Payload), s.cfg.MaxPayloadBytes)
	}
	t := storage.NewTask{Payload: r.Payload, Priority: 5, ScheduledAt: r.ScheduledAt,
		MaxRetries: r.MaxRetries, TimeoutSeconds: r.TimeoutSeconds, IdempotencyKey: r.IdempotencyKey}
	if r.Priority != nil {
		if *r.Priority < 1 || *r.Priority > 10 {
			return t, invalid("priority must be an integer from 1 (highest) to 10 (lowest)")
		}
		t.Priority = *r.Priority
	}
	if r.MaxRetries != nil && (*r.MaxRetries < 0 || *r.MaxRetries > 100) {
		return t, invalid("max_retries must be an integer from 0 to 100")
	}
	if r.TimeoutSeconds != nil && (*r.TimeoutSeconds < 1 || *r.TimeoutSeconds > 7*24*3600) {
		return t, invalid("timeout_seconds must be an integer from 1 to %d", 7*24*3600)
	}
	if r.ScheduledAt != nil {
		if r.ScheduledAt.Year() < 2000 || r.ScheduledAt.Year() > 9999 {
			return t, invalid("scheduled_at must be an RFC 3339 time between the years 2000 and 9999")
		}
		utc := r.ScheduledAt.UTC()
		t.ScheduledAt = &utc
	}
	if err := debounce(&t, r); err != nil {
		return t, err
	}
	if r.Group != nil {
		if !storage.ValidGroupName(*r.Group) {
			return t, invalid("group must be 1 to %d characters of A-Z, a-z, 0-9 and . _ : @ -, or null", storage.MaxGroupLen)
		}
		t.Group = r.Group
	}
	if r.IdempotencyKey != nil {
		if k := *r.IdempotencyKey; k == "" || len(k) > 255 {
			return t, invalid("idempotency_key must be 1 to 255 characters")
		}
		fp, err := fingerprint(queue, t)
		if err != nil {
			return t, err
		}
		t.Fingerprint = fp
	}
	id, err := uuid.NewV7()
	if err != nil {
		return t, fmt.Errorf("new task id: %w", err)
	}
	t.ID = id
	return t, nil
}

// debounce validates r's debounce fields and sets them on t: a key (1..255
// characters) goes with debounce_ms (1..86,400,000) and optionally debounce_max_ms
// (debounce_ms..30 days), and with neither an idempotency key nor a scheduled_at
// (the debounce decides when the task is due).
func debounce(t *storage.NewTask, r enqueueRequest) error {
	if r.DebounceKey == nil {
		if r.DebounceMs != nil || r.DebounceMaxMs != nil {
			return invalid("debounce_ms and debounce_max_ms go with a debounce_key")
		}
		return nil
	}
	switch k := *r.DebounceKey; {
	case k == "" || len(k) > 255:
		return invalid("debounce_key must be 1 to 255 characters")
	case r.DebounceMs == nil:
		return invalid("debounce_key needs debounce_ms, the quiet period in milliseconds")
	case *r.DebounceMs < 1 || *r.DebounceMs > maxDebounceMs:
		return invalid("debounce_ms must be an integer from 1 to %d", maxDebounceMs)
	case r.DebounceMaxMs != nil && (*r.DebounceMaxMs < *r.DebounceMs || *r.DebounceMaxMs > maxDebounceMaxMs):
		return invalid("debounce_max_ms must be an integer from debounce_ms (%d) to %d", *r.DebounceMs, maxDebounceMaxMs)
	case r.IdempotencyKey != nil:
		return invalid("debounce_key and idempotency_key exclude each other: a debounce replaces the waiting task, an idempotency key keeps it")
	case r.ScheduledAt != nil:
		return invalid("debounce_key and scheduled_at exclude each other: the task is due debounce_ms after the last enqueue")
	}
	t.DebounceKey, t.DebounceMs, t.DebounceMaxMs = r.DebounceKey, *r.DebounceMs, r.DebounceMaxMs
	return nil
}

// fingerprint is the SHA-256 of the canonical request: queue, payload (keys sorted,
// numbers as written), priority, schedule, budget and group (left out when null, so
// that a request without one hashes as before groups existed). Two requests with one key are
// "the same" exactly when their fingerprints match.
func fingerprint(queue string, t storage.NewTask) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(t.Payload))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, invalid("payload: %v", err)
	}
	canonical := struct {
		Queue          string     `json:"queue"`
		Payload        any        `json:"payload"`
		Priority       int        `json:"priority"`
		ScheduledAt    *time.Time `json:"scheduled_at"`
		MaxRetries     *int       `json:"max_retries"`
		TimeoutSeconds *int       `json:"timeout_seconds"`
		Group          *string    `json:"group,omitempty"`
	}{queue, v, t.Priority, t.ScheduledAt, t.MaxRetries, t.TimeoutSeconds, t.Group}
	b, err := json.Marshal(canonical)
	if err != nil {
		return nil, fmt.Errorf("fingerprint: %w", err)
	}
	sum := sha256.Sum256(b)
	return sum[:], nil
}

func (s *Server) enqueue(c *gin.Context) {
	queue := c.Param("name")
	var req enqueueRequest
	if err := decode(c, s.cfg.MaxPayloadBytes+64<<10, &req); err != nil {
		s.fail(c, err)
		return
	}
	if header := c.GetHeader("Idempotency-Key"); header != "" {
		if req.IdempotencyKey != nil && *req.IdempotencyKey != header {
			s.fail(c, invalid("the Idempotency-Key header and idempotency_key field differ"))
			return
		}
		req.IdempotencyKey = &header
	}
	t, err := s.toNewTask(queue, req)
	if err != nil {
		s.fail(c, err)
		return
	}
	out, err := s.insert(c, queue, []storage.NewTask{t}, false)
	if err != nil {
		s.fail(c, err)
		return
	}
	status := http.StatusCreated
	if !out[0].Created { // an idempotent repeat, or a debounce that replaced the waiting task
		status = http.StatusOK
	}
	c.JSON(status, view.Task(out[0].Task))
}

func (s *Server) enqueueBatch(c *gin.Context) {
	queue := c.Param("name")
	var req batchRequest
	if err := decode(c, 32*(s.cfg.MaxPayloadBytes+4<<10), &req); err != nil {
		s.fail(c, err)
		return
	}
	if len(req.Tasks) == 0 || len(req.Tasks) > MaxBatch {
		s.fail(c, invalid("tasks must hold 1 to %d tasks", MaxBatch))
		return
	}
	tasks := make([]storage.NewTask, len(req.Tasks))
	for i, r := range req.Tasks {
		t, err := s.toNewTask(queue, r)
		if err != nil {
			if apiErr, ok := err.(*Error); ok {
				err = &Error{Status: apiErr.Status, Code: apiErr.Code, Message: fmt.Sprintf("tasks[%d]: %s", i, apiErr.Message)}
			}
			s.fail(c, err)
			return
		}
		tasks[i] = t
	}
	minimal := prefersMinimal(c)
	out, err := s.insert(c, queue, tasks, minimal)
	if err != nil {
		s.fail(c, err)
		return
	}
	if minimal {
		minimalApplied(c)
		c.Data(http.StatusCreated, "application/json; charset=utf-8", minimalBatchBody(out))
		return
	}
	views := make([]wire.Task, len(out))
	for i, e := range out {
		views[i] = view.Task(e.Task)
	}
	c.JSON(http.StatusCreated, gin.H{"tasks": views})
}

// minimalBatchBody is the JSON of wire.EnqueueBatchMinimalResponse holding out's
// ids, byte for byte what encoding/json writes (TestMinimalBatchBody), written
// directly: a UUID's text needs no escaping, and encoding 1,000 refs by reflection
// was a fourteenth of serve's CPU in a preload.
func minimalBatchBody(out []storage.Enqueued) []byte {
	const ref = len(`{"id":""},`) + 36
	b := make([]byte, 0, len(`{"tasks":[]}`)+len(out)*ref)
	b = append(b, `{"tasks":[`...)
	for i := range out {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"id":"`...)
		id := out[i].Task.ID // its canonical text, as uuid.UUID.String writes it
		b = hex.AppendEncode(b, id[0:4])
		for _, part := range [][]byte{id[4:6], id[6:8], id[8:10], id[10:16]} {
			b = hex.AppendEncode(append(b, '-'), part)
		}
		b = append(b, `"}`...)
	}
	return append(b, `]}`...)
}

// insert enqueues tasks through the lifecycle, under a span that joins the
// producer's trace (the request's traceparent header). With refs, only the ids of
// the tasks created are sure to be filled in.
func (s *Server) insert(c *gin.Context, queue string, tasks []storage.NewTask, refs bool) ([]storage.Enqueued, error) {
	ctx := telemetry.FromHeader(c.Request.Context(), c.GetHeader("traceparent"))
	return s.lc.Enqueue(ctx, queue, tasks, !refs)
}

func (s *Server) getTask(c *gin.Context) {
	id, err := taskID(c.Param("id"))
	if err != nil {
		s.fail(c, err)
		return
	}
	wait, err := taskWait(c)
	if err != nil {
		s.fail(c, err)
		return
	}
	s.awaitTask(c, c.Param("name"), id, wait)
}

// taskID parses a task id from a path; an id that is not a UUID names no task.
func taskID(raw string) (uuid.UUID, error) {
	id, err := uuid.Parse(raw)
	if err != nil {
		return uuid.Nil, &Error{Status: http.StatusNotFound, Code: CodeTaskNotFound, Message: "task ids are UUIDs; no task " + strconv.Quote(raw)}
	}
	return id, nil
}

// pageLimit reads the limit query parameter: 1..500, default 100.
func pageLimit(c *gin.Context) (int, error) {
	raw := c.Query("limit")
	if raw == "" {
		return 100, nil
	}
	n, err := strconv.Atoi(raw)
	if err != nil || n < 1 || n > 500 {
		return 0, invalid("limit must be an integer from 1 to 500")
	}
	return n, nil
}

// page reads a list's limit and cursor query parameters.
func page(c *gin.Context) (int, *storage.Cursor, error) {
	limit, err := pageLimit(c)
	if err != nil {
		return 0, nil, err
	}
	after, err := decodeCursor(c.Query("cursor"))
	if err != nil {
		return 0, nil, err
	}
	return limit, after, nil
}

// decodeCursor is view.DecodeCursor with its error as a 400.
func decodeCursor(raw string) (*storage.Cursor, error) {
	cur, err := view.DecodeCursor(raw)
	if err != nil {
		return nil, invalid("%v", err)
	}
	return cur, nil
}

// queryTime is view.ParseTime of c's query parameter name, its error a 400.
func queryTime(c *gin.Context, name string) (*time.Time, error) {
	t, err := view.ParseTime(name, c.Query(name))
	if err != nil {
		return nil, invalid("%v", err)
	}
	return t, nil
}

func (s *Server) listTasks(c *gin.Context) {
	queue := c.Param("name")
	f := storage.TaskFilter{Queue: queue, Status: c.Query("status"), WorkerID: c.Query("worker_id"),
		Group: c.Query("group")}
	var err error
	if _, set := c.GetQuery("group"); set && !storage.ValidGroupName(f.Group) {
		s.fail(c, invalid("group must be 1 to %d characters of A-Z, a-z, 0-9 and . _ : @ -", storage.MaxGroupLen))
		return
	}
	if f.Status != "" && !validStatus(f.Status) {
		s.fail(c, invalid("status must be one of %s", strings.Join(storage.Statuses, ", ")))
		return
	}
	if f.Limit, err = pageLimit(c); err != nil {
		s.fail(c, err)
		return
	}
	if f.CreatedAfter, err = queryTime(c, "created_after"); err != nil {
		s.fail(c, err)
		return
	}
	if f.CreatedBefore, err = queryTime(c, "created_before"); err != nil {
		s.fail(c, err)
		return
	}
	if f.After, err = decodeCursor(c.Query("cursor")); err != nil {
		s.fail(c, err)
		return
	}
	if ok, err := s.store.QueueExists(c.Request.Context(), queue); err != nil || !ok {
		s.fail(c, cmpErr(err, storage.ErrQueueNotFound))
		return
	}
	tasks, next, err := s.store.ListTasks(c.Request.Context(), f)
	if err != nil {
		s.fail(c, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"tasks": view.Tasks(tasks), "next_cursor": view.EncodeCursor(next)})
}

// cmpErr returns err when set, else fallback.
func cmpErr(err, fallback error) error {
	if err != nil {
		return err
	}
	return fallback
}

func validStatus(s string) bool {
	for _, st := range storage.Statuses {
		if s == st {
			return true
		}
	}
	return false
}

func (s *Server) cancelTask(c *gin.Context) {
	id, err := taskID(c.Param("id"))
	if err != nil {
		s.fail(c, err)
		return
	}
	queue := c.Param("name")
	t, err := s.lc.Cancel(c.Request.Context(), queue, id)
	if err != nil {
		s.fail(c, err)
		return
	}
	if t.Status == storage.StatusExecuting {
		c.JSON(http.StatusAccepted, view.Task(t.Task)) // the worker hears of it on its next heartbeat
		return
	}
	c.JSON(http.StatusOK, view.Task(t.Task))
}
