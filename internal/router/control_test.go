package router

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/names"
	"substrate.dev/ate/internal/testwait"
	"substrate.dev/ate/internal/tunnelproto"
)

// fakeControl is a Control server over a map of actors and workers.
type fakeControl struct {
	atev1.UnimplementedControlServer

	mu      sync.Mutex
	actors  map[string]*atev1.Actor // by "<atespace>/<name>"; guarded by mu
	workers []*atev1.Worker         // guarded by mu
	// templates by "<atespace>/<name>"; a missing one is served with an
	// empty spec. Guarded by mu.
	templates map[string]*atev1.ActorTemplate
	// calls lists the idle RPCs and activity reports received, e.g.
	// "pause default/app"; guarded by mu.
	calls []string
	// onResume sets the resumed actor's worker; nil means "w1".
	onResume func(a *atev1.Actor) error
	// evicts maps "<atespace>/<name>" to the values of the ate-evicted
	// header its successful ResumeActor sends; none when missing.
	evicts map[string][]string
	// pauseErr, if set, is PauseActor's answer; guarded by mu.
	pauseErr     error
	listWorkers  atomic.Int64
	templateGets atomic.Int64
	// ingressTokens maps "<atespace>/<token>" to the subject
	// ReviewIngressToken accepts it as; reviewErr, if set, is its answer
	// instead. Guarded by mu.
	ingressTokens map[string]string
	reviewErr     error
	resumeCalls   atomic.Int64
}

func (f *fakeControl) ReviewIngressToken(_ context.Context, req *atev1.ReviewIngressTokenRequest) (*atev1.ReviewIngressTokenResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.reviewErr != nil {
		return nil, f.reviewErr
	}
	sub, ok := f.ingressTokens[req.GetAtespace()+"/"+req.GetToken()]
	return &atev1.ReviewIngressTokenResponse{Allowed: ok, Subject: sub}, nil
}

func (f *fakeControl) GetActorTemplate(_ context.Context, req *atev1.GetActorTemplateRequest) (*atev1.ActorTemplate, error) {
	f.templateGets.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if t, ok := f.templates[req.GetAtespace()+"/"+req.GetName()]; ok {
		return t, nil
	}
	return &atev1.ActorTemplate{Atespace: req.GetAtespace(), Name: req.GetName(), Uid: "tpl-" + req.GetName(),
		Spec: &atev1.ActorTemplateSpec{}}, nil
}

func (f *fakeControl) PauseActor(_ context.Context, req *atev1.PauseActorRequest) (*atev1.Actor, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "pause "+req.GetAtespace()+"/"+req.GetName()+" "+req.GetReason().String())
	if f.pauseErr != nil {
		return nil, f.pauseErr
	}
	return &atev1.Actor{Atespace: req.GetAtespace(), Name: req.GetName(), State: atev1.ActorState_PAUSED}, nil
}

func (f *fakeControl) SuspendActor(_ context.Context, req *atev1.SuspendActorRequest) (*atev1.Actor, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "suspend "+req.GetAtespace()+"/"+req.GetName()+" "+req.GetReason().String())
	return &atev1.Actor{Atespace: req.GetAtespace(), Name: req.GetName(), State: atev1.ActorState_SUSPENDED}, nil
}

func (f *fakeControl) RecordActivity(_ context.Context, req *atev1.RecordActivityRequest) (*atev1.RecordActivityResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, a := range req.GetActivities() {
		f.calls = append(f.calls, "activity "+a.GetAtespace()+"/"+a.GetName())
	}
	return &atev1.RecordActivityResponse{}, nil
}

func (f *fakeControl) setPauseErr(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pauseErr = err
}

func (f *fakeControl) callLog() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

func (f *fakeControl) GetActor(_ context.Context, req *atev1.GetActorRequest) (*atev1.Actor, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	a, ok := f.actors[req.GetAtespace()+"/"+req.GetName()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "actor %s/%s not found", req.GetAtespace(), req.GetName())
	}
	return a, nil
}

func (f *fakeControl) ResumeActor(ctx context.Context, req *atev1.ResumeActorRequest) (*atev1.Actor, error) {
	f.resumeCalls.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	key := req.GetAtespace() + "/" + req.GetName()
	a, ok := f.actors[key]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "actor %s not found", key)
	}
	if f.onResume != nil {
		if err := f.onResume(a); err != nil {
			return nil, err
		}
	} else {
		a.Worker = "w1"
	}
	if vs, ok := f.evicts[key]; ok {
		// The literal, not the router's constant: the name is the API
		// server's wire contract.
		if err := grpc.SetHeader(ctx, metadata.MD{"ate-evicted": vs}); err != nil {
			return nil, err
		}
	}
	a.State = atev1.ActorState_RUNNING
	return a, nil
}

func (f *fakeControl) ListWorkers(context.Context, *atev1.ListWorkersRequest) (*atev1.ListWorkersResponse, error) {
	f.listWorkers.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	return &atev1.ListWorkersResponse{Workers: f.workers}, nil
}

func (f *fakeControl) setWorkers(ws ...*atev1.Worker) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.workers = ws
}

// newControlClient serves fc over an in-memory connection.
func newControlClient(t *testing.T, fc *fakeControl) atev1.ControlClient {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	gs := grpc.NewServer()
	atev1.RegisterControlServer(gs, fc)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = gs.Serve(lis)
	}()
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = conn.Close()
		gs.Stop()
		<-served
	})
	return atev1.NewControlClient(conn)
}

func TestControlResolver(t *testing.T) {
	key := names.ActorKey{Atespace: "default", Name: "app"}
	actor := func(state atev1.ActorState, worker string) map[string]*atev1.Actor {
		return map[string]*atev1.Actor{"default/app": {Atespace: "default", Name: "app", Uid: "u1", State: state, Worker: worker}}
	}
	w1 := &atev1.Worker{Name: "w1", TunnelAddress: "10.0.0.1:7000"}
	tests := []struct {
		name      string
		actors    map[string]*atev1.Actor
		workers   []*atev1.Worker
		onResume  func(*atev1.Actor) error
		resume    bool // call Resume instead of Lookup
		want      Target
		wantOK    bool
		wantErr   error      // the Resolver error expected
		wantCode  codes.Code // the API's status in its chain (codes.OK: none)
		wantLists int64
	}{
		{name: "lookup running", actors: actor(atev1.ActorState_RUNNING, "w1"), workers: []*atev1.Worker{w1},
			want: Target{Actor: key, UID: "u1", Worker: "w1", TunnelAddr: "10.0.0.1:7000"}, wantOK: true, wantLists: 1},
		// Not running: the incarnation and its template's policy only,
		// for a listening stream to decide whether it may wake the actor.
		{name: "lookup running with an assignment", workers: []*atev1.Worker{w1},
			actors: map[string]*atev1.Actor{"default/app": {Atespace: "default", Name: "app", Uid: "u1", State: atev1.ActorState_RUNNING, Worker: "w1", Assignment: 42}},
			want:   Target{Actor: key, UID: "u1", Worker: "w1", TunnelAddr: "10.0.0.1:7000", Assignment: "42"}, wantOK: true, wantLists: 1},
		{name: "lookup suspended", actors: actor(atev1.ActorState_SUSPENDED, ""), want: Target{Actor: key, UID: "u1"}, wantOK: false},
		{name: "lookup resuming is not running", actors: actor(atev1.ActorState_RESUMING, "w1"), want: Target{Actor: key, UID: "u1"}, wantOK: false},
		{name: "lookup unknown actor", actors: nil, wantErr: ErrActorNotFound, wantCode: codes.NotFound},
		// Its node lost, the worker gone and the actor's crash not yet
		// read: the request waits for the recovery (retryable).
		{name: "lookup running on an unlisted worker", actors: actor(atev1.ActorState_RUNNING, "w9"), workers: []*atev1.Worker{w1},
			wantErr: errNodeUnreachable, wantLists: 1},
		{name: "resume", actors: actor(atev1.ActorState_SUSPENDED, ""), workers: []*atev1.Worker{w1}, resume: true,
			want: Target{Actor: key, UID: "u1", Worker: "w1", TunnelAddr: "10.0.0.1:7000"}, wantOK: true, wantLists: 1},
		{name: "resume without a free worker", actors: actor(atev1.ActorState_SUSPENDED, ""), resume: true,
			onResume: func(*atev1.Actor) error { return status.Error(codes.ResourceExhausted, "no free worker") },
			wantErr:  ErrNoCapacity, wantCode: codes.ResourceExhausted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fc := &fakeControl{actors: tt.actors, workers: tt.workers, onResume: tt.onResume}
			r := NewControlResolver(newControlClient(t, fc), nil)
			var got Target
			var ok bool
			var err error
			if tt.resume {
				got, _, err = r.Resume(t.Context(), key)
				ok = err == nil
			} else {
				got, ok, err = r.Lookup(t.Context(), key)
			}
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			// The API's status survives the translation, for logs.
			if st, _ := status.FromError(err); tt.wantCode != codes.OK && st.Code() != tt.wantCode {
				t.Fatalf("err = %v, want code %v", err, tt.wantCode)
			}
			if err != nil {
				return
			}
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("got %+v ok=%t, want %+v ok=%t", got, ok, tt.want, tt.wantOK)
			}
			if n := fc.listWorkers.Load(); n != tt.wantLists {
				t.Errorf("ListWorkers called %d times, want %d", n, tt.wantLists)
			}
		})
	}
}

// TestFromControl: every status the Control API (or grpc-go) can answer
// becomes the router's error, keeping the status and its message; an
// Unavailable is a failed resume only when the API server says so.
func TestFromControl(t *testing.T) {
	fromAPIReason := func(c codes.Code, reason, msg string) error {
		st, err := status.New(c, msg).WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: atev1.ErrorDomain})
		if err != nil {
			t.Fatal(err)
		}
		return st.Err()
	}
	fromAPI := func(c codes.Code, msg string) error { return fromAPIReason(c, "X", msg) }
	tests := []struct {
		name string
		err  error
		want []error
	}{
		{"not found", fromAPI(codes.NotFound, "actor default/x not found"), []error{ErrActorNotFound}},
		{"no free worker", fromAPI(codes.ResourceExhausted, "no free worker"), []error{ErrNoCapacity}},
		{"deadline from the server", fromAPI(codes.DeadlineExceeded, "deadline"), []error{ErrNoCapacity, context.DeadlineExceeded}},
		{"deadline by grpc-go's clock", status.Error(codes.DeadlineExceeded, "stream terminated by RST_STREAM"),
			[]error{ErrNoCapacity, context.DeadlineExceeded}},
		{"aborted", fromAPI(codes.Aborted, "record changed"), []error{ErrConflict}},
		{"invalid argument", fromAPI(codes.InvalidArgument, "bad"), []error{ErrInvalid}},
		{"failed precondition", fromAPI(codes.FailedPrecondition, "DELETING"), []error{ErrNotResumable}},
		{"resume failed on the server", fromAPI(codes.Unavailable, "restore failed"), []error{ErrResumeFailed}},
		{"store unavailable on the server", fromAPIReason(codes.Unavailable, "STORE_UNAVAILABLE", "store unavailable"), []error{ErrControlPlane, ErrUnavailable}},
		{"transport unavailable", status.Error(codes.Unavailable, "connection refused"), []error{ErrControlPlane, ErrUnavailable}},
		{"unavailable from another domain", status.Error(codes.Unavailable, "proxy says no"), []error{ErrControlPlane, ErrUnavailable}},
		{"canceled", status.Error(codes.Canceled, "context canceled"), []error{context.Canceled}},
		{"internal", fromAPI(codes.Internal, "boom"), []error{ErrControlPlane}},
		{"unimplemented", status.Error(codes.Unimplemented, "unknown method"), []error{ErrControlPlane}},
		{"not a status", errors.New("odd"), []error{ErrControlPlane}},
	}
	all := []error{ErrActorNotFound, ErrNoCapacity, ErrConflict, ErrInvalid, ErrNotResumable, ErrResumeFailed,
		ErrControlPlane, ErrUnavailable, context.DeadlineExceeded, context.Canceled}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := fromControl(tt.err)
			for _, e := range all {
				if want := slices.Contains(tt.want, e); errors.Is(got, e) != want {
					t.Errorf("fromControl(%v) = %v: errors.Is(%v) = %t, want %t", tt.err, got, e, !want, want)
				}
			}
			if !errors.Is(got, tt.err) || !strings.Contains(got.Error(), tt.err.Error()) {
				t.Errorf("fromControl(%v) = %v, want it to wrap the status", tt.err, got)
			}
		})
	}
}

// TestControlResolverResumeReportsEviction: the actor ResumeActor names in
// its ate-evicted response header is the Resumption's Evicted; a value that
// is not "<atespace>/<name>" is logged and ignored, never failing the resume.
func TestControlResolverResumeReportsEviction(t *testing.T) {
	key := names.ActorKey{Atespace: "default", Name: "app"}
	tests := []struct {
		name    string
		header  []string // nil: no header
		want    names.ActorKey
		wantLog bool
	}{
		{name: "no eviction"},
		{name: "evicted", header: []string{"default/counter-1"}, want: names.ActorKey{Atespace: "default", Name: "counter-1"}},
		{name: "evicted in another atespace", header: []string{"team/b"}, want: names.ActorKey{Atespace: "team", Name: "b"}},
		{name: "first of two values", header: []string{"team/b", "team/c"}, want: names.ActorKey{Atespace: "team", Name: "b"}},
		{name: "bare name", header: []string{"counter-1"}, wantLog: true},
		{name: "invalid name", header: []string{"default/Counter_1"}, wantLog: true},
		{name: "empty value", header: []string{""}, wantLog: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fc := &fakeControl{
				actors: map[string]*atev1.Actor{"default/app": {Atespace: "default", Name: "app", Uid: "u1",
					State: atev1.ActorState_SUSPENDED}},
				workers: []*atev1.Worker{{Name: "w1", TunnelAddress: "10.0.0.1:7000"}},
			}
			if tt.header != nil {
				fc.evicts = map[string][]string{"default/app": tt.header}
			}
			// Resume logs on the calling goroutine, so the buffer needs
			// no lock.
			var logs bytes.Buffer
			logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			r := NewControlResolver(newControlClient(t, fc), logger)
			got, rs, err := r.Resume(t.Context(), key)
			if err != nil || got.Worker != "w1" {
				t.Fatalf("Resume = %+v, %v; want the actor on w1", got, err)
			}
			if rs.Evicted != tt.want {
				t.Errorf("Evicted = %+v, want %+v", rs.Evicted, tt.want)
			}
			if logged := strings.Contains(logs.String(), "ignoring unparsable resume header"); logged != tt.wantLog {
				t.Errorf("logged the header: %t, want %t; log:\n%s", logged, tt.wantLog, logs.String())
			}
		})
	}
}

func TestControlResolverCachesTunnelsAndRefreshesOnMiss(t *testing.T) {
	fc := &fakeControl{
		actors: map[string]*atev1.Actor{
			"default/a": {Atespace: "default", Name: "a", State: atev1.ActorState_RUNNING, Worker: "w1"},
			"default/b": {Atespace: "default", Name: "b", State: atev1.ActorState_RUNNING, Worker: "w2"},
		},
		workers: []*atev1.Worker{{Name: "w1", TunnelAddress: "10.0.0.1:7000"}},
	}
	r := NewControlResolver(newControlClient(t, fc), nil)
	a := names.ActorKey{Atespace: "default", Name: "a"}
	for range 3 {
		if _, ok, err := r.Lookup(t.Context(), a); err != nil || !ok {
			t.Fatalf("Lookup(a) = %t, %v", ok, err)
		}
	}
	if n := fc.listWorkers.Load(); n != 1 {
		t.Fatalf("ListWorkers called %d times for one worker, want 1", n)
	}
	// w2 joins after the first refresh: a miss refreshes again.
	fc.setWorkers(&atev1.Worker{Name: "w1", TunnelAddress: "10.0.0.1:7000"}, &atev1.Worker{Name: "w2", TunnelAddress: "10.0.0.2:7000"})
	got, ok, err := r.Lookup(t.Context(), names.ActorKey{Atespace: "default", Name: "b"})
	if err != nil || !ok || got.TunnelAddr != "10.0.0.2:7000" {
		t.Fatalf("Lookup(b) = %+v, %t, %v", got, ok, err)
	}
	if n := fc.listWorkers.Load(); n != 2 {
		t.Errorf("ListWorkers called %d times, want 2", n)
	}
}

// TestHandlerOverControlAPI wires the production pieces end to end: the
// handler over a ControlResolver over a gRPC Control server.
func TestHandlerOverControlAPI(t *testing.T) {
	tunnel := echoTunnel(t, "tunnel", nil)
	fc := &fakeControl{
		actors: map[string]*atev1.Actor{
			"default/app": {Atespace: "default", Name: "app", Uid: "u1", State: atev1.ActorState_SUSPENDED},
			"default/big": {Atespace: "default", Name: "big", Uid: "u2", State: atev1.ActorState_SUSPENDED},
		},
		workers: []*atev1.Worker{{Name: "w1", TunnelAddress: tunnel}},
		// big's resume needs app's worker.
		evicts: map[string][]string{"default/big": {"default/app"}},
	}
	srv, _ := newRouter(t, Config{}, NewControlResolver(newControlClient(t, fc), nil))
	tests := []struct {
		host           string
		wantStatus     int
		wantActivation string
		wantBody       string
	}{
		{"app.default.actors.localhost", http.StatusOK, "resumed", "worker=w1 uid=u1 "},
		{"app.default.actors.localhost", http.StatusOK, "warm", "worker=w1 uid=u1 "},
		{"big.default.actors.localhost", http.StatusOK, `resumed;evicted`, "worker=w1 uid=u2 "},
		{"ghost.default.actors.localhost", http.StatusNotFound, "", "actor default/ghost not found\n"},
	}
	for _, tt := range tests {
		got := get(t, srv, tt.host, "/", nil)
		if got.status != tt.wantStatus || got.activation != tt.wantActivation || !strings.Contains(got.msg, tt.wantBody) {
			t.Errorf("%s: got %d %q %q, want %d %q containing %q",
				tt.host, got.status, got.activation, got.msg, tt.wantStatus, tt.wantActivation, tt.wantBody)
		}
	}
}

// TestHandlerRelistsATunnelThatRefuses: a node restarted with its
// tunnel on another port. The router's cached address refuses the
// connection; the request parks, looking the workers up again, and is
// sent to the address the API server lists once it has it, not to the
// dead one for ever.
func TestHandlerRelistsATunnelThatRefuses(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close() // nothing listens there any more
	fc := &fakeControl{
		actors: map[string]*atev1.Actor{
			"default/app": {Atespace: "default", Name: "app", Uid: "u1", State: atev1.ActorState_RUNNING, Worker: "w1"},
		},
		workers: []*atev1.Worker{{Name: "w1", TunnelAddress: dead}},
	}
	srv, _ := newRouter(t, Config{}, NewControlResolver(newControlClient(t, fc), nil))
	// The router learns the dead address, then the node comes back.
	done := make(chan reply, 1)
	go func() { done <- get(t, srv, "app.default.actors.localhost", "/", nil) }()
	testwait.Until(t, "the router to look the workers up again", func() bool { return fc.listWorkers.Load() >= 2 })
	fc.setWorkers(&atev1.Worker{Name: "w1", TunnelAddress: echoTunnel(t, "restarted", nil)})
	got := <-done
	if got.status != http.StatusOK || !strings.Contains(got.msg, "worker=w1 uid=u1") {
		t.Fatalf("after the node moved its tunnel: %d %q, want 200 from the new address", got.status, got.msg)
	}
}

// TestIngressOverControlAPI: the router learns a template's ingress
// policy over the Control API without resuming the actor, reviews the
// bearer token with ReviewIngressToken, and answers 503 (not 401, and
// nothing cached) when the review cannot be had.
func TestIngressOverControlAPI(t *testing.T) {
	tunnel := echoTunnel(t, "tunnel", nil)
	fc := &fakeControl{
		actors: map[string]*atev1.Actor{
			"default/app": {Atespace: "default", Name: "app", Uid: "u1", Template: "locked", State: atev1.ActorState_SUSPENDED},
		},
		templates: map[string]*atev1.ActorTemplate{
			"default/locked": {Atespace: "default", Name: "locked", Uid: "tl",
				Spec: &atev1.ActorTemplateSpec{Ingress: &atev1.IngressPolicy{Policy: "token"}}},
		},
		workers:       []*atev1.Worker{{Name: "w1", TunnelAddress: tunnel}},
		ingressTokens: map[string]string{"default/good": "ingresstoken:default/web"},
		reviewErr:     status.Error(codes.Unavailable, "connection refused"),
	}
	srv, _ := newRouter(t, Config{}, NewControlResolver(newControlClient(t, fc), nil))
	const host = "app.default.actors.localhost"
	bearer := func(tok string) map[string]string { return map[string]string{"Authorization": "Bearer " + tok} }
	if got := get(t, srv, host, "/", nil); got.status != http.StatusUnauthorized {
		t.Fatalf("anonymous: %d %q, want 401", got.status, got.msg)
	}
	if got := get(t, srv, host, "/", bearer("good")); got.status != http.StatusServiceUnavailable && got.status != http.StatusBadGateway {
		t.Fatalf("review unavailable: %d %q, want 503 or 502", got.status, got.msg)
	}
	if n := fc.resumeCalls.Load(); n != 0 {
		t.Fatalf("%d ResumeActor calls before any accepted token, want 0", n)
	}
	fc.mu.Lock()
	fc.reviewErr = nil
	fc.mu.Unlock()
	if got := get(t, srv, host, "/", bearer("bad")); got.status != http.StatusUnauthorized {
		t.Fatalf("wrong token: %d %q, want 401", got.status, got.msg)
	}
	if got := get(t, srv, host, "/", bearer("good")); got.status != http.StatusOK || got.activation != "resumed" {
		t.Fatalf("right token: %d %q %q, want 200 resumed", got.status, got.activation, got.msg)
	}
	if got := get(t, srv, host, "/", nil); got.status != http.StatusUnauthorized {
		t.Fatalf("anonymous, warm: %d %q, want 401", got.status, got.msg)
	}
	if n := fc.resumeCalls.Load(); n != 1 {
		t.Fatalf("%d ResumeActor calls, want 1", n)
	}
}

// roundTripFunc adapts a function to http.RoundTripper.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestTunnelRequestsNameTheRegisteringNode: with mutual TLS to tunnels,
// each request to a worker's tunnel carries, for the transport that
// checks the tunnel's certificate (pki.NodeTransport), the node that
// registered the worker, as ListWorkers reported it.
func TestTunnelRequestsNameTheRegisteringNode(t *testing.T) {
	fc := &fakeControl{
		actors: map[string]*atev1.Actor{
			"default/app": {Atespace: "default", Name: "app", Uid: "u1", State: atev1.ActorState_RUNNING, Worker: "w1"},
		},
		workers: []*atev1.Worker{{Name: "w1", Node: "node-a", TunnelAddress: "10.0.0.1:7000"}},
	}
	var seen []string
	var mu sync.Mutex
	tr := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		node, _ := tunnelproto.NodeFrom(r.Context())
		mu.Lock()
		seen = append(seen, r.URL.Scheme+"://"+r.URL.Host+" node="+node)
		mu.Unlock()
		return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("ok")), Request: r}, nil
	})
	srv, _ := newRouter(t, Config{TunnelTLS: &tls.Config{}, Transport: tr}, NewControlResolver(newControlClient(t, fc), nil))
	if got := get(t, srv, "app.default.actors.localhost", "/", nil); got.status != http.StatusOK {
		t.Fatalf("got %d %q, want 200", got.status, got.msg)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"https://10.0.0.1:7000 node=node-a"}; !slices.Equal(seen, want) {
		t.Errorf("tunnel requests %q, want %q", seen, want)
	}
}
