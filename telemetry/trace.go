package telemetry

import (
	"context"
	"fmt"
	"os"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Propagator reads and writes W3C traceparent headers.
var Propagator = propagation.TraceContext{}

// TracerFromEnv returns an OTLP/HTTP tracer provider when OTEL_EXPORTER_OTLP_ENDPOINT
// (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set, configured by the standard OTEL_*
// variables, and a no-op provider otherwise. Call shutdown to flush at exit.
func TracerFromEnv(ctx context.Context) (tp trace.TracerProvider, shutdown func(context.Context) error, err error) {
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return noop.NewTracerProvider(), func(context.Context) error { return nil }, nil
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("otlp trace exporter: %w", err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(semconv.ServiceName("taskforge")))
	if err != nil {
		return nil, nil, fmt.Errorf("trace resource: %w", err)
	}
	sdk := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return sdk, sdk.Shutdown, nil
}

// WithTracing makes t emit spans through tp.
func (t *Telemetry) WithTracing(tp trace.TracerProvider) *Telemetry {
	if t != nil && tp != nil {
		t.tracer = tp.Tracer("github.com/taskforge/taskforge")
	}
	return t
}

func (t *Telemetry) tracerOrNoop() trace.Tracer {
	if t == nil || t.tracer == nil {
		return noop.NewTracerProvider().Tracer("")
	}
	return t.tracer
}

// StartSpan starts a span named name as a child of the span in ctx.
func (t *Telemetry) StartSpan(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	return t.tracerOrNoop().Start(ctx, name, trace.WithAttributes(attrs...))
}

// TaskSpan records a completed step of a task's life as a span in the task's trace
// (the enqueue's traceparent); it does nothing for tasks enqueued without one.
func (t *Telemetry) TaskSpan(name string, traceparent *string, attrs ...attribute.KeyValue) {
	if t == nil || t.tracer == nil || traceparent == nil {
		return
	}
	ctx := Propagator.Extract(context.Background(), propagation.MapCarrier{"traceparent": *traceparent})
	_, span := t.tracer.Start(ctx, name, trace.WithAttributes(attrs...))
	span.End()
}

// FromHeader returns ctx carrying the trace context of a W3C traceparent header.
func FromHeader(ctx context.Context, traceparent string) context.Context {
	if traceparent == "" {
		return ctx
	}
	return Propagator.Extract(ctx, propagation.MapCarrier{"traceparent": traceparent})
}

// Traceparent returns the W3C traceparent of the span in ctx, or nil when there is
// none. With tracing off it is the caller's own traceparent, passed through.
func Traceparent(ctx context.Context) *string {
	carrier := propagation.MapCarrier{}
	Propagator.Inject(ctx, carrier)
	if v := carrier["traceparent"]; v != "" {
		return &v
	}
	return nil
}
