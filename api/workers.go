package api

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"

	"github.com/taskforge/taskforge/auth"
	"github.com/taskforge/taskforge/client/wire"
	"github.com/taskforge/taskforge/internal/lifecycle"
	"github.com/taskforge/taskforge/internal/view"
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
	// pollAcksBodyLimit bounds a poll that carries acks. Only their results make a
	// poll larger than workerBodyLimit; the Go SDK puts results of at most 16 KiB in
	// a poll, so its 100 acks stay well below. Acks with larger results go through
	// /workers/ack or /workers/ack/batch.
	pollAcksBodyLimit = 2 << 20
)

// pollRequest is the body of a poll (wire.PollRequest). PrefetchTasks says how many
// of its tasks the worker will hold until a slot frees: those come only from
// queues without a concurrency cap, since a task waiting at the worker would hold
// one of the cap's slots without running; the rest of the poll fills free slots
// from any queue. Prefetch (the older form) makes every task of the poll prefetch.
// Acks are acks of this worker's tasks to commit before claiming, saving the
// worker a request per task; a poll carrying acks does not wait for work.
type pollRequest = wire.PollRequest

// pollSpec is what one poll asks for.
type pollSpec struct {
	workerID string
	queues   []string
	maxTasks int
	// prefetchTasks of maxTasks are for the worker to hold until a slot frees:
	// capped queues fill only the first maxTasks-prefetchTasks tasks (free).
	prefetchTasks int
	// acks are the poll's acks of the worker's finished tasks: the first queue
	// claimed from commits them with its claim (lifecycle.ClaimAcking).
	acks []storage.AckItem
}

func validWorkerID(id string) error {
	if id == "" || len(id) > maxWorkerIDLen {
		return invalid("worker_id is required (1 to %d characters)", maxWorkerIDLen)
	}
	return nil
}

func (s *Server) poll(c *gin.Context) {
	var req pollRequest
	size, err := decodeSized(c, pollAcksBodyLimit, &req)
	if err != nil {
		if toAPIError(err).Code == CodePayloadTooLarge {
			err = tooLarge("a poll must be at most %d bytes, or %d with acks; send acks with large results to /workers/ack/batch",
				workerBodyLimit, pollAcksBodyLimit)
		}
		s.fail(c, err)
		return
	}
	if size > workerBodyLimit && len(req.Acks) == 0 {
		// Only acks make a poll this large; the auth middleware reads no further
		// than this limit either.
		s.fail(c, tooLarge("a poll without acks must be at most %d bytes", workerBodyLimit))
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
		if err := s.notPush(c.Request.Context(), q); err != nil {
			s.fail(c, err)
			return
		}
		// The auth middleware checks this too, but only on bodies it could read
		// whole; a poll made large by its acks is checked here.
		if !auth.QueueAllowed(c, q) {
			s.fail(c, &Error{Status: http.StatusForbidden, Code: auth.CodeForbidden, Message: "this token may not poll queue " + strconv.Quote(q)})
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
	prefetchTasks, err := pollPrefetch(req, maxTasks)
	if err != nil {
		s.fail(c, err)
		return
	}
	var acks []storage.AckItem
	if len(req.Acks) > 0 {
		var err error
		if acks, err = s.ackItems(req.WorkerID, req.Acks); err != nil {
			s.fail(c, err)
			return
		}
	}
	s.recordWorker(c.Request.Context(), req.WorkerID, req.Queues)

	if len(acks) > 0 {
		waitMs = 0 // the worker waits for these answers: do not hold them back
	}
	spec := pollSpec{workerID: req.WorkerID, queues: req.Queues, maxTasks: maxTasks, prefetchTasks: prefetchTasks, acks: acks}
	res, err := s.longPoll(c.Request.Context(), spec, time.Duration(waitMs)*time.Millisecond)
	acked := res.acked
	if err != nil && len(res.tasks) == 0 {
		if acked != nil {
			// The acks are committed: say so. The worker's next poll meets the error.
			s.log.Warn("poll failed after its acks were committed", "worker_id", req.WorkerID, "err", err)
			c.JSON(http.StatusOK, wire.PollResponse{Tasks: []wire.PolledTask{}, Acks: acked})
			return
		}
		s.fail(c, err)
		return
	}
	if err != nil {
		// A later queue failed after earlier ones gave tasks: those are claimed for
		// this worker, so they go out; the error is logged here, and the worker's
		// next poll meets it again while it lasts.
		s.log.Warn("poll answered with the tasks it claimed before a queue failed",
			"worker_id", req.WorkerID, "claimed", len(res.tasks), "err", err)
	}
	if len(res.tasks) > 0 && c.Request.Context().Err() != nil {
		// The worker hung up while its tasks were being claimed (a worker stopping
		// mid-poll): nobody will read this answer, so release them at once rather
		// than leave them to wait out their lease.
		s.lc.ReleaseUnread(context.WithoutCancel(c.Request.Context()), req.WorkerID, res.tasks)
		return
	}
	out := make([]wire.PolledTask, len(res.tasks))
	for i, t := range res.tasks {
		out[i] = view.PolledTask(t, s.cfg.HeartbeatInterval.Milliseconds())
	}
	body := wire.PollResponse{Tasks: out, Acks: acked}
	if len(out) == 0 && res.retryAfter > 0 {
		body.RetryAfterMs = res.retryAfter.Milliseconds()
	}
	writePollAnswer(c, body)
}

// pollPrefetch is how many of a poll's maxTasks tasks are prefetch: prefetch_tasks
// (0..max_tasks), or all of them for the older "prefetch": true.
func pollPrefetch(req pollRequest, maxTasks int) (int, error) {
	n := 0
	if req.PrefetchTasks != nil {
		if n = *req.PrefetchTasks; n < 0 || n > maxTasks {
			return 0, invalid("prefetch_tasks must be an integer from 0 to max_tasks (%d)", maxTasks)
		}
	}
	if req.Prefetch {
		if req.PrefetchTasks != nil && n != maxTasks {
			return 0, invalid(`"prefetch": true makes all max_tasks (%d) tasks prefetch; prefetch_tasks %d says otherwise`, maxTasks, n)
		}
		n = maxTasks
	}
	return n, nil
}

// free is how many of the poll's tasks fill free slots: the first ones of the
// answer, the only ones a capped queue may give.
func (p pollSpec) free() int { return p.maxTasks - p.prefetchTasks }

// pollResult is what one poll obtained.
type pollResult struct {
	tasks []storage.Task
	// retryAfter, when positive, is when a rate-limited queue that had work next
	// holds a token.
	retryAfter time.Duration
	// acked are the outcomes of the poll's acks once they committed (nil: they
	// did not, or there were none).
	acked []wire.AckResult
}

// longPoll claims up to maxTasks tasks, waiting up to wait for the first to arrive.
// It returns as soon as it holds any task.
func (s *Server) longPoll(ctx context.Context, p pollSpec, wait time.Duration) (pollResult, error) {
	deadline := time.Now().Add(wait)
	parkOn := p.queues
	if p.free() == 0 {
		// A wake-up for a queue the poll skips would be wasted on it, and another
		// waiter not woken.
		var err error
		if parkOn, err = s.uncapped(ctx, p.queues); err != nil {
			return pollResult{}, err
		}
	}
	for {
		res, err := s.claim(ctx, p)
		if len(res.tasks) > 0 || err != nil || !time.Now().Before(deadline) || len(p.acks) > 0 {
			return res, err // a poll with acks does not wait (poll)
		}
		// Park first, then look again, so a wake-up between the two is not lost.
		w := s.hub.park(parkOn)
		res, err = s.claim(ctx, p)
		if len(res.tasks) > 0 || err != nil {
			s.hub.leave(w)
			return res, err
		}
		nap := min(time.Until(deadline), s.cfg.WakeFallback)
		if res.retryAfter > 0 { // tokens, not wake-ups, are what we wait for
			nap = min(nap, res.retryAfter)
		}
		timer := time.NewTimer(nap)
		select {
		case <-w.ch:
		case <-timer.C:
		case <-ctx.Done():
		case <-s.draining:
		}
		timer.Stop()
		s.hub.leave(w)
		if ctx.Err() != nil || s.isDraining() {
			return pollResult{}, nil // the worker went away, or this replica is stopping
		}
	}
}

// uncapped is the queues among queues that exist and have no concurrency cap. It
// fails when a queue's settings cannot be read: guessing would leave the poll parked
// on too few queues, deaf to their wake-ups.
func (s *Server) uncapped(ctx context.Context, queues []string) ([]string, error) {
	var out []string
	for _, q := range queues {
		l, ok, err := s.limits.Get(ctx, q)
		if err != nil {
			return nil, fmt.Errorf("settings of queue %s: %w", q, err)
		}
		if ok && l.MaxConcurrency == 0 && l.GroupMaxConcurrency == 0 {
			out = append(out, q)
		}
	}
	return out, nil
}

func (s *Server) isDraining() bool {
	select {
	case <-s.draining:
		return true
	default:
		return false
	}
}

// claim takes tasks from the poll's queues in the order given, each within its
// flow-control limits, until it holds maxTasks tasks or has tried every queue. A
// queue that is paused, limited or empty never holds up the next one.
func (s *Server) claim(ctx context.Context, p pollSpec) (pollResult, error) {
	var res pollResult
	acks := p.acks // committed by the first claim, or alone at the end
	for _, q := range p.queues {
		if len(res.tasks) >= p.maxTasks {
			break
		}
		limits, ok, err := s.limits.Get(ctx, q)
		if err != nil {
			return res, fmt.Errorf("settings of queue %s: %w", q, err)
		}
		if !ok {
			continue // unknown queue
		}
		room := p.maxTasks - len(res.tasks)
		if limits.MaxConcurrency > 0 || limits.GroupMaxConcurrency > 0 {
			// A capped queue fills free slots only: a task it gave that waited at
			// the worker would hold one of the cap's slots without running.
			if room = min(room, p.free()-len(res.tasks)); room <= 0 {
				continue
			}
		}
		tasks, acked, retryAfter, err := s.lc.ClaimAcking(ctx, p.workerID, q, limits, room, 0, acks)
		if res.tasks == nil {
			res.tasks = tasks // ours alone: no copy of its tasks
		} else {
			res.tasks = append(res.tasks, tasks...)
		}
		if len(acks) > 0 && acked != nil {
			acks = nil
			var aerr error
			if res.acked, aerr = ackResults(p.acks, acked, false); aerr != nil {
				return res, aerr
			}
		}
		if err != nil {
			return res, err // with acks not committed, nothing was claimed either
		}
		if retryAfter > 0 && (res.retryAfter == 0 || retryAfter < res.retryAfter) {
			res.retryAfter = retryAfter
		}
	}
	if len(acks) > 0 { // no queue to claim from
		var err error
		res.acked, err = s.commitAcks(ctx, p.workerID, acks, false)
		return res, err
	}
	return res, nil
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

// A worker's single reports (heartbeat, ack, nack, release) are decoded into the
// wire types the Go SDK sends (wire.HeartbeatRequest, wire.AckRequest, …); their
// lease fields are then parsed by parseLeaseFields.

// leaseFields is the lease a report names, parsed: set says whether it names one
// (a heartbeat need not).
type leaseFields struct {
	taskID, token uuid.UUID
	set           bool
}

// parseLeaseFields checks the worker id and the lease of r: task_id and
// lease_token go together, as UUIDs, and withTask requires them. Absent and empty
// are alike (the SDK omits them when empty).
func parseLeaseFields(r wire.LeaseRequest, withTask bool) (leaseFields, error) {
	if err := validWorkerID(r.WorkerID); err != nil {
		return leaseFields{}, err
	}
	if (r.TaskID == "") != (r.LeaseToken == "") {
		return leaseFields{}, invalid("task_id and lease_token go together")
	}
	if r.TaskID == "" {
		if withTask {
			return leaseFields{}, invalid("task_id and lease_token are required")
		}
		return leaseFields{}, nil
	}
	id, token, err := parseLease("", r.TaskID, r.LeaseToken)
	if err != nil {
		return leaseFields{}, err
	}
	return leaseFields{taskID: id, token: token, set: true}, nil
}

// maxProgressBytes bounds a heartbeat's progress, as sent.
const maxProgressBytes = 4 << 10

func (s *Server) heartbeat(c *gin.Context) {
	var req wire.HeartbeatRequest
	if err := decode(c, workerBodyLimit, &req); err != nil {
		s.fail(c, err)
		return
	}
	lease, err := parseLeaseFields(req.LeaseRequest, false)
	if err != nil {
		s.fail(c, err)
		return
	}
	if req.Progress != nil && !lease.set {
		s.fail(c, invalid("progress needs task_id and lease_token"))
		return
	}
	if len(req.Progress) > maxProgressBytes {
		s.fail(c, invalid("progress is %d bytes; the limit is %d", len(req.Progress), maxProgressBytes))
		return
	}
	if !lease.set {
		if err := s.store.RecordWorker(c.Request.Context(), req.WorkerID, nil); err != nil {
			s.fail(c, err)
			return
		}
		c.JSON(http.StatusOK, wire.HeartbeatResponse{})
		return
	}
	held, err := s.lc.Heartbeat(c.Request.Context(), req.WorkerID, lease.taskID, lease.token, s.cfg.LeaseTimeout, req.Progress)
	if err != nil {
		s.fail(c, err)
		return
	}
	s.recordWorker(c.Request.Context(), req.WorkerID, nil)
	c.JSON(http.StatusOK, wire.HeartbeatResponse{LeaseExpiresAt: &held.ExpiresAt, CancelRequested: held.CancelRequested})
}

func (s *Server) ack(c *gin.Context) {
	var req wire.AckRequest
	if err := decode(c, s.cfg.MaxPayloadBytes+64<<10, &req); err != nil {
		s.fail(c, err)
		return
	}
	lease, err := parseLeaseFields(req.LeaseRequest, true)
	if err != nil {
		s.fail(c, err)
		return
	}
	if int64(len(req.Result)) > s.cfg.MaxPayloadBytes {
		s.fail(c, tooLarge("result is %d bytes; the limit is %d", len(req.Result), s.cfg.MaxPayloadBytes))
		return
	}
	t, err := s.lc.Ack(c.Request.Context(), storage.AckItem{TaskID: lease.taskID, LeaseToken: lease.token, WorkerID: req.WorkerID, Result: req.Result})
	if err != nil {
		s.fail(c, err)
		return
	}
	c.JSON(http.StatusOK, view.Task(t))
}

// An ack batch's items, and a poll's acks, are wire.AckItem; their outcomes,
// wire.AckResult: the done task (a batch's answer only), or the error the single
// ack would have returned.

// ackBatch acks up to maxPollTasks tasks of one worker in one commit. Each item
// succeeds or fails (lease_lost) on its own; the answer lists them in order.
func (s *Server) ackBatch(c *gin.Context) {
	var req wire.AckBatchRequest
	if err := decode(c, maxPollTasks*(s.cfg.MaxPayloadBytes+1<<10), &req); err != nil {
		s.fail(c, err)
		return
	}
	if err := validWorkerID(req.WorkerID); err != nil {
		s.fail(c, err)
		return
	}
	if len(req.Acks) == 0 {
		s.fail(c, invalid("acks must hold 1 to %d items", maxPollTasks))
		return
	}
	items, err := s.ackItems(req.WorkerID, req.Acks)
	if err != nil {
		s.fail(c, err)
		return
	}
	minimal := prefersMinimal(c)
	results, err := s.commitAcks(c.Request.Context(), req.WorkerID, items, !minimal)
	if err != nil {
		s.fail(c, err)
		return
	}
	if minimal {
		minimalApplied(c)
	}
	c.JSON(http.StatusOK, wire.AckBatchResponse{Results: results})
}

// ackItems checks the acks of a batch or a poll (at most maxPollTasks).
func (s *Server) ackItems(workerID string, acks []wire.AckItem) ([]storage.AckItem, error) {
	if len(acks) > maxPollTasks {
		return nil, invalid("acks must hold 1 to %d items", maxPollTasks)
	}
	items := make([]storage.AckItem, len(acks))
	for i, a := range acks {
		id, token, err := parseLease(fmt.Sprintf("acks[%d]", i), a.TaskID, a.LeaseToken)
		if err != nil {
			return nil, err
		}
		if int64(len(a.Result)) > s.cfg.MaxPayloadBytes {
			return nil, tooLarge("acks[%d]: result is %d bytes; the limit is %d", i, len(a.Result), s.cfg.MaxPayloadBytes)
		}
		items[i] = storage.AckItem{TaskID: id, LeaseToken: token, WorkerID: workerID, Result: a.Result}
	}
	return items, nil
}

// commitAcks acks items in one (group) commit of the lifecycle. Each item succeeds or fails
// (lease_lost) on its own; an error means the commit itself failed: nothing was
// acked, or, when it timed out, nobody knows. withTasks puts each done task in its
// result.
func (s *Server) commitAcks(ctx context.Context, workerID string, items []storage.AckItem, withTasks bool) ([]wire.AckResult, error) {
	outcomes, err := s.lc.AckMany(ctx, workerID, items, withTasks)
	if err != nil {
		return nil, err
	}
	return ackResults(items, outcomes, withTasks)
}

// ackResults are the answers to items, given their outcomes (with the tasks when
// withTasks), or the error of an outcome that failed other than by a lost lease.
func ackResults(items []storage.AckItem, outcomes []lifecycle.AckOutcome, withTasks bool) ([]wire.AckResult, error) {
	results := make([]wire.AckResult, len(outcomes))
	for i, o := range outcomes {
		results[i].TaskID = items[i].TaskID.String()
		if o.Err != nil {
			apiErr := toAPIError(o.Err)
			if apiErr.Status >= 500 {
				return nil, o.Err
			}
			results[i].Error = &errorDetail{Code: apiErr.Code, Message: apiErr.Message}
			continue
		}
		if withTasks {
			t := view.Task(o.Task)
			results[i].Task = &t
		}
	}
	return results, nil
}

const maxErrorLen = 64 << 10

// decodeReport reads a nack or release into req (a wire.NackRequest or
// wire.ReleaseRequest), whose lease fields are *lease and whose text of at most
// maxErrorLen bytes, named field, is *text, and returns the lease it names. It
// answers 400 itself and returns false on bad input.
func (s *Server) decodeReport(c *gin.Context, req any, lease *wire.LeaseRequest, text *string, field string) (leaseFields, bool) {
	var parsed leaseFields
	err := decode(c, workerBodyLimit+maxErrorLen, req)
	if err == nil {
		parsed, err = parseLeaseFields(*lease, true)
	}
	if err == nil && len(*text) > maxErrorLen {
		err = invalid("%s must be at most %d bytes", field, maxErrorLen)
	}
	if err != nil {
		s.fail(c, err)
		return leaseFields{}, false
	}
	return parsed, true
}

func (s *Server) nack(c *gin.Context) {
	var req wire.NackRequest
	lease, ok := s.decodeReport(c, &req, &req.LeaseRequest, &req.Error, "error")
	if !ok {
		return
	}
	const yearMs = 365 * 24 * 3600 * 1000
	if req.RetryAfterMs != nil && (*req.RetryAfterMs < 0 || *req.RetryAfterMs > yearMs) {
		s.fail(c, invalid("retry_after_ms must be an integer from 0 to %d", int64(yearMs)))
		return
	}
	n := storage.Nack{TaskID: lease.taskID, LeaseToken: lease.token, WorkerID: req.WorkerID,
		Error: req.Error, Retryable: req.Retryable == nil || *req.Retryable, RetryAfterMs: req.RetryAfterMs}
	t, err := s.lc.Nack(c.Request.Context(), n)
	if err != nil {
		s.fail(c, err)
		return
	}
	c.JSON(http.StatusOK, view.Task(t))
}

// maxReleaseDelayMs bounds a snooze: one day.
const maxReleaseDelayMs = 24 * 3600 * 1000

// release hands a task back from a stopping worker, or snoozes it (delay_ms): the
// attempt ends released and the task goes back in line, after the delay when one is
// given, without spending its retry budget.
func (s *Server) release(c *gin.Context) {
	var req wire.ReleaseRequest
	lease, ok := s.decodeReport(c, &req, &req.LeaseRequest, &req.Reason, "reason")
	if !ok {
		return
	}
	if req.DelayMs != nil && (*req.DelayMs < 0 || *req.DelayMs > maxReleaseDelayMs) {
		s.fail(c, invalid("delay_ms must be an integer from 0 to %d", int64(maxReleaseDelayMs)))
		return
	}
	t, err := s.lc.Release(c.Request.Context(), storage.Release{TaskID: lease.taskID, LeaseToken: lease.token,
		WorkerID: req.WorkerID, Reason: req.Reason, DelayMs: req.DelayMs})
	if err != nil {
		s.fail(c, err)
		return
	}
	c.JSON(http.StatusOK, view.Task(t))
}

func (s *Server) listWorkers(c *gin.Context) {
	ws, err := s.store.ListWorkers(c.Request.Context(), 3*s.cfg.HeartbeatInterval)
	if err != nil {
		s.fail(c, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"workers": ws})
}
