package cli

import (
	"bytes"
	"context"
	"errors"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/apimachinery/pkg/labels"

	atev1 "substrate.dev/ate/api/ate/v1"
)

func TestMain(m *testing.M) {
	// Every command must close its connection; leaked gRPC goroutines show
	// up here.
	goleak.VerifyTestMain(m)
}

// testNow is the clock the CLI sees in tests, so AGE columns are stable.
var testNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func ago(d time.Duration) *timestamppb.Timestamp { return timestamppb.New(testNow.Add(-d)) }

// fakeControl is an in-memory Control server: just enough behaviour for the
// CLI to be exercised end to end over real gRPC. Safe for concurrent use.
type fakeControl struct {
	atev1.UnimplementedControlServer

	mu        sync.Mutex // guards everything below
	reqs      []proto.Message
	atespaces map[string]*atev1.Atespace
	templates map[string]*atev1.ActorTemplate // key atespace/name
	actors    map[string]*atev1.Actor         // key atespace/name
	workers   []*atev1.Worker
	pageSize  int                // ListActors page size; the request's is ignored
	stuckPage bool               // ListActors always returns the same next token
	onGet     func(*atev1.Actor) // called under mu on every successful GetActor
	noWorkers bool               // ResumeActor blocks until the call's deadline
	// statuses, if any, script a created template's status: CreateActorTemplate
	// answers with the first, each GetActorTemplate with the next, the last
	// repeating.
	statuses []*atev1.ActorTemplateStatus
}

var _ atev1.ControlServer = (*fakeControl)(nil)

func newFake() *fakeControl {
	f := &fakeControl{
		atespaces: map[string]*atev1.Atespace{},
		templates: map[string]*atev1.ActorTemplate{},
		actors:    map[string]*atev1.Actor{},
		pageSize:  100,
	}
	for _, ns := range []string{"default", "team"} {
		f.atespaces[ns] = &atev1.Atespace{Name: ns, Uid: "uid-" + ns, CreateTime: ago(72 * time.Hour)}
	}
	f.templates["default/counter"] = &atev1.ActorTemplate{
		Atespace: "default", Name: "counter", Uid: "uid-t1", CreateTime: ago(3 * time.Hour),
		Spec: &atev1.ActorTemplateSpec{Containers: []*atev1.ContainerSpec{{
			Name: "counter", Image: "oci:/images/counter", Ports: []int32{8080},
		}}},
		Status: &atev1.ActorTemplateStatus{Phase: atev1.ActorTemplateStatus_READY, GoldenSnapshot: "g-1"},
	}
	f.addActor(&atev1.Actor{Atespace: "default", Name: "counter-0", Template: "counter",
		State: atev1.ActorState_SUSPENDED, CreateTime: ago(90 * time.Second), Reason: atev1.CheckpointReason_IDLE})
	f.addActor(&atev1.Actor{Atespace: "default", Name: "counter-1", Template: "counter",
		State: atev1.ActorState_RUNNING, Worker: "w-0", Snapshot: "s-7", Version: 4, CreateTime: ago(5 * time.Minute),
		LastActivity: ago(12 * time.Second)})
	f.addActor(&atev1.Actor{Atespace: "team", Name: "counter-1", Template: "counter",
		State: atev1.ActorState_SUSPENDED, Snapshot: "s-2", CreateTime: ago(26 * time.Hour),
		Reason: atev1.CheckpointReason_EVICTED, EvictedFor: "team/counter-2"})
	f.workers = []*atev1.Worker{
		{Name: "w-0", Node: "local", Phase: atev1.Worker_CLAIMED, Actor: "default/counter-1"},
		{Name: "w-1", Node: "local", Phase: atev1.Worker_FREE},
	}
	return f
}

func (f *fakeControl) addActor(a *atev1.Actor) {
	a.Uid = "uid-" + a.Atespace + "-" + a.Name
	f.actors[a.Atespace+"/"+a.Name] = a
}

// record notes req and locks f; the caller unlocks.
func (f *fakeControl) record(req proto.Message) {
	f.mu.Lock()
	f.reqs = append(f.reqs, proto.Clone(req))
}

// requests returns the requests received so far, in order.
func (f *fakeControl) requests() []proto.Message {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.reqs)
}

func notFound(kind, key string) error {
	return status.Errorf(codes.NotFound, "%s %s not found", kind, key)
}

func (f *fakeControl) CreateAtespace(_ context.Context, r *atev1.CreateAtespaceRequest) (*atev1.Atespace, error) {
	f.record(r)
	defer f.mu.Unlock()
	if _, ok := f.atespaces[r.GetName()]; ok {
		return nil, status.Errorf(codes.AlreadyExists, "atespace %s already exists", r.GetName())
	}
	ns := &atev1.Atespace{Name: r.GetName(), Uid: "uid-new", CreateTime: timestamppb.New(testNow)}
	f.atespaces[ns.Name] = ns
	return ns, nil
}

func (f *fakeControl) GetAtespace(_ context.Context, r *atev1.GetAtespaceRequest) (*atev1.Atespace, error) {
	f.record(r)
	defer f.mu.Unlock()
	if ns, ok := f.atespaces[r.GetName()]; ok {
		return ns, nil
	}
	return nil, notFound("atespace", r.GetName())
}

func (f *fakeControl) ListAtespaces(_ context.Context, r *atev1.ListAtespacesRequest) (*atev1.ListAtespacesResponse, error) {
	f.record(r)
	defer f.mu.Unlock()
	resp := &atev1.ListAtespacesResponse{}
	for _, k := range sortedKeys(f.atespaces) {
		resp.Atespaces = append(resp.Atespaces, f.atespaces[k])
	}
	return resp, nil
}

func (f *fakeControl) DeleteAtespace(_ context.Context, r *atev1.DeleteAtespaceRequest) (*atev1.DeleteAtespaceResponse, error) {
	f.record(r)
	defer f.mu.Unlock()
	if _, ok := f.atespaces[r.GetName()]; !ok {
		return nil, notFound("atespace", r.GetName())
	}
	delete(f.atespaces, r.GetName())
	return &atev1.DeleteAtespaceResponse{}, nil
}

func (f *fakeControl) CreateActorTemplate(_ context.Context, r *atev1.CreateActorTemplateRequest) (*atev1.ActorTemplate, error) {
	f.record(r)
	defer f.mu.Unlock()
	t := proto.Clone(r.GetTemplate()).(*atev1.ActorTemplate)
	t.Uid, t.CreateTime = "uid-t-new", timestamppb.New(testNow)
	t.Status = &atev1.ActorTemplateStatus{Phase: atev1.ActorTemplateStatus_BUILDING}
	if len(f.statuses) > 0 {
		t.Status = f.statuses[0]
	}
	f.templates[t.Atespace+"/"+t.Name] = t
	return t, nil
}

func (f *fakeControl) GetActorTemplate(_ context.Context, r *atev1.GetActorTemplateRequest) (*atev1.ActorTemplate, error) {
	f.record(r)
	defer f.mu.Unlock()
	key := r.GetAtespace() + "/" + r.GetName()
	if t, ok := f.templates[key]; ok {
		if len(f.statuses) > 1 {
			f.statuses = f.statuses[1:]
			t.Status = f.statuses[0]
		}
		return t, nil
	}
	return nil, notFound("template", key)
}

func (f *fakeControl) ListActorTemplates(_ context.Context, r *atev1.ListActorTemplatesRequest) (*atev1.ListActorTemplatesResponse, error) {
	f.record(r)
	defer f.mu.Unlock()
	resp := &atev1.ListActorTemplatesResponse{}
	for _, k := range sortedKeys(f.templates) {
		if t := f.templates[k]; t.GetAtespace() == r.GetAtespace() {
			resp.Templates = append(resp.Templates, t)
		}
	}
	return resp, nil
}

func (f *fakeControl) DeleteActorTemplate(_ context.Context, r *atev1.DeleteActorTemplateRequest) (*atev1.DeleteActorTemplateResponse, error) {
	f.record(r)
	defer f.mu.Unlock()
	delete(f.templates, r.GetAtespace()+"/"+r.GetName())
	return &atev1.DeleteActorTemplateResponse{}, nil
}

func (f *fakeControl) CreateActor(_ context.Context, r *atev1.CreateActorRequest) (*atev1.Actor, error) {
	f.record(r)
	defer f.mu.Unlock()
	a := proto.Clone(r.GetActor()).(*atev1.Actor)
	a.State, a.CreateTime = atev1.ActorState_SUSPENDED, timestamppb.New(testNow)
	f.addActor(a)
	return a, nil
}

func (f *fakeControl) GetActor(_ context.Context, r *atev1.GetActorRequest) (*atev1.Actor, error) {
	f.record(r)
	defer f.mu.Unlock()
	a, err := f.actor(r.GetAtespace(), r.GetName())
	if err != nil {
		return nil, err
	}
	if f.onGet != nil {
		f.onGet(a)
	}
	return proto.Clone(a).(*atev1.Actor), nil
}

func (f *fakeControl) actor(atespace, name string) (*atev1.Actor, error) {
	key := atespace + "/" + name
	if a, ok := f.actors[key]; ok {
		return a, nil
	}
	return nil, notFound("actor", key)
}

// ListActors pages with the offset as the token.
func (f *fakeControl) ListActors(_ context.Context, r *atev1.ListActorsRequest) (*atev1.ListActorsResponse, error) {
	f.record(r)
	defer f.mu.Unlock()
	sel, err := labels.Parse(r.GetLabelSelector())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "label_selector %q: %v", r.GetLabelSelector(), err)
	}
	var all []*atev1.Actor
	for _, k := range sortedKeys(f.actors) {
		if !sel.Matches(labels.Set(f.actors[k].GetLabels())) {
			continue
		}
		// The fake's "expired" actors are the SUSPENDED ones with no
		// activity: enough to see the filter carried.
		if a := f.actors[k]; a.GetAtespace() == r.GetAtespace() &&
			(!r.GetExpiredOnly() || (a.GetState() == atev1.ActorState_SUSPENDED && a.GetLastActivity() == nil)) {
			all = append(all, a)
		}
	}
	start := 0
	if r.GetPageToken() != "" {
		var err error
		if start, err = strconv.Atoi(r.GetPageToken()); err != nil {
			return nil, status.Error(codes.InvalidArgument, "bad page token")
		}
	}
	end := min(start+f.pageSize, len(all))
	resp := &atev1.ListActorsResponse{Actors: all[start:end]}
	if end < len(all) {
		resp.NextPageToken = strconv.Itoa(end)
	}
	if f.stuckPage {
		resp.NextPageToken = "0"
	}
	return resp, nil
}

func (f *fakeControl) DeleteActor(_ context.Context, r *atev1.DeleteActorRequest) (*atev1.DeleteActorResponse, error) {
	f.record(r)
	defer f.mu.Unlock()
	a, err := f.actor(r.GetAtespace(), r.GetName())
	if err != nil {
		return nil, err
	}
	if a.GetState() != atev1.ActorState_SUSPENDED {
		return nil, status.Errorf(codes.FailedPrecondition, "actor %s/%s is %s; suspend it first (ate suspend actor %s)", a.Atespace, a.Name, a.State, a.Name)
	}
	delete(f.actors, r.GetAtespace()+"/"+r.GetName())
	return &atev1.DeleteActorResponse{}, nil
}

// UpdateActor moves SUSPENDED and CRASHED actors to r.Template and refuses others,
// as the API server does.
func (f *fakeControl) UpdateActor(_ context.Context, r *atev1.UpdateActorRequest) (*atev1.Actor, error) {
	f.record(r)
	defer f.mu.Unlock()
	a, err := f.actor(r.GetAtespace(), r.GetName())
	if err != nil {
		return nil, err
	}
	if a.GetState() != atev1.ActorState_SUSPENDED && a.GetState() != atev1.ActorState_CRASHED {
		return nil, status.Errorf(codes.FailedPrecondition, "actor %s/%s is %s: suspend it first", a.GetAtespace(), a.GetName(), a.GetState())
	}
	a.Template, a.VolumesOnly = r.GetTemplate(), true
	return proto.Clone(a).(*atev1.Actor), nil
}

func (f *fakeControl) SuspendActor(_ context.Context, r *atev1.SuspendActorRequest) (*atev1.Actor, error) {
	f.record(r)
	defer f.mu.Unlock()
	a, err := f.actor(r.GetAtespace(), r.GetName())
	if err != nil {
		return nil, err
	}
	a.State, a.Worker, a.Snapshot = atev1.ActorState_SUSPENDED, "", "s-new"
	return proto.Clone(a).(*atev1.Actor), nil
}

func (f *fakeControl) ResumeActor(ctx context.Context, r *atev1.ResumeActorRequest) (*atev1.Actor, error) {
	f.record(r)
	if f.noWorkers {
		// Like the real server: wait for a worker until the caller gives up.
		f.mu.Unlock()
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	defer f.mu.Unlock()
	a, err := f.actor(r.GetAtespace(), r.GetName())
	if err != nil {
		return nil, err
	}
	a.State, a.Worker = atev1.ActorState_RUNNING, "w-1"
	return proto.Clone(a).(*atev1.Actor), nil
}

func (f *fakeControl) ListWorkers(_ context.Context, r *atev1.ListWorkersRequest) (*atev1.ListWorkersResponse, error) {
	f.record(r)
	defer f.mu.Unlock()
	return &atev1.ListWorkersResponse{Workers: f.workers}, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// serve runs f on a loopback gRPC server for the rest of the test and
// returns its address.
func serve(t *testing.T, f *fakeControl) string {
	t.Helper()
	return serveOn(t, f, "127.0.0.1")
}

// serveOn is serve on host (any of 127/8 is loopback on Linux), at a
// free port.
func serveOn(t *testing.T, f *fakeControl, host string) string {
	t.Helper()
	return serveWith(t, f, host)
}

// serveWith is serveOn with server options (TLS, interceptors).
func serveWith(t *testing.T, f *fakeControl, host string, opts ...grpc.ServerOption) string {
	t.Helper()
	lis, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(opts...)
	atev1.RegisterControlServer(srv, f)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis) }()
	t.Cleanup(func() {
		srv.Stop()
		// ErrServerStopped means Stop won the race with Serve's start.
		if err := <-done; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			t.Errorf("serve: %v", err)
		}
	})
	return lis.Addr().String()
}

// result is one CLI run.
type result struct {
	stdout, stderr string
	code           int
}

// runCLI runs `ate args...` the way cmd/ate will, with no config file, an
// empty environment and the fixed test clock. Tests pass --server themselves.
func runCLI(t *testing.T, args ...string) result {
	t.Helper()
	root := NewRootCommand(
		WithGetenv(func(string) string { return "" }),
		WithNow(func() time.Time { return testNow }),
		WithPollInterval(5*time.Millisecond),
	)
	var stdout, stderr bytes.Buffer
	root.SetOut(&stdout)
	root.SetErr(&stderr)
	root.SetIn(bytes.NewReader(nil))
	noConfig := filepath.Join(t.TempDir(), "absent.yaml")
	root.SetArgs(append([]string{"--config", noConfig}, args...))
	code := Main(context.Background(), root)
	return result{stdout: stdout.String(), stderr: stderr.String(), code: code}
}

// runServer starts a fresh fake, runs `ate --server ADDR args...` against it
// and returns the fake for inspection.
func runServer(t *testing.T, f *fakeControl, args ...string) result {
	t.Helper()
	addr := serve(t, f)
	return runCLI(t, append([]string{"--server", addr}, args...)...)
}
