package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"unicode/utf8"

	"github.com/gin-gonic/gin"

	"github.com/taskforge/taskforge/storage"
)

// The fuzz targets below run their seed corpora (testdata/fuzz) as ordinary tests;
// `make fuzz` explores further. Each checks that a decoder never panics, that every
// refusal is a 4xx API error (never a 500), and that what it accepts is valid.

// fuzzDecode decodes body as a request of the API would be.
func fuzzDecode(t *testing.T, body []byte, limit int64, dst any) error {
	t.Helper()
	gin.SetMode(gin.ReleaseMode)
	w := httptest.NewRecorder()
	c, _ := gin.CreateTestContext(w)
	c.Request = httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
	c.Request.Header.Set("Content-Type", "application/json")
	err := decode(c, limit, dst)
	if err != nil {
		requireClientError(t, err)
		return err
	}
	if !json.Valid(body) || !utf8.Valid(body) {
		t.Fatalf("accepted a body that is not valid JSON in UTF-8: %q", body)
	}
	return nil
}

// requireClientError fails unless err is an API error with a 4xx status.
func requireClientError(t *testing.T, err error) {
	t.Helper()
	var apiErr *Error
	if !errors.As(err, &apiErr) || apiErr.Status < 400 || apiErr.Status > 499 {
		t.Fatalf("error %v is not a 4xx API error", err)
	}
}

var fuzzServer = &Server{cfg: Config{MaxPayloadBytes: 4 << 10}.WithDefaults()}

func FuzzEnqueueBody(f *testing.F) {
	f.Add([]byte(`{"payload": {"to": "a@b.c"}, "priority": 2, "scheduled_at": "2030-01-01T00:00:00Z", "idempotency_key": "k"}`))
	f.Add([]byte(`{"payload": null}`))
	f.Add([]byte(`{"payload": "\u0000"}`))
	f.Add([]byte(`{"payload": 1e400, "max_retries": 100, "timeout_seconds": 604800}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var req enqueueRequest
		if fuzzDecode(t, body, 64<<10, &req) != nil {
			return
		}
		task, err := fuzzServer.toNewTask("q", req)
		if err != nil {
			requireClientError(t, err)
			return
		}
		checkTask(t, task)
	})
}

func checkTask(t *testing.T, task storage.NewTask) {
	t.Helper()
	if task.Priority < 1 || task.Priority > 10 || !json.Valid(task.Payload) ||
		(task.MaxRetries != nil && (*task.MaxRetries < 0 || *task.MaxRetries > 100)) ||
		(task.IdempotencyKey != nil && len(task.Fingerprint) != 32) {
		t.Fatalf("accepted an invalid task: %+v", task)
	}
}

func FuzzBatchBody(f *testing.F) {
	f.Add([]byte(`{"tasks": [{"payload": 1}, {"payload": 2, "priority": 1}]}`))
	f.Add([]byte(`{"tasks": []}`))
	f.Add([]byte(`{"tasks": [{"payload": [[[[[[]]]]]]}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var req batchRequest
		if fuzzDecode(t, body, 256<<10, &req) != nil {
			return
		}
		for _, r := range req.Tasks {
			task, err := fuzzServer.toNewTask("q", r)
			if err != nil {
				requireClientError(t, err)
				continue
			}
			checkTask(t, task)
		}
	})
}

func FuzzPollBody(f *testing.F) {
	f.Add([]byte(`{"worker_id": "w1", "queues": ["emails"], "max_tasks": 10, "wait_ms": 5000}`))
	f.Add([]byte(`{"worker_id": "w", "queues": ["a"], "QUEUES": ["b"]}`))
	f.Add([]byte(`{"worker_id": "\u0000", "queues": []}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var req pollRequest
		_ = fuzzDecode(t, body, workerBodyLimit, &req)
	})
}

func FuzzQueueSettings(f *testing.F) {
	f.Add([]byte(`{"name": "q", "max_retries": 5, "rate_limit": 10.5, "rate_burst": 20, "max_concurrency": 3}`))
	f.Add([]byte(`{"rate_limit": null, "backoff_base_ms": 0, "backoff_max_ms": 1, "priority_aging_ms": 1000}`))
	f.Add([]byte(`{"rate_limit": 1e400}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var req createQueueRequest
		if fuzzDecode(t, body, queueBodyLimit, &req) != nil {
			return
		}
		q := storage.Queue{Name: "q", MaxRetries: 3, BackoffBaseMs: 1000, BackoffMaxMs: 3600000}
		if err := req.apply(&q); err != nil {
			requireClientError(t, err)
			return
		}
		if q.MaxRetries < 0 || q.MaxRetries > 100 || (q.RateLimit != nil && !(*q.RateLimit >= 1e-6)) ||
			(q.RateBurst != nil && *q.RateBurst < 1) || (q.MaxConcurrency != nil && *q.MaxConcurrency < 1) ||
			q.BackoffBaseMs < 0 || q.BackoffMaxMs < q.BackoffBaseMs {
			t.Fatalf("accepted invalid settings: %+v", q)
		}
	})
}
