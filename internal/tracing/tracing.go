// Package tracing is ate's OpenTelemetry tracing: Start installs an OTLP
// exporter as the process's tracer provider when the standard
// environment asks for one (OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT), and the helpers here add the
// maintained instrumentation (otelhttp, otelgrpc) only then. Without
// that environment nothing is wrapped and no context carries a span, so
// Span returns a no-op span: tracing off costs a context lookup per
// span.
//
// OpenTelemetry keeps its tracer provider and propagator in package
// globals of its own (otel.SetTracerProvider); the instrumentation
// libraries read them, so Start sets them, once per process, from the
// wiring (internal/up). Trace context crosses processes in the W3C
// traceparent header (HTTP) and gRPC metadata.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
)

// Environment variables that turn tracing on (the OTLP exporter's own;
// the exporter reads the rest of its OTEL_EXPORTER_OTLP_* settings, such
// as _INSECURE and _HEADERS, itself).
const (
	EnvEndpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	EnvTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
)

// instrumentation is the name of ate's own tracer.
const instrumentation = "substrate.dev/ate"

// Enabled reports whether the environment asks for traces to be
// exported.
func Enabled() bool { return os.Getenv(EnvEndpoint) != "" || os.Getenv(EnvTracesEndpoint) != "" }

// Start installs, when Enabled, a tracer provider that batches spans to
// the OTLP/gRPC endpoint the environment names, for a process whose
// service.name is service (ate-up, ate-router, …), and the W3C trace
// context propagator. The returned function flushes and stops the
// exporter (bounded by its ctx); without tracing it does nothing. The
// exporter connects lazily: an unreachable collector costs dropped
// spans, never a failed start. Errors: the exporter's configuration.
func Start(ctx context.Context, service string) (shutdown func(context.Context) error, err error) {
	if !Enabled() {
		return func(context.Context) error { return nil }, nil
	}
	exp, err := otlptracegrpc.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("otlp trace exporter: %w", err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(attribute.String("service.name", service)))
	if err != nil {
		return nil, fmt.Errorf("trace resource: %w", err)
	}
	// The sampler is the SDK's default (parent-based, always on), or
	// what OTEL_TRACES_SAMPLER says.
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	return tp.Shutdown, nil
}

// Span starts a span of ate's own tracer named name (the convention is
// "component.step", e.g. "lifecycle.claim") as a child of ctx's span.
// Our spans only join traces, never start one: without a span in ctx
// (tracing off, or work no request or call started, such as an idle
// suspend) it returns ctx and its no-op span, at the cost of one context
// lookup. The caller ends it, usually with End.
func Span(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	parent := trace.SpanFromContext(ctx)
	if !parent.SpanContext().IsValid() {
		return ctx, parent
	}
	return otel.Tracer(instrumentation).Start(ctx, name, trace.WithAttributes(attrs...))
}

// End ends span, marking it failed with err when err is not nil.
func End(span trace.Span, err error) {
	if err != nil && !errors.Is(err, context.Canceled) {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// TraceID is the hex trace id of ctx's span, "" when there is none
// (tracing off).
func TraceID(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.HasTraceID() {
		return ""
	}
	return sc.TraceID().String()
}

// Handler wraps h in otelhttp's server instrumentation (a span per
// request named operation, joined to an incoming traceparent) when
// Enabled; otherwise it returns h.
func Handler(h http.Handler, operation string) http.Handler {
	if !Enabled() {
		return h
	}
	return otelhttp.NewHandler(h, operation)
}

// Transport wraps rt (nil: http.DefaultTransport) in otelhttp's client
// instrumentation (a span per outbound request, traceparent sent on)
// when Enabled; otherwise it returns rt.
func Transport(rt http.RoundTripper) http.RoundTripper {
	if !Enabled() {
		return rt
	}
	if rt == nil {
		rt = http.DefaultTransport
	}
	return otelhttp.NewTransport(rt)
}

// ServerOptions are otelgrpc's server stats handler when Enabled (a span
// per call, joined to the caller's trace from gRPC metadata); none
// otherwise.
func ServerOptions() []grpc.ServerOption {
	if !Enabled() {
		return nil
	}
	return []grpc.ServerOption{grpc.StatsHandler(otelgrpc.NewServerHandler())}
}

// DialOptions are otelgrpc's client stats handler when Enabled (a span
// per call, trace context sent in gRPC metadata); none otherwise.
func DialOptions() []grpc.DialOption {
	if !Enabled() {
		return nil
	}
	return []grpc.DialOption{grpc.WithStatsHandler(otelgrpc.NewClientHandler())}
}
