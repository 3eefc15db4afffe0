package e2e

import (
	"context"
	"encoding/hex"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
)

// otlpReceiver is an OTLP/gRPC trace collector inside the test: it keeps
// every span exported to it.
type otlpReceiver struct {
	coltracepb.UnimplementedTraceServiceServer
	addr string

	mu    sync.Mutex
	spans []*tracepb.Span
}

func (r *otlpReceiver) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			r.spans = append(r.spans, ss.GetSpans()...)
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// count is how many spans were received.
func (r *otlpReceiver) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.spans)
}

// trace returns the spans received so far of trace id (hex).
func (r *otlpReceiver) trace(id string) []*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*tracepb.Span
	for _, s := range r.spans {
		if hex.EncodeToString(s.GetTraceId()) == id {
			out = append(out, s)
		}
	}
	return out
}

// startOTLPReceiver serves an otlpReceiver on a free loopback port until
// the test ends, and points the OTLP exporter of processes the test
// starts at it (exporting every 100 ms).
func startOTLPReceiver(t testing.TB) *otlpReceiver {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &otlpReceiver{addr: ln.Addr().String()}
	gs := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(gs, r)
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+r.addr)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
	return r
}

// TestTraces: the first request to an actor, which resumes it, is one
// trace from the router's request to the node's restore and wakeup probe,
// every span parented on the step that waited for it, and the router's
// access log line names that trace.
func TestTraces(t *testing.T) {
	recv := startOTLPReceiver(t)
	in := startUp(t, 1, "--demo")
	in.mustCount("default/counter-1", 1)

	var traceID string
	waitFor(t, "the access log line of the resuming request", 10*time.Second, func() bool {
		for _, rec := range in.logRecords("request") {
			if rec["activation"] == "resumed" && loggedActor(rec) == "counter-1" {
				traceID, _ = rec["trace_id"].(string)
				return true
			}
		}
		return false
	})
	if len(traceID) != 32 {
		t.Fatalf("access log trace_id = %q, want 32 hex digits", traceID)
	}

	// Each expected span by name and kind, and the span it must descend
	// from (directly when direct).
	type want struct {
		name   string
		kind   tracepb.Span_SpanKind
		parent string
		direct bool
	}
	const (
		server = tracepb.Span_SPAN_KIND_SERVER
		client = tracepb.Span_SPAN_KIND_CLIENT
		inner  = tracepb.Span_SPAN_KIND_INTERNAL
	)
	wants := []want{
		{"GET", server, "", false}, // otelhttp names server spans by method
		{"router.park", inner, "GET", true},
		{"ate.v1.Control/ResumeActor", client, "router.park", false},
		{"ate.v1.Control/ResumeActor", server, "ate.v1.Control/ResumeActor", true},
		{"lifecycle.resume", inner, "ate.v1.Control/ResumeActor", false},
		{"lifecycle.claim", inner, "lifecycle.resume", true},
		{"node.start", inner, "lifecycle.resume", false},
		{"node.restore", inner, "node.start", true},
		{"node.wakeup_probe", inner, "node.start", true},
	}
	var spans []*tracepb.Span
	find := func(name string, kind tracepb.Span_SpanKind) *tracepb.Span {
		for _, s := range spans {
			if s.GetName() == name && (kind == 0 || s.GetKind() == kind) {
				return s
			}
		}
		return nil
	}
	missing := func() []string {
		spans = recv.trace(traceID)
		var out []string
		for _, w := range wants {
			if find(w.name, w.kind) == nil {
				out = append(out, w.name+" ("+w.kind.String()+")")
			}
		}
		return out
	}
	defer func() {
		if t.Failed() {
			t.Logf("trace %s lacks %v (%d spans received in all)", traceID, missing(), recv.count())
			for _, s := range spans {
				t.Logf("span %s kind=%s id=%x parent=%x", s.GetName(), s.GetKind(), s.GetSpanId(), s.GetParentSpanId())
			}
		}
	}()
	waitFor(t, "the activation's spans at the OTLP receiver", 15*time.Second, func() bool { return len(missing()) == 0 })
	byID := map[string]*tracepb.Span{}
	for _, s := range spans {
		byID[string(s.GetSpanId())] = s
	}
	// ancestors lists s's ancestors' names, nearest first.
	ancestors := func(s *tracepb.Span) []string {
		var out []string
		for p := byID[string(s.GetParentSpanId())]; p != nil; p = byID[string(p.GetParentSpanId())] {
			out = append(out, p.GetName())
		}
		return out
	}
	for i, w := range wants {
		s := find(w.name, w.kind)
		up := ancestors(s)
		switch {
		case w.parent == "":
			if len(s.GetParentSpanId()) != 0 {
				t.Errorf("%s (%s) has a parent; the router's span should be the trace's root", w.name, w.kind)
			}
		case w.direct && (len(up) == 0 || up[0] != w.parent):
			t.Errorf("%s (%s): parent chain %v, want parent %s", w.name, w.kind, up, w.parent)
		case !w.direct && !slices.Contains(up, w.parent):
			t.Errorf("%s (%s): parent chain %v, want %s among them", w.name, w.kind, up, w.parent)
		}
		// The server span of a call hangs on its client span.
		if i == 3 && string(s.GetParentSpanId()) != string(find(w.name, client).GetSpanId()) {
			t.Errorf("ResumeActor's server span is not the child of its client span")
		}
	}
}
