package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/taskforge/taskforge/internal/testenv"
	"github.com/taskforge/taskforge/internal/testsignal"
)

// polled is the part of a poll response the test workers use.
type polled struct {
	ID         string `json:"id"`
	LeaseToken string `json:"lease_token"`
	Attempt    int    `json:"attempt"`
}

// ledger records what the test workers saw, safely across goroutines.
type ledger struct {
	mu         sync.Mutex
	deliveries map[string]int // task id → times delivered
	acked      atomic.Int64
	acks       testsignal.Signal[int64] // every ack, with the count so far
	ackErrors  map[int]int              // status → count of non-200 acks
}

func newLedger() *ledger {
	l := &ledger{deliveries: map[string]int{}, ackErrors: map[int]int{}}
	l.acks.Init()
	return l
}

// runWorkers runs n HTTP workers until ctx ends. Worker i talks to urls[i%len(urls)]
// and moves to the next URL when a request fails (its replica died).
func runWorkers(ctx context.Context, n int, urls []string, queue string, l *ledger) *sync.WaitGroup {
	var wg sync.WaitGroup
	client := &http.Client{Timeout: 10 * time.Second}
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			workerID := fmt.Sprintf("worker-%d", i)
			target := i
			for ctx.Err() == nil {
				base := urls[target%len(urls)]
				var out struct {
					Tasks []polled `json:"tasks"`
				}
				status, err := post(ctx, client, base+"/workers/poll", map[string]any{
					"worker_id": workerID, "queues": []string{queue}, "max_tasks": 10, "wait_ms": 500}, &out)
				if err != nil || status != 200 {
					target++
					testenv.Elapse(20 * time.Millisecond) // a worker's pause before it tries another replica
					continue
				}
				for _, p := range out.Tasks {
					l.mu.Lock()
					l.deliveries[p.ID]++
					l.mu.Unlock()
					status, err := post(ctx, client, base+"/workers/ack", map[string]any{
						"worker_id": workerID, "task_id": p.ID, "lease_token": p.LeaseToken}, nil)
					l.mu.Lock()
					switch {
					case err != nil:
						l.ackErrors[-1]++
						target++
					case status == 200:
						l.acks.Signal(l.acked.Add(1))
					default:
						l.ackErrors[status]++
					}
					l.mu.Unlock()
				}
			}
		}()
	}
	return &wg
}

func post(ctx context.Context, c *http.Client, url string, body any, out any) (int, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequestWithContext(ctx, "POST", url, bytes.NewReader(b))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if out != nil && resp.StatusCode == 200 {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			return resp.StatusCode, err
		}
	}
	return resp.StatusCode, nil
}
