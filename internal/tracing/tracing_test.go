package tracing

import (
	"context"
	"errors"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// TestOff: without the OTLP environment nothing is wrapped, spans are
// no-ops and there is no trace id.
func TestOff(t *testing.T) {
	t.Setenv(EnvEndpoint, "")
	t.Setenv(EnvTracesEndpoint, "")
	if Enabled() {
		t.Fatal("Enabled with no endpoint set")
	}
	if len(ServerOptions()) != 0 || len(DialOptions()) != 0 {
		t.Fatal("gRPC instrumentation installed with tracing off")
	}
	ctx, span := Span(context.Background(), "x")
	if span.SpanContext().IsValid() || TraceID(ctx) != "" {
		t.Fatal("a recording span with tracing off")
	}
	End(span, errors.New("boom"))
	shutdown, err := Start(context.Background(), "test")
	if err != nil {
		t.Fatal(err)
	}
	if err := shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestSpanParent: a span started under another joins its trace as its
// child, and End records an error as the span's status.
func TestSpanParent(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp) // what Start does; restored below
	t.Cleanup(func() { otel.SetTracerProvider(prev) })
	ctx, parent := tp.Tracer("t").Start(context.Background(), "parent")
	_, child := Span(ctx, "child")
	End(child, errors.New("boom"))
	parent.End()
	spans := rec.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans ended, want 2", len(spans))
	}
	c := spans[0]
	if c.Name() != "child" || c.Parent().SpanID() != parent.SpanContext().SpanID() {
		t.Fatalf("span %s has parent %s, want child of %s", c.Name(), c.Parent().SpanID(), parent.SpanContext().SpanID())
	}
	if c.Status().Code != codes.Error {
		t.Fatalf("failed span's status = %v", c.Status())
	}
	if got := TraceID(ctx); got != parent.SpanContext().TraceID().String() {
		t.Fatalf("TraceID = %s, want the parent's", got)
	}
}

// BenchmarkSpanOff is the cost of one of ate's own spans with tracing
// off, on a context without a span (the common case then).
func BenchmarkSpanOff(b *testing.B) {
	b.Setenv(EnvEndpoint, "")
	b.Setenv(EnvTracesEndpoint, "")
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		_, span := Span(ctx, "x")
		End(span, nil)
	}
}
