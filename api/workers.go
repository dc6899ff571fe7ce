package api

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"

	"github.com/taskforge/taskforge/storage"
)

const (
	workerBodyLimit = 64 << 10
	maxWorkerIDLen  = 200
	maxPollQueues   = 50
	maxPollTasks    = 100
	maxWaitMs       = 30000
	// workerRecordEvery throttles how often one replica records a polling worker as alive.
	workerRecordEvery = time.Second
)

type pollRequest struct {
	WorkerID string   `json:"worker_id"`
	Queues   []string `json:"queues"`
	MaxTasks *int     `json:"max_tasks"`
	WaitMs   *int     `json:"wait_ms"`
}

// polledTask is a task as a worker receives it.
type polledTask struct {
	ID                  uuid.UUID       `json:"id"`
	Queue               string          `json:"queue"`
	Payload             json.RawMessage `json:"payload"`
	Priority            int             `json:"priority"`
	Attempt             int             `json:"attempt"`
	LeaseToken          uuid.UUID       `json:"lease_token"`
	LeaseExpiresAt      time.Time       `json:"lease_expires_at"`
	HeartbeatIntervalMs int64           `json:"heartbeat_interval_ms"`
	TimeoutSeconds      *int            `json:"timeout_seconds"`
}

func validWorkerID(id string) error {
	if id == "" || len(id) > maxWorkerIDLen {
		return invalid("worker_id is required (1 to %d characters)", maxWorkerIDLen)
	}
	return nil
}

func (s *Server) poll(c *gin.Context) {
	var req pollRequest
	if err := decode(c, workerBodyLimit, &req); err != nil {
		s.fail(c, err)
		return
	}
	if err := validWorkerID(req.WorkerID); err != nil {
		s.fail(c, err)
		return
	}
	if len(req.Queues) == 0 || len(req.Queues) > maxPollQueues {
		s.fail(c, invalid("queues must list 1 to %d queue names", maxPollQueues))
		return
	}
	for _, q := range req.Queues {
		if !queueNamePattern.MatchString(q) {
			s.fail(c, invalid("queue name %q is not valid", q))
			return
		}
	}
	maxTasks, waitMs := 1, 0
	if req.MaxTasks != nil {
		if maxTasks = *req.MaxTasks; maxTasks < 1 || maxTasks > maxPollTasks {
			s.fail(c, invalid("max_tasks must be an integer from 1 to %d", maxPollTasks))
			return
		}
	}
	if req.WaitMs != nil {
		if waitMs = *req.WaitMs; waitMs < 0 || waitMs > maxWaitMs {
			s.fail(c, invalid("wait_ms must be an integer from 0 to %d", maxWaitMs))
			return
		}
	}
	s.recordWorker(c, req.WorkerID, req.Queues)

	tasks, err := s.longPoll(c, req.WorkerID, req.Queues, maxTasks, time.Duration(waitMs)*time.Millisecond)
	if err != nil && len(tasks) == 0 {
		s.fail(c, err)
		return
	}
	out := make([]polledTask, len(tasks))
	for i, t := range tasks {
		out[i] = polledTask{ID: t.ID, Queue: t.Queue, Payload: t.Payload, Priority: t.Priority,
			Attempt: t.Attempts, LeaseToken: *t.LeaseToken, LeaseExpiresAt: *t.LeaseExpiresAt,
			HeartbeatIntervalMs: s.cfg.HeartbeatInterval.Milliseconds(), TimeoutSeconds: t.TimeoutSeconds}
	}
	c.JSON(http.StatusOK, gin.H{"tasks": out})
}

// longPoll claims up to maxTasks tasks, waiting up to wait for the first to arrive.
// It returns as soon as it holds any task.
func (s *Server) longPoll(ctx context.Context, workerID string, queues []string, maxTasks int, wait time.Duration) ([]storage.Task, error) {
	deadline := time.Now().Add(wait)
	for {
		tasks, err := s.claim(ctx, workerID, queues, maxTasks)
		if len(tasks) > 0 || err != nil || time.Now().After(deadline) {
			return tasks, err
		}
		// Park first, then look again, so a wake-up between the two is not lost.
		w := s.hub.park(queues)
		tasks, err = s.claim(ctx, workerID, queues, maxTasks)
		if len(tasks) > 0 || err != nil {
			s.hub.leave(w)
			return tasks, err
		}
		timer := time.NewTimer(min(time.Until(deadline), s.cfg.WakeFallback))
		select {
		case <-w.ch:
		case <-timer.C:
		case <-ctx.Done():
		case <-s.draining:
		}
		timer.Stop()
		s.hub.leave(w)
		if ctx.Err() != nil || s.isDraining() {
			return nil, nil // the worker went away, or this replica is stopping
		}
	}
}

func (s *Server) isDraining() bool {
	select {
	case <-s.draining:
		return true
	default:
		return false
	}
}

// claim pops ids from queues in the order given and claims them in PostgreSQL,
// until it holds maxTasks tasks or the buffers are empty.
func (s *Server) claim(ctx context.Context, workerID string, queues []string, maxTasks int) ([]storage.Task, error) {
	var out []storage.Task
	for _, q := range queues {
		for len(out) < maxTasks {
			entries, err := s.buf.Pop(ctx, q, maxTasks-len(out))
			if err != nil {
				return out, err
			}
			if len(entries) == 0 {
				break
			}
			ids := make([]uuid.UUID, len(entries))
			for i, e := range entries {
				ids[i] = e.ID
			}
			claimed, err := s.store.ClaimTasks(context.WithoutCancel(ctx), ids, workerID, s.cfg.LeaseTimeout)
			if err != nil {
				// Not claimed: give the ids back rather than wait for the repair pass.
				if perr := s.buf.Putback(context.WithoutCancel(ctx), q, entries); perr != nil {
					s.log.Warn("popped ids not returned to buffer; repair will re-add them", "queue", q, "err", perr)
				}
				return out, err
			}
			out = append(out, claimed...)
			// Ids that did not claim were stale (cancelled, or taken elsewhere): dropped.
		}
		if len(out) >= maxTasks {
			break
		}
	}
	return out, nil
}

// recordWorker notes the worker as alive, at most once a second per replica.
func (s *Server) recordWorker(ctx context.Context, workerID string, queues []string) {
	now := time.Now()
	s.seenMu.Lock()
	last, ok := s.seen[workerID]
	if ok && now.Sub(last) < workerRecordEvery {
		s.seenMu.Unlock()
		return
	}
	s.seen[workerID] = now
	if len(s.seen) > 100_000 { // bound memory against many short-lived worker ids
		clear(s.seen)
	}
	s.seenMu.Unlock()
	if err := s.store.RecordWorker(ctx, workerID, queues); err != nil {
		s.log.Warn("could not record worker", "worker_id", workerID, "err", err)
	}
}

type leaseRequest struct {
	WorkerID   string     `json:"worker_id"`
	TaskID     *uuid.UUID `json:"task_id"`
	LeaseToken *uuid.UUID `json:"lease_token"`
}

// validate checks the lease fields; withTask requires task_id and lease_token.
func (r leaseRequest) validate(withTask bool) error {
	if err := validWorkerID(r.WorkerID); err != nil {
		return err
	}
	if (r.TaskID == nil) != (r.LeaseToken == nil) {
		return invalid("task_id and lease_token go together")
	}
	if withTask && r.TaskID == nil {
		return invalid("task_id and lease_token are required")
	}
	return nil
}

func (s *Server) heartbeat(c *gin.Context) {
	var req leaseRequest
	if err := decode(c, workerBodyLimit, &req); err != nil {
		s.fail(c, err)
		return
	}
	if err := req.validate(false); err != nil {
		s.fail(c, err)
		return
	}
	if req.TaskID == nil {
		if err := s.store.RecordWorker(c, req.WorkerID, nil); err != nil {
			s.fail(c, err)
			return
		}
		c.JSON(http.StatusOK, gin.H{"lease_expires_at": nil, "cancel_requested": false})
		return
	}
	lease, err := s.store.Heartbeat(c, req.WorkerID, *req.TaskID, *req.LeaseToken, s.cfg.LeaseTimeout)
	if err != nil {
		s.fail(c, err)
		return
	}
	s.recordWorker(c, req.WorkerID, nil)
	c.JSON(http.StatusOK, gin.H{"lease_expires_at": lease.ExpiresAt, "cancel_requested": lease.CancelRequested})
}

type ackRequest struct {
	leaseRequest
	Result json.RawMessage `json:"result"`
}

func (s *Server) ack(c *gin.Context) {
	var req ackRequest
	if err := decode(c, s.cfg.MaxPayloadBytes+64<<10, &req); err != nil {
		s.fail(c, err)
		return
	}
	if err := req.validate(true); err != nil {
		s.fail(c, err)
		return
	}
	if int64(len(req.Result)) > s.cfg.MaxPayloadBytes {
		s.fail(c, tooLarge("result is %d bytes; the limit is %d", len(req.Result), s.cfg.MaxPayloadBytes))
		return
	}
	t, err := s.store.Ack(c, req.WorkerID, *req.TaskID, *req.LeaseToken, req.Result)
	if err != nil {
		s.fail(c, err)
		return
	}
	c.JSON(http.StatusOK, t)
}

type nackRequest struct {
	leaseRequest
	Error        string `json:"error"`
	Retryable    *bool  `json:"retryable"`
	RetryAfterMs *int64 `json:"retry_after_ms"`
}

const maxErrorLen = 64 << 10

func (s *Server) nack(c *gin.Context) {
	var req nackRequest
	if err := decode(c, workerBodyLimit+maxErrorLen, &req); err != nil {
		s.fail(c, err)
		return
	}
	if err := req.validate(true); err != nil {
		s.fail(c, err)
		return
	}
	if len(req.Error) > maxErrorLen {
		s.fail(c, invalid("error must be at most %d bytes", maxErrorLen))
		return
	}
	const yearMs = 365 * 24 * 3600 * 1000
	if req.RetryAfterMs != nil && (*req.RetryAfterMs < 0 || *req.RetryAfterMs > yearMs) {
		s.fail(c, invalid("retry_after_ms must be an integer from 0 to %d", int64(yearMs)))
		return
	}
	n := storage.Nack{TaskID: *req.TaskID, LeaseToken: *req.LeaseToken, WorkerID: req.WorkerID,
		Error: req.Error, Retryable: req.Retryable == nil || *req.Retryable, RetryAfterMs: req.RetryAfterMs}
	t, err := s.store.Nack(c, n)
	if err != nil {
		s.fail(c, err)
		return
	}
	if t.Status == storage.StatusRetry && !t.ScheduledAt.After(t.UpdatedAt) && s.OnDue != nil {
		s.OnDue(t.Queue) // retry without delay: dispatch it now, not on the next tick
	}
	c.JSON(http.StatusOK, t)
}

func (s *Server) listWorkers(c *gin.Context) {
	ws, err := s.store.ListWorkers(c, 3*s.cfg.HeartbeatInterval)
	if err != nil {
		s.fail(c, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"workers": ws})
}
