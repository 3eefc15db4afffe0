package dashboard

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	atev1 "substrate.dev/ate/api/ate/v1"
)

// fakeControl stands in for the Control API (the dashboard's neighbour):
// it serves fixed lists and records the actions and the authorization
// metadata they carried.
type fakeControl struct {
	actors    []*atev1.Actor
	templates []*atev1.ActorTemplate
	workers   []*atev1.Worker
	nodes     []*atev1.Node
	nodesErr  error
	// actionErr, when set, refuses every action.
	actionErr error

	mu      sync.Mutex
	actions []string // "suspend default/a"
	auth    []string // the authorization metadata of each action
}

var _ Control = (*fakeControl)(nil)

func (f *fakeControl) ListActors(_ context.Context, in *atev1.ListActorsRequest, _ ...grpc.CallOption) (*atev1.ListActorsResponse, error) {
	return &atev1.ListActorsResponse{Actors: f.actors}, nil
}

func (f *fakeControl) ListActorTemplates(context.Context, *atev1.ListActorTemplatesRequest, ...grpc.CallOption) (*atev1.ListActorTemplatesResponse, error) {
	return &atev1.ListActorTemplatesResponse{Templates: f.templates}, nil
}

func (f *fakeControl) ListWorkers(context.Context, *atev1.ListWorkersRequest, ...grpc.CallOption) (*atev1.ListWorkersResponse, error) {
	return &atev1.ListWorkersResponse{Workers: f.workers}, nil
}

func (f *fakeControl) ListNodes(context.Context, *atev1.ListNodesRequest, ...grpc.CallOption) (*atev1.ListNodesResponse, error) {
	if f.nodesErr != nil {
		return nil, f.nodesErr
	}
	return &atev1.ListNodesResponse{Nodes: f.nodes}, nil
}

func (f *fakeControl) record(ctx context.Context, action, atespace, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.actions = append(f.actions, action+" "+atespace+"/"+name)
	md, _ := metadata.FromOutgoingContext(ctx)
	f.auth = append(f.auth, strings.Join(md.Get("authorization"), ","))
	return f.actionErr
}

func (f *fakeControl) SuspendActor(ctx context.Context, in *atev1.SuspendActorRequest, _ ...grpc.CallOption) (*atev1.Actor, error) {
	if err := f.record(ctx, "suspend", in.GetAtespace(), in.GetName()); err != nil {
		return nil, err
	}
	return &atev1.Actor{Atespace: in.GetAtespace(), Name: in.GetName(), State: atev1.ActorState_SUSPENDED}, nil
}

func (f *fakeControl) ResumeActor(ctx context.Context, in *atev1.ResumeActorRequest, _ ...grpc.CallOption) (*atev1.Actor, error) {
	if err := f.record(ctx, "resume", in.GetAtespace(), in.GetName()); err != nil {
		return nil, err
	}
	return &atev1.Actor{Atespace: in.GetAtespace(), Name: in.GetName(), State: atev1.ActorState_RUNNING}, nil
}

func (f *fakeControl) DeleteActor(ctx context.Context, in *atev1.DeleteActorRequest, _ ...grpc.CallOption) (*atev1.DeleteActorResponse, error) {
	if err := f.record(ctx, "delete", in.GetAtespace(), in.GetName()); err != nil {
		return nil, err
	}
	return &atev1.DeleteActorResponse{}, nil
}

func (f *fakeControl) recorded() (actions, auth []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.actions...), append([]string(nil), f.auth...)
}

var testNow = time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)

func newTestHandler(t *testing.T, c *fakeControl, events EventLister) *Handler {
	t.Helper()
	h, err := New(Config{Control: c, Events: events, Now: func() time.Time { return testNow }})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code, rec.Body.String()
}

// olderStatus is a template status with phase p as an API server older
// than the phase enum sends it: phase_name alone.
func olderStatus(p atev1.ActorTemplateStatus_Phase) *atev1.ActorTemplateStatus {
	st := &atev1.ActorTemplateStatus{}
	st.FillPhase(p)
	st.Phase = atev1.ActorTemplateStatus_PHASE_UNSPECIFIED
	return st
}

func TestPageShowsEverySection(t *testing.T) {
	c := &fakeControl{
		actors: []*atev1.Actor{
			{Atespace: "default", Name: "counter-1", Template: "counter", State: atev1.ActorState_RUNNING, Worker: "w-0",
				LastActivity: timestamppb.New(testNow.Add(-12 * time.Second))},
			{Atespace: "team", Name: "idle-1", Template: "counter", State: atev1.ActorState_SUSPENDED,
				Reason: atev1.CheckpointReason_EVICTED, EvictedFor: "default/counter-1"},
		},
		templates: []*atev1.ActorTemplate{{Atespace: "default", Name: "counter",
			Status: &atev1.ActorTemplateStatus{Phase: atev1.ActorTemplateStatus_READY, GoldenSnapshot: "golden-0123456789abcdef0123", ImageDigest: "sha256:feedface"}},
			{Atespace: "default", Name: "broken"},
			{Atespace: "default", Name: "older", Status: olderStatus(atev1.ActorTemplateStatus_FAILED)}},
		workers: []*atev1.Worker{{Name: "w-1", Node: "local", Phase: atev1.Worker_FREE}, {Name: "w-0", Node: "local", Phase: atev1.Worker_CLAIMED, Actor: "default/counter-1"}},
		nodes:   []*atev1.Node{{Name: "local", Phase: atev1.Node_READY, Workers: 2, FreeWorkers: 1}},
	}
	events := EventListerFunc(func(context.Context, int) ([]Event, error) {
		return []Event{{Time: testNow.Add(-time.Minute), Type: "ActorResumed", Object: "default/counter-1", Message: "restored from golden"}}, nil
	})
	h := newTestHandler(t, c, events)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	code, body := rec.Code, rec.Body.String()
	if code != http.StatusOK {
		t.Fatalf("GET / = %d\n%s", code, body)
	}
	if csp := rec.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
		t.Errorf("Content-Security-Policy %q does not confine the page to its own origin", csp)
	}
	for _, want := range []string{
		`<tr data-actor="default/counter-1" data-state="RUNNING">`,
		`<tr data-actor="team/idle-1" data-state="SUSPENDED">`,
		`12s ago`, `EVICTED for default/counter-1`,
		`data-action="suspend" data-actor="default/counter-1">Suspend`,
		`data-action="resume" data-actor="default/counter-1" disabled>Resume`,
		`data-action="suspend" data-actor="team/idle-1" disabled>Suspend`,
		`<tr data-template="default/counter">`, `golden-012345678…`, `feedface`, `UNKNOWN`,
		`<tr data-worker="w-0">`, `<tr data-node="local">`, `2 (1)`,
		// Each state's and phase's pill.
		`<span class="pill ok">RUNNING</span>`, `<span class="pill idle">SUSPENDED</span>`,
		`<span class="pill ok">READY</span>`, `<span class="pill busy">UNKNOWN</span>`, `<span class="pill bad">FAILED</span>`,
		`<span class="pill ok">FREE</span>`, `<span class="pill busy">CLAIMED</span>`,
		`ActorResumed`, `restored from golden`,
		`No metrics are recorded`,
		`src="static/dashboard.js"`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	// Workers are listed by node and name.
	if strings.Index(body, `data-worker="w-0"`) > strings.Index(body, `data-worker="w-1"`) {
		t.Error("workers not sorted by name")
	}
}

func TestContentIsThePagesRefreshablePart(t *testing.T) {
	c := &fakeControl{actors: []*atev1.Actor{{Atespace: "default", Name: "a", State: atev1.ActorState_PAUSED}}}
	code, body := get(t, newTestHandler(t, c, nil), "/content")
	if code != http.StatusOK {
		t.Fatalf("GET /content = %d", code)
	}
	if strings.Contains(body, "<html") || !strings.Contains(body, `data-actor="default/a" data-state="PAUSED"`) {
		t.Errorf("content is not the bare sections:\n%s", body)
	}
	if !strings.Contains(body, "No events recorded.") {
		t.Error("no-event source not said")
	}
}

func TestSectionErrorLeavesTheRest(t *testing.T) {
	c := &fakeControl{actors: []*atev1.Actor{{Atespace: "default", Name: "a", State: atev1.ActorState_RUNNING}},
		nodesErr: status.Error(codes.Unavailable, "record store unreachable")}
	code, body := get(t, newTestHandler(t, c, nil), "/")
	if code != http.StatusOK {
		t.Fatalf("GET / = %d", code)
	}
	if !strings.Contains(body, "Could not list nodes: record store unreachable (Unavailable)") {
		t.Error("nodes error not shown")
	}
	if !strings.Contains(body, `data-actor="default/a"`) {
		t.Error("actors not shown beside the nodes error")
	}
}

func TestStaticAssets(t *testing.T) {
	h := newTestHandler(t, &fakeControl{}, nil)
	for _, p := range []string{"/static/dashboard.js", "/static/dashboard.css"} {
		if code, body := get(t, h, p); code != http.StatusOK || len(body) < 100 {
			t.Errorf("GET %s = %d, %d bytes", p, code, len(body))
		}
	}
	if code, _ := get(t, h, "/static/page.html"); code != http.StatusNotFound {
		t.Errorf("the page template is served as a static file: %d", code)
	}
}

func TestActions(t *testing.T) {
	refused := status.Error(codes.FailedPrecondition, "actor default/a is RUNNING: suspend it first, or delete with --force")
	tests := []struct {
		name      string
		path      string
		header    map[string]string
		actionErr error
		wantCode  int
		wantBody  actionResult
		// wantAction is what reached the Control API; empty: nothing.
		wantAction string
	}{
		{name: "suspend", path: "/actors/default/a/suspend", header: map[string]string{"Sec-Fetch-Site": "same-origin"},
			wantCode: http.StatusOK, wantBody: actionResult{Actor: "default/a", State: "SUSPENDED"}, wantAction: "suspend default/a"},
		{name: "resume without browser headers", path: "/actors/team/b/resume",
			wantCode: http.StatusOK, wantBody: actionResult{Actor: "team/b", State: "RUNNING"}, wantAction: "resume team/b"},
		{name: "delete", path: "/actors/default/a/delete", header: map[string]string{"Origin": "http://dash.example"},
			wantCode: http.StatusOK, wantBody: actionResult{Actor: "default/a", State: "DELETED"}, wantAction: "delete default/a"},
		{name: "refused by the API", path: "/actors/default/a/delete", actionErr: refused,
			wantCode: http.StatusConflict, wantAction: "delete default/a",
			wantBody: actionResult{Actor: "default/a", Error: "delete default/a: actor default/a is RUNNING: suspend it first, or delete with --force"}},
		{name: "not found", path: "/actors/default/gone/suspend", actionErr: status.Error(codes.NotFound, "actor default/gone not found"),
			wantCode: http.StatusNotFound, wantAction: "suspend default/gone",
			wantBody: actionResult{Actor: "default/gone", Error: "suspend default/gone: actor default/gone not found"}},
		{name: "unknown action", path: "/actors/default/a/explode",
			wantCode: http.StatusNotFound, wantBody: actionResult{Error: `unknown action "explode": use suspend, resume or delete`}},
		{name: "cross-site", path: "/actors/default/a/delete", header: map[string]string{"Sec-Fetch-Site": "cross-site"},
			wantCode: http.StatusForbidden},
		{name: "other origin", path: "/actors/default/a/suspend", header: map[string]string{"Origin": "http://evil.example"},
			wantCode: http.StatusForbidden},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &fakeControl{actionErr: tt.actionErr}
			h := newTestHandler(t, c, nil)
			req := httptest.NewRequest(http.MethodPost, "http://dash.example"+tt.path, nil)
			for k, v := range tt.header {
				req.Header.Set(k, v)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tt.wantCode {
				t.Fatalf("POST %s = %d, want %d: %s", tt.path, rec.Code, tt.wantCode, rec.Body)
			}
			if tt.wantCode != http.StatusForbidden {
				var got actionResult
				if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
					t.Fatalf("answer %q: %v", rec.Body, err)
				}
				if got != tt.wantBody {
					t.Errorf("answer %+v, want %+v", got, tt.wantBody)
				}
			}
			actions, _ := c.recorded()
			if want := tt.wantAction; (want == "" && len(actions) > 0) || (want != "" && (len(actions) != 1 || actions[0] != want)) {
				t.Errorf("Control API got %q, want %q", actions, want)
			}
		})
	}
}

func TestActionsCarryTheCallersAuthorization(t *testing.T) {
	c := &fakeControl{}
	h := newTestHandler(t, c, nil)
	req := httptest.NewRequest(http.MethodPost, "/actors/default/a/suspend", nil)
	req.Header.Set("Authorization", "Bearer user-token")
	h.ServeHTTP(httptest.NewRecorder(), req)
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/actors/default/a/resume", nil))
	if _, auth := c.recorded(); len(auth) != 2 || auth[0] != "Bearer user-token" || auth[1] != "" {
		t.Errorf("authorization metadata %q, want the caller's, then none", auth)
	}
}

func TestGetCannotAct(t *testing.T) {
	c := &fakeControl{}
	code, _ := get(t, newTestHandler(t, c, nil), "/actors/default/a/delete")
	if code != http.StatusMethodNotAllowed {
		t.Errorf("GET of an action = %d, want 405", code)
	}
	if actions, _ := c.recorded(); len(actions) > 0 {
		t.Errorf("a GET acted: %q", actions)
	}
}

func TestNewNeedsControl(t *testing.T) {
	if _, err := New(Config{}); err == nil {
		t.Error("New without a Control client succeeded")
	}
}

func TestPageChartsLatency(t *testing.T) {
	reg := prometheus.NewRegistry()
	wait := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "ate_router_activation_wait_seconds",
		Buckets: []float64{0.05, 0.1, 0.25}}, []string{"activation"})
	reg.MustRegister(wait)
	wait.WithLabelValues("resumed").Observe(0.08)
	lh := NewLatencyHistory(LatencyConfig{Gatherer: reg})
	h, err := New(Config{Control: &fakeControl{}, Latency: lh, Now: func() time.Time { return testNow }})
	if err != nil {
		t.Fatal(err)
	}
	_, body := get(t, h, "/content")
	for _, want := range []string{`<polyline class="p50"`, `<polyline class="p95"`, "1 in the last 1m0s",
		"Resume (lifecycle", "not recorded by this process"} {
		if !strings.Contains(body, want) {
			t.Errorf("latency section lacks %q", want)
		}
	}
}

func TestEventsErrorShown(t *testing.T) {
	events := EventListerFunc(func(context.Context, int) ([]Event, error) {
		return nil, status.Error(codes.PermissionDenied, "not allowed to list events")
	})
	_, body := get(t, newTestHandler(t, &fakeControl{}, events), "/content")
	if !strings.Contains(body, "Could not list events: not allowed to list events (PermissionDenied)") {
		t.Error("events error not shown")
	}
}

// TestNoEvents: the placeholder source lists nothing and fails nothing.
func TestNoEvents(t *testing.T) {
	evs, err := NoEvents{}.RecentEvents(context.Background(), 10)
	if err != nil || len(evs) != 0 {
		t.Errorf("NoEvents = %v, %v", evs, err)
	}
}

// listEventsFunc is the Control API's ListEvents, as a closure.
type listEventsFunc func(context.Context, *atev1.ListEventsRequest) (*atev1.ListEventsResponse, error)

func (f listEventsFunc) ListEvents(ctx context.Context, in *atev1.ListEventsRequest, _ ...grpc.CallOption) (*atev1.ListEventsResponse, error) {
	return f(ctx, in)
}

// TestControlEvents: ListEvents' oldest-first answer is shown newest
// first, with the limit passed on, warnings marked and a transition
// described where the event has no message.
func TestControlEvents(t *testing.T) {
	var gotLimit int32
	c := listEventsFunc(func(_ context.Context, in *atev1.ListEventsRequest) (*atev1.ListEventsResponse, error) {
		gotLimit = in.GetLimit()
		return &atev1.ListEventsResponse{Events: []*atev1.Event{
			{Seq: 1, Time: timestamppb.New(testNow.Add(-2 * time.Minute)), Type: "Normal", Atespace: "default", Actor: "a", FromState: "SUSPENDED", ToState: "RESUMING", Worker: "w1"},
			{Seq: 2, Time: timestamppb.New(testNow.Add(-time.Minute)), Type: "Warning", Atespace: "default", Actor: "a", FromState: "RESUMING", ToState: "CRASHED", Message: "resume failed: corrupt snapshot"},
		}}, nil
	})
	evs, err := ControlEvents(c).RecentEvents(context.Background(), 7)
	if err != nil {
		t.Fatal(err)
	}
	want := []Event{
		{Time: testNow.Add(-time.Minute), Type: "CRASHED", Object: "default/a", Message: "resume failed: corrupt snapshot", Warning: true},
		{Time: testNow.Add(-2 * time.Minute), Type: "RESUMING", Object: "default/a", Message: "SUSPENDED → RESUMING on w1"},
	}
	if gotLimit != 7 || !reflect.DeepEqual(evs, want) {
		t.Errorf("limit %d, events %+v; want 7, %+v", gotLimit, evs, want)
	}
	refused := listEventsFunc(func(context.Context, *atev1.ListEventsRequest) (*atev1.ListEventsResponse, error) {
		return nil, status.Error(codes.PermissionDenied, "no")
	})
	if _, err := ControlEvents(refused).RecentEvents(context.Background(), 7); status.Code(err) != codes.PermissionDenied {
		t.Errorf("refused ListEvents: %v", err)
	}
}
