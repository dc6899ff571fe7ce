package telemetry_test

import (
	"context"
	"net/http"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/taskforge/taskforge/internal/testserver"
	"github.com/taskforge/taskforge/server"
	"github.com/taskforge/taskforge/telemetry"
)

func TestTaskStepsJoinTheProducersTrace(t *testing.T) {
	t.Parallel()
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	s := testserver.Start(t, testserver.Options{Configure: func(c *server.Config) { c.TracerProvider = tp }})
	s.CreateQueue("q", nil)

	const producer = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	traceID := "4bf92f3577b34da6a3ce929d0e0e4736"
	resp := testserver.Do(t, s.URL, "POST", "/queues/q/tasks", map[string]any{"payload": 1}, http.Header{"Traceparent": {producer}})
	if resp.Status != 201 {
		t.Fatalf("enqueue: %d %s", resp.Status, resp.Body)
	}
	untraced := s.Enqueue("q", map[string]any{"payload": 2})

	var traced testserver.Polled
	var got []testserver.Polled
	for len(got) < 2 {
		got = append(got, s.Poll("w", []string{"q"}, 2, 2000)...)
	}
	for _, p := range got {
		if p.ID == untraced.ID {
			// Without a producer trace, the enqueue span starts a trace of its own.
			if p.Traceparent == nil || (*p.Traceparent)[3:35] == traceID {
				t.Fatalf("untraced enqueue: traceparent %v", p.Traceparent)
			}
			continue
		}
		traced = p
	}
	if traced.Traceparent == nil {
		t.Fatal("the polled task carries no traceparent")
	}
	// The worker continues the trace from the polled traceparent.
	ctx := telemetry.FromHeader(context.Background(), *traced.Traceparent)
	_, workerSpan := tp.Tracer("worker").Start(ctx, "handle")
	workerSpan.End()
	if got := workerSpan.SpanContext().TraceID().String(); got != traceID {
		t.Fatalf("worker span trace id %s, want the producer's %s", got, traceID)
	}
	s.Must(200, "POST", "/workers/ack", map[string]any{"worker_id": "w", "task_id": traced.ID, "lease_token": traced.LeaseToken})

	inTrace := map[string]bool{} // span names seen in the producer's trace
	for _, sp := range spans.GetSpans() {
		if sp.SpanContext.TraceID().String() == traceID {
			inTrace[sp.Name] = true
		}
	}
	for _, name := range []string{"taskforge.enqueue", "taskforge.dispatch", "taskforge.claim", "taskforge.ack", "handle"} {
		if !inTrace[name] {
			t.Errorf("no %s span in the producer's trace (have %v)", name, inTrace)
		}
	}
}
