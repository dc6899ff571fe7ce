package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"regexp"

	"github.com/gin-gonic/gin"

	"github.com/taskforge/taskforge/auth"
	"github.com/taskforge/taskforge/storage"
)

var queueNamePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// queueBodyLimit bounds a queue request body.
const queueBodyLimit = 64 << 10

// queueSettings are the fields of a queue that POST and PATCH may set.
type queueSettings struct {
	MaxRetries     Nullable[int]     `json:"max_retries"`
	RateLimit      Nullable[float64] `json:"rate_limit"`
	RateBurst      Nullable[int]     `json:"rate_burst"`
	MaxConcurrency Nullable[int]     `json:"max_concurrency"`
	BackoffBaseMs  Nullable[int64]   `json:"backoff_base_ms"`
	BackoffMaxMs   Nullable[int64]   `json:"backoff_max_ms"`
	Paused         Nullable[bool]    `json:"paused"`
	PriorityAging  Nullable[int64]   `json:"priority_aging_ms"`
	// Push sets the push target (push.go); null makes the queue a pull queue again.
	Push Nullable[pushSettings] `json:"push"`
	// Retention changes the ages given (null = keep forever) and keeps the others;
	// null sets every age back to serve's default.
	Retention Nullable[retentionSettings] `json:"retention"`
	// IdempotencyWindow is how long a key stays reserved after its task's
	// creation, even once the task is deleted.
	IdempotencyWindow Nullable[int64] `json:"idempotency_window_ms"`
	// Fairness is null (one line) or "round_robin" (groups take turns); the group
	// limits apply to every group of the queue that has no override of its own.
	Fairness            Nullable[string]  `json:"fairness"`
	GroupMaxConcurrency Nullable[int]     `json:"group_max_concurrency"`
	GroupRateLimit      Nullable[float64] `json:"group_rate_limit"`
	GroupRateBurst      Nullable[int]     `json:"group_rate_burst"`
}

// maxIdempotencyWindowMs is the longest idempotency window: 30 days.
const maxIdempotencyWindowMs = 30 * 24 * 3600 * 1000

// retentionSettings are the ages a request's "retention" object sets, each in
// milliseconds or null for forever; a key left out is not changed.
type retentionSettings struct {
	DoneMs      Nullable[int64] `json:"done_ms"`
	CancelledMs Nullable[int64] `json:"cancelled_ms"`
	DeadMs      Nullable[int64] `json:"dead_ms"`
}

// UnmarshalJSON rejects unknown fields, as every request body does.
func (r *retentionSettings) UnmarshalJSON(b []byte) error {
	type plain retentionSettings
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var v plain
	if err := dec.Decode(&v); err != nil {
		return fmt.Errorf("retention: %w", err)
	}
	*r = retentionSettings(v)
	return nil
}

// applyRetention validates the ages r sets and writes them into q's own retention.
func applyRetention(r Nullable[retentionSettings], q *storage.Queue) error {
	if !r.Valid {
		q.RetentionSet = storage.RetentionSettings{} // serve's defaults again
		return nil
	}
	set := make(storage.RetentionSettings, len(storage.RetentionKeys))
	for k, v := range q.RetentionSet {
		set[k] = v
	}
	lo, hi := storage.MinRetention.Milliseconds(), storage.MaxRetention.Milliseconds()
	for _, age := range []struct {
		key string
		n   Nullable[int64]
	}{{"done_ms", r.Value.DoneMs}, {"cancelled_ms", r.Value.CancelledMs}, {"dead_ms", r.Value.DeadMs}} {
		if !age.n.Set {
			continue
		}
		if age.n.Valid && (age.n.Value < lo || age.n.Value > hi) {
			return invalid("retention.%s must be an integer from %d (one minute) to %d, or null to keep forever", age.key, lo, hi)
		}
		set[age.key] = age.n.Ptr()
	}
	q.RetentionSet = set
	return nil
}

type createQueueRequest struct {
	Name string `json:"name"`
	queueSettings
}

// apply validates the settings present and writes them into q.
func (qs queueSettings) apply(q *storage.Queue) error {
	if qs.MaxRetries.Set {
		if !qs.MaxRetries.Valid || qs.MaxRetries.Value < 0 || qs.MaxRetries.Value > 100 {
			return invalid("max_retries must be an integer from 0 to 100")
		}
		q.MaxRetries = qs.MaxRetries.Value
	}
	if qs.RateLimit.Set {
		// At least 1e-6/s (one task per ~12 days): the pop script's bucket expiry,
		// burst/rate in ms, must fit in a Redis integer.
		if qs.RateLimit.Valid && !(qs.RateLimit.Value >= 1e-6 && qs.RateLimit.Value <= 1e6) {
			return invalid("rate_limit must be a number of tasks per second from 0.000001 to 1000000, or null for unlimited")
		}
		q.RateLimit = qs.RateLimit.Ptr()
	}
	if qs.RateBurst.Set {
		if qs.RateBurst.Valid && (qs.RateBurst.Value < 1 || qs.RateBurst.Value > 1e6) {
			return invalid("rate_burst must be an integer from 1 to 1000000, or null for the default ceil(rate_limit)")
		}
		q.RateBurst = qs.RateBurst.Ptr()
	}
	if qs.MaxConcurrency.Set {
		if qs.MaxConcurrency.Valid && qs.MaxConcurrency.Value < 1 {
			return invalid("max_concurrency must be an integer of at least 1, or null for unlimited")
		}
		q.MaxConcurrency = qs.MaxConcurrency.Ptr()
	}
	const dayMs = 24 * 3600 * 1000
	if qs.BackoffBaseMs.Set {
		if !qs.BackoffBaseMs.Valid || qs.BackoffBaseMs.Value < 0 || qs.BackoffBaseMs.Value > dayMs {
			return invalid("backoff_base_ms must be an integer from 0 to %d", dayMs)
		}
		q.BackoffBaseMs = qs.BackoffBaseMs.Value
	}
	if qs.BackoffMaxMs.Set {
		if !qs.BackoffMaxMs.Valid || qs.BackoffMaxMs.Value < 0 || qs.BackoffMaxMs.Value > 30*dayMs {
			return invalid("backoff_max_ms must be an integer from 0 to %d", 30*dayMs)
		}
		q.BackoffMaxMs = qs.BackoffMaxMs.Value
	}
	if q.BackoffMaxMs < q.BackoffBaseMs {
		return invalid("backoff_max_ms (%d) must not be below backoff_base_ms (%d)", q.BackoffMaxMs, q.BackoffBaseMs)
	}
	if qs.Paused.Set {
		if !qs.Paused.Valid {
			return invalid("paused must be true or false")
		}
		q.Paused = qs.Paused.Value
	}
	if qs.PriorityAging.Set {
		if qs.PriorityAging.Valid && (qs.PriorityAging.Value < 1 || qs.PriorityAging.Value > 30*dayMs) {
			return invalid("priority_aging_ms must be an integer from 1 to %d, or null for strict priority", 30*dayMs)
		}
		q.PriorityAgingMs = qs.PriorityAging.Ptr()
	}
	if qs.IdempotencyWindow.Set {
		if !qs.IdempotencyWindow.Valid || qs.IdempotencyWindow.Value < 0 || qs.IdempotencyWindow.Value > maxIdempotencyWindowMs {
			return invalid("idempotency_window_ms must be an integer from 0 to %d (30 days)", maxIdempotencyWindowMs)
		}
		q.IdempotencyWindowMs = qs.IdempotencyWindow.Ptr()
	}
	if err := qs.applyGroups(q); err != nil {
		return err
	}
	if qs.Retention.Set {
		if err := applyRetention(qs.Retention, q); err != nil {
			return err
		}
	}
	if qs.Push.Set {
		return applyPush(qs.Push, q)
	}
	return nil
}

// applyGroups validates the fairness and group limits present and writes them into q.
func (qs queueSettings) applyGroups(q *storage.Queue) error {
	if qs.Fairness.Set {
		if qs.Fairness.Valid && qs.Fairness.Value != storage.FairnessRoundRobin {
			return invalid("fairness must be %q, or null for one line by priority", storage.FairnessRoundRobin)
		}
		q.Fairness = qs.Fairness.Ptr()
	}
	if qs.GroupMaxConcurrency.Set {
		if qs.GroupMaxConcurrency.Valid && (qs.GroupMaxConcurrency.Value < 1 || qs.GroupMaxConcurrency.Value > 1e6) {
			return invalid("group_max_concurrency must be an integer from 1 to 1000000, or null for unlimited")
		}
		q.GroupMaxConcurrency = qs.GroupMaxConcurrency.Ptr()
	}
	if qs.GroupRateLimit.Set {
		// The bounds of rate_limit, for the same reason: the bucket's expiry must fit.
		if qs.GroupRateLimit.Valid && !(qs.GroupRateLimit.Value >= 1e-6 && qs.GroupRateLimit.Value <= 1e6) {
			return invalid("group_rate_limit must be a number of tasks per second from 0.000001 to 1000000, or null for unlimited")
		}
		q.GroupRateLimit = qs.GroupRateLimit.Ptr()
	}
	if qs.GroupRateBurst.Set {
		if qs.GroupRateBurst.Valid && (qs.GroupRateBurst.Value < 1 || qs.GroupRateBurst.Value > 1e6) {
			return invalid("group_rate_burst must be an integer from 1 to 1000000, or null for the default ceil(group_rate_limit)")
		}
		q.GroupRateBurst = qs.GroupRateBurst.Ptr()
	}
	return nil
}

// queueView is the API form of a queue: rate_burst shows its effective value.
func queueView(q storage.Queue) storage.Queue {
	if q.RateBurst == nil && q.RateLimit != nil {
		burst := max(1, int(math.Ceil(*q.RateLimit)))
		q.RateBurst = &burst
	}
	return q
}

func (s *Server) createQueue(c *gin.Context) {
	var req createQueueRequest
	if err := decode(c, queueBodyLimit, &req); err != nil {
		s.fail(c, err)
		return
	}
	if !queueNamePattern.MatchString(req.Name) {
		s.fail(c, invalid("name is required and must match %s", queueNamePattern))
		return
	}
	q := storage.Queue{Name: req.Name, MaxRetries: 3,
		BackoffBaseMs: s.cfg.BackoffBase.Milliseconds(), BackoffMaxMs: s.cfg.BackoffMax.Milliseconds()}
	if err := req.apply(&q); err != nil {
		s.fail(c, err)
		return
	}
	created, err := s.lc.CreateQueue(c.Request.Context(), q)
	if err != nil {
		s.fail(c, err)
		return
	}
	c.JSON(http.StatusCreated, queueView(created))
}

func (s *Server) listQueues(c *gin.Context) {
	qs, err := s.store.ListQueues(c.Request.Context())
	if err != nil {
		s.fail(c, err)
		return
	}
	views := make([]storage.Queue, 0, len(qs))
	for _, q := range qs {
		if auth.QueueAllowed(c, q.Name) { // a queue-restricted token sees only its queues
			views = append(views, queueView(q))
		}
	}
	c.JSON(http.StatusOK, gin.H{"queues": views})
}

func (s *Server) getQueue(c *gin.Context) {
	q, err := s.store.GetQueue(c.Request.Context(), c.Param("name"))
	if err != nil {
		s.fail(c, err)
		return
	}
	c.JSON(http.StatusOK, queueView(q))
}

func (s *Server) updateQueue(c *gin.Context) {
	var req queueSettings
	if err := decode(c, queueBodyLimit, &req); err != nil {
		s.fail(c, err)
		return
	}
	s.changeQueue(c, req.apply)
}

func (s *Server) pauseQueue(c *gin.Context) {
	s.changeQueue(c, func(q *storage.Queue) error { q.Paused = true; return nil })
}

func (s *Server) resumeQueue(c *gin.Context) {
	s.changeQueue(c, func(q *storage.Queue) error { q.Paused = false; return nil })
}

// changeQueue applies change to the queue named in the path; the lifecycle makes it
// take effect here at once (other replicas follow within ratelimit.RefreshInterval).
func (s *Server) changeQueue(c *gin.Context, change func(*storage.Queue) error) {
	q, err := s.lc.ChangeQueue(c.Request.Context(), c.Param("name"), change)
	if err != nil {
		s.fail(c, err)
		return
	}
	c.JSON(http.StatusOK, queueView(q))
}

func (s *Server) deleteQueue(c *gin.Context) {
	if err := s.lc.DeleteQueue(c.Request.Context(), c.Param("name")); err != nil {
		s.fail(c, err)
		return
	}
	c.Status(http.StatusNoContent)
}

func (s *Server) stats(c *gin.Context) {
	st, err := s.store.Stats(c.Request.Context(), c.Param("name"))
	if err != nil {
		s.fail(c, err)
		return
	}
	c.JSON(http.StatusOK, st)
}
