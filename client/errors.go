package client

import (
	"errors"
	"fmt"
	"net/http"
	"time"
)

// Sentinel errors. Every error a Client method returns for an API error response
// is an *APIError that matches (errors.Is) the sentinel of its error code; a
// request that never got an answer matches ErrUnavailable.
var (
	// ErrInvalidRequest: the server rejected the request as malformed or out of range (400).
	ErrInvalidRequest = errors.New("invalid request")
	// ErrPayloadTooLarge: a payload, result or body exceeded the server's limit (413).
	ErrPayloadTooLarge = errors.New("payload too large")
	// ErrNotFound: the server has no such route (404 not_found), e.g. an older server.
	ErrNotFound = errors.New("no such route")
	// ErrMethodNotAllowed: the route exists but not with this method (405).
	ErrMethodNotAllowed = errors.New("method not allowed")
	// ErrQueueNotFound: the queue does not exist (404).
	ErrQueueNotFound = errors.New("queue not found")
	// ErrQueueExists: a queue of that name already exists (409).
	ErrQueueExists = errors.New("queue already exists")
	// ErrQueueNotEmpty: the queue still holds unfinished or dead tasks (409).
	ErrQueueNotEmpty = errors.New("queue not empty")
	// ErrTaskNotFound: the task (or dead task) does not exist in that queue (404).
	ErrTaskNotFound = errors.New("task not found")
	// ErrTaskNotCancellable: the task already reached a terminal state (409).
	ErrTaskNotCancellable = errors.New("task not cancellable")
	// ErrIdempotencyConflict: the idempotency key was used by a different request (409).
	ErrIdempotencyConflict = errors.New("idempotency conflict")
	// ErrDuplicateRequest: the idempotency key's task is gone, but the queue's
	// idempotency window still holds the key (409); APIError.TaskID names the task.
	ErrDuplicateRequest = errors.New("duplicate request")
	// ErrLeaseLost: the caller no longer holds the task's lease (409). It is also the
	// context cause of a handler whose lease was lost.
	ErrLeaseLost = errors.New("lease lost")
	// ErrScheduleNotFound: the schedule does not exist (404).
	ErrScheduleNotFound = errors.New("schedule not found")
	// ErrGroupNotFound: the group has no tasks (unfinished or dead) and no
	// overrides (404).
	ErrGroupNotFound = errors.New("group not found")
	// ErrScheduleExists: a schedule of that name already exists (409).
	ErrScheduleExists = errors.New("schedule already exists")
	// ErrWorkflowNotFound: no workflow has the id (404).
	ErrWorkflowNotFound = errors.New("workflow not found")
	// ErrWorkflowNotCancellable: the workflow already finished (409).
	ErrWorkflowNotCancellable = errors.New("workflow not cancellable")
	// ErrUnavailable: the server, or PostgreSQL or Redis behind it, cannot serve now
	// (503, 502, 504), or the server could not be reached at all. Retry later.
	ErrUnavailable = errors.New("server unavailable")
	// ErrInternal: the server failed unexpectedly (500).
	ErrInternal = errors.New("internal server error")
	// ErrUnauthorized: the request carried no valid API token (401): missing,
	// malformed, unknown, expired or revoked. See WithToken.
	ErrUnauthorized = errors.New("unauthorized")
	// ErrForbidden: the token's role or queues do not allow the request (403).
	ErrForbidden = errors.New("forbidden")
	// ErrRateLimited: the token (or worker id) is over its request limit (429); retry later.
	ErrRateLimited = errors.New("rate limited")

	// ErrTaskCancelled is the context cause of a handler whose task was cancelled
	// (DELETE /queues/:name/tasks/:id while it was executing).
	ErrTaskCancelled = errors.New("task cancelled")
	// ErrWorkerStopping is the context cause of a handler still running when the
	// worker's shutdown grace period ended; its task is handed back for another worker.
	ErrWorkerStopping = errors.New("worker stopping")
)

// codes maps each API error code to its sentinel.
var codes = map[string]error{
	"schedule_not_found":       ErrScheduleNotFound,
	"group_not_found":          ErrGroupNotFound,
	"schedule_exists":          ErrScheduleExists,
	"workflow_not_found":       ErrWorkflowNotFound,
	"workflow_not_cancellable": ErrWorkflowNotCancellable,
	"invalid_request":          ErrInvalidRequest,
	"payload_too_large":        ErrPayloadTooLarge,
	"not_found":                ErrNotFound,
	"method_not_allowed":       ErrMethodNotAllowed,
	"queue_not_found":          ErrQueueNotFound,
	"queue_exists":             ErrQueueExists,
	"queue_not_empty":          ErrQueueNotEmpty,
	"task_not_found":           ErrTaskNotFound,
	"task_not_cancellable":     ErrTaskNotCancellable,
	"idempotency_conflict":     ErrIdempotencyConflict,
	"duplicate_request":        ErrDuplicateRequest,
	"lease_lost":               ErrLeaseLost,
	"unavailable":              ErrUnavailable,
	"internal":                 ErrInternal,
	"unauthorized":             ErrUnauthorized,
	"forbidden":                ErrForbidden,
	"rate_limited":             ErrRateLimited,
}

// APIError is an error response of the TaskForge API:
// {"error": {"code": ..., "message": ...}} with its HTTP status. errors.Is matches
// it against the sentinel of its code (ErrQueueNotFound for "queue_not_found", …),
// and any 502, 503 or 504 against ErrUnavailable.
type APIError struct {
	Status  int    // HTTP status
	Code    string // snake_case error code, e.g. "queue_not_found"
	Message string // human-readable detail from the server
	// TaskID names the task that held the idempotency key of a duplicate_request.
	TaskID string
}

// Error returns "code: message".
func (e *APIError) Error() string { return e.Code + ": " + e.Message }

// Is reports whether target is the sentinel of e's code or status.
func (e *APIError) Is(target error) bool {
	if s, ok := codes[e.Code]; ok && s == target {
		return true
	}
	switch e.Status {
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return target == ErrUnavailable
	}
	return false
}

// codeForStatus names the error of a response without a JSON error body
// (a proxy's page, for instance).
func codeForStatus(status int) string {
	switch {
	case status == http.StatusBadGateway, status == http.StatusServiceUnavailable, status == http.StatusGatewayTimeout:
		return "unavailable"
	case status == http.StatusNotFound:
		return "not_found"
	case status == http.StatusRequestEntityTooLarge:
		return "payload_too_large"
	case status >= 500:
		return "internal"
	default:
		return "http_" + fmt.Sprint(status)
	}
}

// unreachableError is a request that got no HTTP response: refused, reset, timed out.
type unreachableError struct {
	err error
}

func (e *unreachableError) Error() string        { return "server unreachable: " + e.err.Error() }
func (e *unreachableError) Unwrap() error        { return e.err }
func (e *unreachableError) Is(target error) bool { return target == ErrUnavailable }

// temporary reports whether a request that failed with err may succeed if sent
// again later: the server was unreachable, unavailable, failed internally, or
// rate-limited the caller.
func temporary(err error) bool {
	return errors.Is(err, ErrUnavailable) || errors.Is(err, ErrInternal) || errors.Is(err, ErrRateLimited)
}

// Permanent marks a handler error as not worth retrying: the worker nacks the task
// with retryable=false, so it goes to the dead-letter queue at once. errors.Is and
// errors.As see through it to err.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// IsPermanent reports whether err (or an error it wraps) was marked by Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

// RetryAfter marks a handler error as retryable after d (rounded to milliseconds)
// instead of the queue's backoff: the worker nacks with retry_after_ms. The retry
// still counts against the task's budget. errors.Is and errors.As see through it.
func RetryAfter(err error, d time.Duration) error {
	if err == nil {
		return nil
	}
	return &retryAfterError{err: err, after: max(d, 0)}
}

type retryAfterError struct {
	err   error
	after time.Duration
}

func (e *retryAfterError) Error() string { return e.err.Error() }
func (e *retryAfterError) Unwrap() error { return e.err }

// RetryDelay returns the delay a RetryAfter error in err's chain asks for.
func RetryDelay(err error) (time.Duration, bool) {
	var r *retryAfterError
	if errors.As(err, &r) {
		return r.after, true
	}
	return 0, false
}

// MaxSnooze is the longest delay Snooze asks for: the server's limit for delay_ms.
const MaxSnooze = 24 * time.Hour

// Snooze is a handler outcome, returned as its error, that puts the task back for
// d (rounded down to milliseconds, within 0 and MaxSnooze) without spending a
// retry: the worker releases it with delay_ms, the attempt is recorded as released,
// and the task is due again d from now. Use it when the task cannot run yet (a
// resource not ready, a quota upstream) rather than when it failed.
func Snooze(d time.Duration) error {
	return &snoozeError{after: min(max(d, 0), MaxSnooze)}
}

type snoozeError struct{ after time.Duration }

func (e *snoozeError) Error() string { return "snoozed for " + e.after.String() }

// SnoozeDelay returns the delay a Snooze in err's chain asks for.
func SnoozeDelay(err error) (time.Duration, bool) {
	var s *snoozeError
	if errors.As(err, &s) {
		return s.after, true
	}
	return 0, false
}
