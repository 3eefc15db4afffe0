package apidial

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/testwait"
)

func TestSplit(t *testing.T) {
	for _, tc := range []struct {
		target string
		want   []string
		bad    bool
	}{
		{target: "127.0.0.1:7070", want: []string{"127.0.0.1:7070"}},
		{target: "a:7070,b:7071", want: []string{"a:7070", "b:7071"}},
		{target: "dns:///api.ate.svc:7070", want: []string{"dns:///api.ate.svc:7070"}},
		{target: "k8s:///ate-apiserver.ate-system:grpc", want: []string{"k8s:///ate-apiserver.ate-system:grpc"}},
		{target: "k8s:///ate-apiserver:443", want: []string{"k8s:///ate-apiserver:443"}},
		{target: "k8s:///ate-apiserver.ate-system", bad: true},
		{target: "k8s:///a.b.c:grpc", bad: true},
		{target: "k8s://host/svc:grpc", bad: true},
		{target: "", bad: true},
		{target: "a:7070,", bad: true},
		{target: "a", bad: true},
		{target: "a:", bad: true},
		{target: "dns:///api", bad: true},
		{target: "http://a:7070", bad: true},
		{target: "dns:a:7070", bad: true},
	} {
		got, err := Split(tc.target)
		if tc.bad {
			if !errors.Is(err, ErrTarget) {
				t.Errorf("Split(%q) = %v, %v; want ErrTarget", tc.target, got, err)
			}
			continue
		}
		if err != nil || len(got) != len(tc.want) {
			t.Errorf("Split(%q) = %v, %v; want %v", tc.target, got, err, tc.want)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("Split(%q)[%d] = %q, want %q", tc.target, i, got[i], tc.want[i])
			}
		}
	}
}

// replica answers GetActor and CreateActor, or UNAVAILABLE for both when
// down (what a stopping API server or one whose store is unreachable
// answers).
type replica struct {
	atev1.UnimplementedControlServer
	name  string
	down  atomic.Bool
	calls atomic.Int64
	// stalled, when set, holds every call until it is closed (or the
	// caller gives up): a replica that stands still.
	stalled atomic.Pointer[chan struct{}]
	resumes atomic.Int64
	// busy, when set, holds resumes alone (the replica answers
	// everything else, probes too): a resume waiting for a worker.
	busy   atomic.Pointer[chan struct{}]
	probes atomic.Int64
	// storeCut: the replica's health check answers NOT_SERVING, as an
	// API server's does while it cannot reach its record store.
	storeCut atomic.Bool
}

// stall holds r's calls until the returned function is called.
func (r *replica) stall() (release func()) {
	ch := make(chan struct{})
	r.stalled.Store(&ch)
	var once sync.Once
	return func() { once.Do(func() { r.stalled.Store(nil); close(ch) }) }
}

// wait returns the caller's error if it gave up while r stood still: a
// stalled replica never answers a call whose deadline passed (the server
// sees the deadline too, and answering it would race the client's own).
func (r *replica) wait(ctx context.Context) error {
	if ch := r.stalled.Load(); ch != nil {
		select {
		case <-*ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (r *replica) ResumeActor(ctx context.Context, _ *atev1.ResumeActorRequest) (*atev1.Actor, error) {
	r.resumes.Add(1)
	if err := r.wait(ctx); err != nil {
		return nil, err
	}
	if ch := r.busy.Load(); ch != nil {
		select {
		case <-*ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	// As the API server's resume says how it activated the actor.
	if err := grpc.SetHeader(ctx, metadata.Pairs("replica", r.name)); err != nil {
		return nil, err
	}
	return &atev1.Actor{Name: r.name}, nil
}

func (r *replica) GetActor(ctx context.Context, _ *atev1.GetActorRequest) (*atev1.Actor, error) {
	r.calls.Add(1)
	if err := r.wait(ctx); err != nil {
		return nil, err
	}
	if r.down.Load() {
		return nil, status.Error(codes.Unavailable, r.name+" is down")
	}
	return &atev1.Actor{Name: r.name}, nil
}

func (r *replica) CreateActor(context.Context, *atev1.CreateActorRequest) (*atev1.Actor, error) {
	r.calls.Add(1)
	if r.down.Load() {
		return nil, status.Error(codes.Unavailable, r.name+" is down")
	}
	return &atev1.Actor{Name: r.name}, nil
}

func serve(t *testing.T, r *replica) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// A method the server does not serve (a watched call's probe) is
	// answered UNIMPLEMENTED, unless the replica stands still.
	gs := grpc.NewServer(grpc.UnknownServiceHandler(func(_ any, stream grpc.ServerStream) error {
		r.probes.Add(1)
		if err := r.wait(stream.Context()); err != nil {
			return err
		}
		if r.storeCut.Load() {
			if err := stream.RecvMsg(&healthpb.HealthCheckRequest{}); err != nil {
				return err
			}
			return stream.SendMsg(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_NOT_SERVING})
		}
		return status.Error(codes.Unimplemented, "unknown method")
	}))
	atev1.RegisterControlServer(gs, r)
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	return ln.Addr().String()
}

// TestListBalancesAndRetries: calls to a listed target reach both
// replicas; with one answering UNAVAILABLE, idempotent calls are retried
// on the other and all succeed, while non-idempotent ones are not retried.
func TestListBalancesAndRetries(t *testing.T) {
	a, b := &replica{name: "a"}, &replica{name: "b"}
	conn, err := Dial(serve(t, a) + "," + serve(t, b))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := atev1.NewControlClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// Round-robin picks among the connections that are ready, so both
	// answer once both have connected.
	seen := map[string]int{}
	for deadline := time.Now().Add(10 * time.Second); seen["a"] == 0 || seen["b"] == 0; {
		if time.Now().After(deadline) {
			t.Fatalf("round robin over two replicas answered %v", seen)
		}
		got, err := c.GetActor(ctx, &atev1.GetActorRequest{})
		if err != nil {
			t.Fatal(err)
		}
		seen[got.GetName()]++
	}

	a.down.Store(true)
	for i := range 20 {
		got, err := c.GetActor(ctx, &atev1.GetActorRequest{})
		if err != nil || got.GetName() != "b" {
			t.Fatalf("GetActor %d with replica a down = %v, %v; want b's answer", i, got, err)
		}
	}
	if a.calls.Load() <= int64(seen["a"]) {
		t.Fatal("replica a was never tried while down: the test proves nothing")
	}
	failed := 0
	for range 20 {
		if _, err := c.CreateActor(ctx, &atev1.CreateActorRequest{}); status.Code(err) == codes.Unavailable {
			failed++
		}
	}
	if failed == 0 {
		t.Fatal("CreateActor was retried on another replica; it is not idempotent")
	}
}

func TestReplicas(t *testing.T) {
	ctx := context.Background()
	got, err := Replicas(ctx, "dns:///localhost:7070")
	if err != nil || len(got) == 0 || !slices.Contains(got, "127.0.0.1:7070") {
		t.Fatalf("Replicas(dns:///localhost:7070) = %v, %v; want 127.0.0.1:7070 among them", got, err)
	}
	if got, err := Replicas(ctx, "a:1,b:2"); err != nil || !slices.Equal(got, []string{"a:1", "b:2"}) {
		t.Fatalf("Replicas(a:1,b:2) = %v, %v", got, err)
	}
	if _, err := Replicas(ctx, "dns:///no-such-host.invalid:7070"); err == nil {
		t.Fatal("Replicas of an unresolvable name succeeded")
	}
}

// TestNoKubernetesNeeded: dns:/// and host:port targets dial and answer
// with $KUBECONFIG naming a file that does not exist, no ~/.kube/config
// and no in-cluster environment; only a k8s:/// target asks for a
// kubeconfig, and says so.
func TestNoKubernetesNeeded(t *testing.T) {
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "no-such-kubeconfig"))
	t.Setenv("HOME", t.TempDir())
	for _, v := range []string{"KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"} {
		t.Setenv(v, "") // restored after the test
		if err := os.Unsetenv(v); err != nil {
			t.Fatal(err)
		}
	}
	addr := serve(t, &replica{name: "a"})
	_, port, _ := net.SplitHostPort(addr)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, target := range []string{addr, "dns:///localhost:" + port} {
		conn, err := DialContext(ctx, target)
		if err != nil {
			t.Fatalf("Dial(%s) = %v", target, err)
		}
		got, err := atev1.NewControlClient(conn).GetActor(ctx, &atev1.GetActorRequest{})
		_ = conn.Close()
		if err != nil || got.GetName() != "a" {
			t.Fatalf("GetActor through %s = %v, %v", target, got, err)
		}
	}
	_, err := DialContext(ctx, "k8s:///ate-apiserver.ate-system:grpc")
	if err == nil || !strings.Contains(err.Error(), "kubeconfig") {
		t.Fatalf("Dial(k8s:///…) with no kubeconfig = %v; want an error about the kubeconfig", err)
	}
}

// twoReplicas serves replicas a and b and dials both: a client of the
// pair, and b's address, which is not left suspect after the test.
func twoReplicas(t *testing.T) (a, b *replica, addrB string, c atev1.ControlClient) {
	t.Helper()
	a, b = &replica{name: "a"}, &replica{name: "b"}
	addrB = serve(t, b)
	conn, err := Dial(serve(t, a) + "," + addrB)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		suspects.clear(addrB)
	})
	return a, b, addrB, atev1.NewControlClient(conn)
}

// TestStandingStillReplica: one of two replicas accepts calls and answers
// none (SIGSTOP, a frozen VM), its connection still up. Every read
// succeeds within a deadline far shorter than keepalive's 15 s (hedged
// onto the other replica), the stalled replica is then passed over by
// reads and by state changes alike, and it is used again once a call to
// it succeeds.
func TestStandingStillReplica(t *testing.T) {
	a, b, addrB, c := twoReplicas(t)
	// Both connected: round-robin reaches b.
	for b.calls.Load() == 0 {
		if _, err := c.GetActor(t.Context(), &atev1.GetActorRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	release := b.stall()
	defer release()
	before := b.calls.Load()
	for i := range 20 {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		got, err := c.GetActor(ctx, &atev1.GetActorRequest{})
		cancel()
		if err != nil || got.GetName() != "a" {
			t.Fatalf("GetActor %d with replica b standing still = %v, %v; want a's answer", i, got, err)
		}
	}
	if n := b.calls.Load() - before; n != 1 {
		t.Fatalf("replica b got %d of 20 reads while it stood still, want 1 (the one that found it out)", n)
	}
	for i := range 10 {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		got, err := c.ResumeActor(ctx, &atev1.ResumeActorRequest{})
		cancel()
		if err != nil || got.GetName() != "a" {
			t.Fatalf("ResumeActor %d with replica b suspect = %v, %v; want a's answer", i, got, err)
		}
	}
	if n := b.resumes.Load(); n != 0 {
		t.Fatalf("replica b got %d resumes while suspect, want 0; a resume is never sent twice, so it would have waited", n)
	}
	if n := a.resumes.Load(); n != 10 {
		t.Fatalf("replica a got %d resumes, want 10 (one per call)", n)
	}
	release()
	// Due for a look again: the next read tries b, which answers.
	suspects.mu.Lock()
	suspects.since[addrB] = time.Now().Add(-suspectFor)
	suspects.mu.Unlock()
	for b.calls.Load() == before+1 {
		if _, err := c.GetActor(t.Context(), &atev1.GetActorRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	if !suspects.usable(addrB, false) {
		t.Fatal("replica b answered again but is still passed over")
	}
}

// TestReplicaStandsStillDuringAChange: a resume sent to a replica that
// then stands still (it answers nothing, probes neither) is abandoned
// there and answered by the other replica within the call's deadline —
// not after keepalive's 15 s — and the replica is passed over after.
func TestReplicaStandsStillDuringAChange(t *testing.T) {
	_, b, addrB, c := twoReplicas(t)
	for b.calls.Load() == 0 {
		if _, err := c.GetActor(t.Context(), &atev1.GetActorRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	release := b.stall()
	defer release()
	for i := 0; b.resumes.Load() == 0 || i < 5; i++ {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		got, err := c.ResumeActor(ctx, &atev1.ResumeActorRequest{})
		cancel()
		if err != nil || got.GetName() != "a" {
			t.Fatalf("ResumeActor %d with replica b standing still = %v, %v; want a's answer", i, got, err)
		}
	}
	if n := b.resumes.Load(); n != 1 {
		t.Fatalf("replica b got %d resumes, want 1: it is passed over once found standing still", n)
	}
	if suspects.usable(addrB, false) {
		t.Fatal("replica b stood still through a resume and its probe, but is not suspect")
	}
}

// TestChangeAskingForItsHeaderIsWatched: a resume that asks for its
// answer's header, as the router's does, is watched as any other: with
// replica b standing still it is answered by a, and the header the
// caller gets is a's.
func TestChangeAskingForItsHeaderIsWatched(t *testing.T) {
	_, b, _, c := twoReplicas(t)
	release := b.stall()
	defer release()
	for i := 0; b.resumes.Load() == 0 || i < 5; i++ {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		var md metadata.MD
		got, err := c.ResumeActor(ctx, &atev1.ResumeActorRequest{}, grpc.Header(&md))
		cancel()
		if err != nil || got.GetName() != "a" || !slices.Equal(md.Get("replica"), []string{"a"}) {
			t.Fatalf("ResumeActor %d with its header, replica b standing still = %v, %v, header %v; want a's answer and header", i, got, err, md)
		}
	}
}

// TestReplicaCutOffFromItsStoreLosesItsChange: a resume held by a
// replica that answers its probes NOT_SERVING — cut off from its record
// store, it cannot finish the change until the cut heals — is abandoned
// there and answered by the other replica, and the replica is passed
// over after.
func TestReplicaCutOffFromItsStoreLosesItsChange(t *testing.T) {
	_, b, addrB, c := twoReplicas(t)
	busy := make(chan struct{})
	defer close(busy)
	b.busy.Store(&busy)
	b.storeCut.Store(true)
	for i := 0; b.resumes.Load() == 0 || i < 5; i++ {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		got, err := c.ResumeActor(ctx, &atev1.ResumeActorRequest{})
		cancel()
		if err != nil || got.GetName() != "a" {
			t.Fatalf("ResumeActor %d with replica b cut off from its store = %v, %v; want a's answer", i, got, err)
		}
	}
	if n := b.resumes.Load(); n != 1 {
		t.Fatalf("replica b got %d resumes, want 1: it is passed over once found cut off", n)
	}
	if suspects.usable(addrB, false) {
		t.Fatal("replica b answered NOT_SERVING through a resume, but is not suspect")
	}
}

// TestBusyReplicaKeepsItsChange: a resume that takes long on a replica
// that answers its probes (a resume waiting for a worker) stays there:
// it is neither abandoned nor sent twice.
func TestBusyReplicaKeepsItsChange(t *testing.T) {
	_, b, addrB, c := twoReplicas(t)
	busy := make(chan struct{})
	b.busy.Store(&busy)
	type answer struct {
		name string
		err  error
	}
	answered := make(chan answer, 1)
	go func() {
		// Until one resume reaches b, which holds it.
		for {
			got, err := c.ResumeActor(t.Context(), &atev1.ResumeActorRequest{})
			if err != nil || got.GetName() == "b" {
				answered <- answer{got.GetName(), err}
				return
			}
		}
	}()
	testwait.Until(t, "replica b probed twice while it holds a resume", func() bool { return b.probes.Load() >= 2 })
	close(busy)
	got := <-answered
	if got.err != nil || got.name != "b" {
		t.Fatalf("the resume held by busy replica b answered %q, %v; want b's answer", got.name, got.err)
	}
	if n := b.resumes.Load(); n != 1 {
		t.Fatalf("replica b got %d resumes, want 1", n)
	}
	if !suspects.usable(addrB, false) {
		t.Fatal("replica b answered its probes but is suspect")
	}
}

// TestOneReplicaKeepsItsChange: a connection to one replica's address
// has nowhere to move a state change to: a resume to that replica,
// standing still, is not sent to it a second time; it waits for it.
func TestOneReplicaKeepsItsChange(t *testing.T) {
	b := &replica{name: "b"}
	conn, err := Dial(serve(t, b))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	release := b.stall()
	defer release()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	if _, err := atev1.NewControlClient(conn).ResumeActor(ctx, &atev1.ResumeActorRequest{}); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("resume to the one replica, standing still = %v; want its deadline", err)
	}
	if n := b.resumes.Load(); n != 1 {
		t.Fatalf("the one replica got %d resumes, want 1", n)
	}
}
