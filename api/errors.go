package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"

	"github.com/gin-gonic/gin"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/redis/go-redis/v9"

	"github.com/taskforge/taskforge/internal/lifecycle"
	"github.com/taskforge/taskforge/storage"
)

// Error codes of the HTTP contract.
const (
	CodeInvalidRequest      = "invalid_request"
	CodePayloadTooLarge     = "payload_too_large"
	CodeNotFound            = "not_found"
	CodeMethodNotAllowed    = "method_not_allowed"
	CodeQueueNotFound       = "queue_not_found"
	CodeQueueExists         = "queue_exists"
	CodeQueueNotEmpty       = "queue_not_empty"
	CodeTaskNotFound        = "task_not_found"
	CodeTaskNotCancellable  = "task_not_cancellable"
	CodeIdempotencyConflict = "idempotency_conflict"
	// CodeDuplicateRequest: the idempotency key's task is gone, but the queue's
	// idempotency window still holds the key (the error's task_id names the task).
	CodeDuplicateRequest = "duplicate_request"
	CodeLeaseLost        = "lease_lost"
	CodeScheduleNotFound = "schedule_not_found"
	CodeScheduleExists   = "schedule_exists"
	CodeWorkflowNotFound = "workflow_not_found"
	// CodeGroupNotFound: a group with no tasks (unfinished or dead) and no overrides.
	CodeGroupNotFound = "group_not_found"
	// CodeWorkflowNotCancellable: DELETE /workflows/:id of a finished workflow.
	CodeWorkflowNotCancellable = "workflow_not_cancellable"
	CodeUnavailable            = "unavailable"
	CodeInternal               = "internal"
	CodeClientClosed           = "client_closed_request"
)

// StatusClientClosedRequest is recorded (metrics, logs) for requests whose caller
// went away before the answer, as nginx does; no client ever reads it.
const StatusClientClosedRequest = 499

// Error is an error the API reports to its caller as
// {"error": {"code": ..., "message": ...}} with Status.
type Error struct {
	Status  int
	Code    string
	Message string
	TaskID  string // duplicate_request: the task that held the key
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

type errorBody struct {
	Error errorDetail `json:"error"`
}

func invalid(format string, args ...any) *Error {
	return &Error{Status: http.StatusBadRequest, Code: CodeInvalidRequest, Message: fmt.Sprintf(format, args...)}
}

func tooLarge(format string, args ...any) *Error {
	return &Error{Status: http.StatusRequestEntityTooLarge, Code: CodePayloadTooLarge, Message: fmt.Sprintf(format, args...)}
}

// storageErrors maps each storage sentinel to its HTTP status and code: the one
// place where storage errors become API errors.
var storageErrors = []struct {
	err    error
	status int
	code   string
}{
	{storage.ErrQueueNotFound, http.StatusNotFound, CodeQueueNotFound},
	{storage.ErrQueueExists, http.StatusConflict, CodeQueueExists},
	{storage.ErrQueueNotEmpty, http.StatusConflict, CodeQueueNotEmpty},
	{storage.ErrTaskNotFound, http.StatusNotFound, CodeTaskNotFound},
	{storage.ErrTaskNotCancellable, http.StatusConflict, CodeTaskNotCancellable},
	{storage.ErrLeaseLost, http.StatusConflict, CodeLeaseLost},
	{storage.ErrIdempotencyConflict, http.StatusConflict, CodeIdempotencyConflict},
	{storage.ErrDuplicateRequest, http.StatusConflict, CodeDuplicateRequest},
	{storage.ErrScheduleNotFound, http.StatusNotFound, CodeScheduleNotFound},
	{storage.ErrScheduleExists, http.StatusConflict, CodeScheduleExists},
	{storage.ErrWorkflowNotFound, http.StatusNotFound, CodeWorkflowNotFound},
	{storage.ErrGroupNotFound, http.StatusNotFound, CodeGroupNotFound},
	{storage.ErrWorkflowNotCancellable, http.StatusConflict, CodeWorkflowNotCancellable},
}

// toAPIError turns any error into the API error to report.
func toAPIError(err error) *Error {
	var apiErr *Error
	if errors.As(err, &apiErr) {
		return apiErr
	}
	switch {
	case errors.Is(err, lifecycle.ErrCommitTimeout):
		return &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable,
			Message: "PostgreSQL did not finish the commit in time; it may have taken effect; retry later"}
	case errors.Is(err, storage.ErrDebounceContended):
		return &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable,
			Message: "the debounce key's waiting task kept changing hands; nothing was enqueued; retry"}
	case errors.Is(err, lifecycle.ErrCommitOverloaded):
		return &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable,
			Message: "too many requests are waiting for a commit on this replica; retry later"}
	}
	for _, m := range storageErrors {
		if errors.Is(err, m.err) {
			msg := m.err.Error()
			var conflict *storage.IdempotencyConflictError
			var scheduled *storage.QueueHasSchedulesError
			var missing *storage.QueueNotFoundError
			var duplicate *storage.DuplicateRequestError
			if errors.As(err, &duplicate) {
				return &Error{Status: m.status, Code: m.code, Message: duplicate.Error(), TaskID: duplicate.TaskID.String()}
			}
			if errors.As(err, &conflict) {
				msg = conflict.Error()
			} else if errors.As(err, &scheduled) {
				msg = scheduled.Error()
			} else if errors.As(err, &missing) {
				msg = missing.Error()
			}
			return &Error{Status: m.status, Code: m.code, Message: msg}
		}
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "22021" || pgErr.Code == "22P05" || pgErr.Code == "22003") {
		// Input PostgreSQL cannot store: text with NUL or invalid UTF-8 (in a path,
		// query or header), or a JSON number beyond numeric's range.
		return &Error{Status: http.StatusBadRequest, Code: CodeInvalidRequest,
			Message: "text must be valid UTF-8 without NUL characters, and numbers within PostgreSQL's numeric range"}
	}
	if isUnavailable(err) {
		return &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable,
			Message: "a backing service (PostgreSQL or Redis) is unavailable; retry later"}
	}
	return &Error{Status: http.StatusInternalServerError, Code: CodeInternal, Message: "internal error"}
}

// isUnavailable reports whether err means PostgreSQL or Redis could not be reached,
// or cannot serve for now: callers should retry later (503), not report a bug (500).
func isUnavailable(err error) bool {
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &connectErr), errors.As(err, &netErr), errors.Is(err, context.DeadlineExceeded):
		return true
	// A connection that died mid-reply (server killed or restarted): pgx reports
	// io.ErrUnexpectedEOF, go-redis io.EOF once its retries are spent.
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return true
	// Redis up but refusing for now: loading its data after a restart, a failover
	// under way, out of memory under noeviction, or its client pool exhausted.
	case redis.IsLoadingError(err), redis.IsReadOnlyError(err), redis.IsMasterDownError(err),
		redis.IsClusterDownError(err), redis.IsTryAgainError(err), redis.IsOOMError(err),
		redis.IsMaxClientsError(err), errors.Is(err, redis.ErrPoolTimeout):
		return true
	case errors.As(err, &pgErr):
		// admin_shutdown, crash_shutdown, cannot_connect_now, too_many_connections
		return pgErr.Code == "57P01" || pgErr.Code == "57P02" || pgErr.Code == "57P03" || pgErr.Code == "53300"
	}
	return pgconn.SafeToRetry(err)
}

// fail writes err as the JSON error body and aborts the request.
func (s *Server) fail(c *gin.Context, err error) {
	apiErr := toAPIError(err)
	if c.Request.Context().Err() != nil && errors.Is(err, context.Canceled) {
		// The caller hung up: nobody reads this answer, and it is no server error.
		apiErr = &Error{Status: StatusClientClosedRequest, Code: CodeClientClosed, Message: "the client closed the request"}
		s.log.Debug("client closed the request", "method", c.Request.Method, "path", c.FullPath())
	}
	if apiErr.Status >= 500 {
		s.log.Error("request failed", "method", c.Request.Method, "path", c.FullPath(), "err", err)
	}
	var body errorBody
	body.Error.Code = apiErr.Code
	body.Error.Message = apiErr.Message
	body.Error.TaskID = apiErr.TaskID
	c.AbortWithStatusJSON(apiErr.Status, body)
}

func logRecovered(log *slog.Logger) gin.RecoveryFunc {
	return func(c *gin.Context, rec any) {
		log.Error("handler panicked", "method", c.Request.Method, "path", c.FullPath(), "panic", rec)
		var body errorBody
		body.Error.Code = CodeInternal
		body.Error.Message = "internal error"
		c.AbortWithStatusJSON(http.StatusInternalServerError, body)
	}
}
