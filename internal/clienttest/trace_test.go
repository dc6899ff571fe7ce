package clienttest_test

import (
	"context"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/taskforge/taskforge/client"
	"github.com/taskforge/taskforge/server"
)

// TestWorkerSpanJoinsTheProducersTrace: a producer enqueues inside a span; the
// worker's handler span belongs to the same trace, with the server's spans between.
func TestWorkerSpanJoinsTheProducersTrace(t *testing.T) {
	t.Parallel()
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	s, c := setup(t, func(cfg *server.Config) { cfg.TracerProvider = tp })
	ctx := context.Background()
	if _, err := c.CreateQueue(ctx, "q", client.QueueSettings{}); err != nil {
		t.Fatal(err)
	}
	producerCtx, producer := tp.Tracer("producer").Start(ctx, "checkout")
	task, err := c.Enqueue(producerCtx, "q", client.NewTask{Payload: map[string]int{"order": 7}})
	producer.End()
	if err != nil {
		t.Fatal(err)
	}

	handled := make(chan trace.SpanContext, 1)
	w := client.NewWorker(c, client.WorkerConfig{ID: "traced", Concurrency: 1, PollWait: time.Second,
		Logger: logger(), TracerProvider: tp})
	w.Handle("q", func(ctx context.Context, job *client.Job) error {
		handled <- trace.SpanContextFromContext(ctx)
		return nil
	})
	start(t, w)
	var sc trace.SpanContext
	select {
	case sc = <-handled:
	case <-time.After(20 * time.Second):
		t.Fatal("the task was not handled")
	}
	want := producer.SpanContext().TraceID()
	if sc.TraceID() != want {
		t.Fatalf("handler span in trace %s, want the producer's %s", sc.TraceID(), want)
	}
	waitTask(t, c, "q", task.ID, 10*time.Second, "task done", func(t *client.Task) bool { return t.Status == "done" })
	names := map[string]bool{}
	for _, sp := range spans.GetSpans() {
		if sp.SpanContext.TraceID() == want {
			names[sp.Name] = true
		}
	}
	for _, n := range []string{"checkout", "taskforge.enqueue", "taskforge.dispatch", "taskforge.claim", "taskforge.handle", "taskforge.ack"} {
		if !names[n] {
			t.Errorf("span %s missing from the producer's trace (have %v)", n, names)
		}
	}
	_ = s
}
