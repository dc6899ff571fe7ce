package push

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/taskforge/taskforge/storage"
	"github.com/taskforge/taskforge/telemetry"
)

// Headers of every push request.
const (
	TaskIDHeader      = "TaskForge-Task-Id"
	QueueHeader       = "TaskForge-Queue"
	AttemptHeader     = "TaskForge-Attempt"
	ScheduledAtHeader = "TaskForge-Scheduled-At"
)

// errorBodyBytes is how much of a failed answer's body the attempt's error keeps.
const errorBodyBytes = 1 << 10

// maxRetryAfter bounds the delay a Retry-After header may ask for: one year, as
// a worker's retry_after_ms.
const maxRetryAfter = 365 * 24 * time.Hour

// outcome is what one request's answer means for its attempt.
type outcome struct {
	label      string // telemetry's outcome label
	ok         bool   // ack
	result     json.RawMessage
	retryable  bool
	retryAfter *time.Duration
	err        string // the attempt's error when not ok
}

// deliver sends one task's request and records its answer; ctx ends only when the
// replica stops and its grace is over.
func (p *Pusher) deliver(ctx context.Context, a *attempt) {
	defer p.done(a)
	timeout := time.Duration(a.target.TimeoutMs) * time.Millisecond
	if ts := a.task.TimeoutSeconds; ts != nil && time.Duration(*ts)*time.Second < timeout {
		timeout = time.Duration(*ts) * time.Second // the attempt's own deadline is nearer
	}
	reqCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	reqCtx, stopTimer := context.WithTimeoutCause(reqCtx, timeout, errTimedOut)
	defer stopTimer()
	a.cancel = cancel
	p.mu.Lock()
	p.running[a.task.ID] = a
	p.mu.Unlock()

	start := time.Now()
	o := p.send(reqCtx, a)
	took := time.Since(start)
	p.cfg.Telemetry.PushRequest(a.task.Queue, o.label, took)

	// The answer is recorded even while the replica stops.
	rec := context.WithoutCancel(ctx)
	var t storage.Task
	var err error
	if o.ok {
		t, err = p.broker.Ack(rec, storage.AckItem{TaskID: a.task.ID, LeaseToken: *a.task.LeaseToken, WorkerID: p.workerID, Result: o.result})
	} else {
		n := storage.Nack{TaskID: a.task.ID, LeaseToken: *a.task.LeaseToken, WorkerID: p.workerID,
			Error: o.err, Retryable: o.retryable}
		if o.retryAfter != nil {
			ms := o.retryAfter.Milliseconds()
			n.RetryAfterMs = &ms
		}
		t, err = p.broker.Nack(rec, n)
	}
	if err != nil {
		level := "the answer of a push request not recorded; the task retries when its lease expires"
		if errors.Is(err, storage.ErrLeaseLost) {
			level = "the answer of a push request came after its lease ended; the attempt was already ended"
		}
		p.log.Warn(level, "task_id", a.task.ID, "queue", a.task.Queue, "outcome", o.label, "err", err)
		return
	}
	if p.cfg.OnAnswer != nil {
		p.cfg.OnAnswer(Answer{Task: t, Outcome: o.label})
	}
}

// send makes one request and classifies its answer.
func (p *Pusher) send(ctx context.Context, a *attempt) outcome {
	body := []byte(a.task.Payload)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.target.URL, bytes.NewReader(body))
	if err != nil {
		return outcome{label: telemetry.PushClientError, err: "push request not built: " + err.Error()}
	}
	for name, value := range a.target.Headers {
		req.Header.Set(name, value)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "TaskForge-Push/1")
	req.Header.Set(TaskIDHeader, a.task.ID.String())
	req.Header.Set(QueueHeader, a.task.Queue)
	req.Header.Set(AttemptHeader, strconv.Itoa(a.task.Attempts))
	req.Header.Set(ScheduledAtHeader, a.task.ScheduledAt.UTC().Format(time.RFC3339Nano))
	if a.target.secret != "" {
		req.Header.Set(SignatureHeader, Sign(a.target.secret, p.cfg.Now(), body))
	}
	resp, err := p.cfg.Client.Do(req)
	if err != nil {
		return failure(ctx, err)
	}
	defer resp.Body.Close()
	code := resp.StatusCode
	if code >= 200 && code <= 299 {
		limit := p.cfg.MaxPayloadBytes
		raw, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
		if err != nil {
			return failure(ctx, fmt.Errorf("reading the answer: %w", err))
		}
		o := outcome{label: telemetry.PushSuccess, ok: true}
		if trimmed := bytes.TrimSpace(raw); len(trimmed) > 0 && int64(len(raw)) <= limit && json.Valid(trimmed) {
			o.result = json.RawMessage(trimmed)
		}
		return o
	}
	head, _ := io.ReadAll(io.LimitReader(resp.Body, errorBodyBytes))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // so the connection is reused
	o := outcome{err: "HTTP " + strconv.Itoa(code) + ": " + cleanText(head)}
	switch {
	case code == http.StatusTooManyRequests || code >= 500:
		o.label, o.retryable = telemetry.PushServerError, true
		if code == http.StatusTooManyRequests {
			o.label = telemetry.PushRateLimited
		}
		if d, ok := retryAfter(resp.Header.Get("Retry-After"), p.cfg.Now()); ok {
			o.retryAfter = &d
		}
	default: // any other 4xx, and redirects, which are not followed
		o.label = telemetry.PushClientError
	}
	return o
}

// failure classifies a request that got no answer: retried, whatever the reason.
func failure(ctx context.Context, err error) outcome {
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, errCancelled):
		return outcome{label: telemetry.PushCancelled, retryable: true, err: "push request aborted: " + errCancelled.Error()}
	case errors.Is(cause, errTimedOut):
		return outcome{label: telemetry.PushTimeout, retryable: true, err: "push request timed out: " + errTimedOut.Error()}
	case errors.Is(cause, errStopped):
		return outcome{label: telemetry.PushConnError, retryable: true, err: "push request aborted: " + errStopped.Error()}
	}
	return outcome{label: telemetry.PushConnError, retryable: true, err: "push request failed: " + cleanText([]byte(err.Error()))}
}

// retryAfter reads a Retry-After header: delay seconds or an HTTP date.
func retryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs < 0 {
			return 0, false
		}
		return min(time.Duration(min(secs, int64(maxRetryAfter/time.Second)))*time.Second, maxRetryAfter), true
	}
	at, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return min(max(at.Sub(now), 0), maxRetryAfter), true
}

// cleanText makes an answer's bytes storable as text: valid UTF-8, without NULs.
func cleanText(b []byte) string {
	return strings.ReplaceAll(strings.ToValidUTF8(string(b), "\uFFFD"), "\x00", "")
}
