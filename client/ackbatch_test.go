package client_test

import (
	"context"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/taskforge/taskforge/client"
	"github.com/taskforge/taskforge/internal/testserver"
)

// requests reads taskforge_http_requests_total for a route with status 200.
func requests(t *testing.T, s *testserver.Instance, route string) int {
	t.Helper()
	body := s.Must(200, "GET", "/metrics", nil).Body
	re := regexp.MustCompile(`taskforge_http_requests_total\{code="200",method="POST",route="` + regexp.QuoteMeta(route) + `"\} (\d+)`)
	m := re.FindSubmatch(body)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

func TestWorkerBatchesAcksOfTasksFinishingTogether(t *testing.T) {
	t.Parallel()
	s, c := setup(t, nil)
	ctx := context.Background()
	if _, err := c.CreateQueue(ctx, "q", client.QueueSettings{}); err != nil {
		t.Fatal(err)
	}
	tasks := make([]client.NewTask, 300)
	for i := range tasks {
		tasks[i] = client.NewTask{Payload: i}
	}
	if _, err := c.EnqueueBatch(ctx, "q", tasks); err != nil {
		t.Fatal(err)
	}
	w := worker(c, "batcher", 32)
	w.Handle("q", func(context.Context, *client.Job) error { return nil })
	start(t, w)
	testserver.Eventually(t, 60*time.Second, "all done", func() bool {
		st, err := c.Stats(ctx, "q")
		return err == nil && st.Depth["done"] == 300
	})
	single, batched := requests(t, s, "/workers/ack"), requests(t, s, "/workers/ack/batch")
	t.Logf("300 acks took %d single and %d batch requests", single, batched)
	if batched == 0 || single+batched >= 300 {
		t.Fatalf("300 acks took %d single and %d batch requests: no batching", single, batched)
	}
}
