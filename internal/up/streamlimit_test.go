package up

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/actorlog"
	"substrate.dev/ate/internal/apiserver"
	"substrate.dev/ate/internal/auth"
	"substrate.dev/ate/internal/lifecycle"
	"substrate.dev/ate/internal/nodeapi"
	"substrate.dev/ate/internal/store"
	"substrate.dev/ate/internal/store/bolt"
	"substrate.dev/ate/internal/testwait"
)

// logNodes is a cluster of one node whose every actor logged one line.
type logNodes struct{ n logNode }

func (c logNodes) Get(string) (nodeapi.Node, bool)       { return c.n, true }
func (c logNodes) ForWorker(string) (nodeapi.Node, bool) { return c.n, true }
func (c logNodes) Lost(string) bool                      { return false }
func (c logNodes) ByLoad() []string                      { return []string{c.n.Name()} }
func (c logNodes) All() []nodeapi.Node                   { return []nodeapi.Node{c.n} }

// logNode answers log reads only; anything else would panic.
type logNode struct{ nodeapi.Node }

func (logNode) Name() string { return "n1" }

func (logNode) ReadActorLogs(_ context.Context, _ string, after actorlog.Cursor, _ int) ([]actorlog.Line, error) {
	l := actorlog.Line{Run: 1, Seq: 1, Time: time.Now(), Kind: actorlog.KindOut, Text: "hello", Worker: "w1"}
	if actorlog.Of(l).Compare(after) <= 0 {
		return nil, nil
	}
	return []actorlog.Line{l}, nil
}

// startStreamEnv is an API server with the authorisation interceptors,
// at most maxStreams watches and log follows per caller, over a bolt
// store holding actor a/x, one event and one log line: admin (root) and
// vera (viewer of a) may both watch a and follow x's log.
func startStreamEnv(t *testing.T, maxStreams int) *authEnv {
	t.Helper()
	ctx := t.Context()
	dir := t.TempDir()
	st, err := bolt.Open(filepath.Join(dir, "ate.db"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	must(t, st.CreateAtespace(ctx, &store.Atespace{Name: "a", UID: "ns-a"}))
	spec := &atev1.ActorTemplateSpec{Containers: []*atev1.ContainerSpec{{Name: "c", Image: "oci:/x"}}}
	must(t, st.CreateTemplate(ctx, &store.Template{Atespace: "a", Name: "tpl", UID: "t-a", Phase: store.TemplateReady, Spec: spec}))
	must(t, st.CreateActor(ctx, &store.Actor{Atespace: "a", Name: "x", UID: "uid-x", Template: "tpl", Lifecycle: store.Lifecycle{State: store.Suspended}}))
	must(t, st.AppendEvent(ctx, &store.Event{Time: time.Now(), Type: store.EventNormal, Atespace: "a", Actor: "x", ActorUID: "uid-x", To: store.Suspended}))
	tokens := filepath.Join(dir, "tokens.csv")
	must(t, os.WriteFile(tokens, []byte(adminTok+",root,1,\"ate:admins\"\n"+viewerTok+",vera,2\n"), 0o600))
	policy := filepath.Join(dir, "policy.yaml")
	must(t, os.WriteFile(policy, []byte("- name: vera-views-a\n  atespace: a\n  role: viewer\n  users: [vera]\n"), 0o600))
	authz, err := auth.NewAuthorizer(auth.Config{TokenAuthFile: tokens, PolicyFile: policy}, st, apiserver.AlarmAtespace(st), nil)
	if err != nil {
		t.Fatal(err)
	}
	lc := lifecycle.New(st, logNodes{}, nil, "", nil)
	t.Cleanup(lc.Close)
	api := apiserver.New(st, lc, DefaultSandboxClass, nil, nil)
	api.SetMaxStreamsPerCaller(maxStreams)
	gs := grpc.NewServer(authz.ServerOptions()...)
	atev1.RegisterControlServer(gs, api)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	return &authEnv{st: st, addr: ln.Addr().String()}
}

// openStream opens a watch of atespace a or a follow of a/x's log and
// waits for its first message, which comes once the server admitted it;
// end ends it. err is the refusal, if any.
func openStream(t *testing.T, c atev1.ControlClient, kind string) (end context.CancelFunc, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	var recv func() error
	switch kind {
	case "watch":
		s, err := c.WatchEvents(ctx, &atev1.WatchEventsRequest{Atespace: "a"})
		if err != nil {
			return cancel, err
		}
		recv = func() error { _, err := s.Recv(); return err }
	case "follow":
		s, err := c.ActorLogs(ctx, &atev1.ActorLogsRequest{Atespace: "a", Name: "x", Follow: true})
		if err != nil {
			return cancel, err
		}
		recv = func() error { _, err := s.Recv(); return err }
	}
	return cancel, recv()
}

// TestStreamsPerCallerCap: a caller holding as many watches and log
// follows as the cap gets RESOURCE_EXHAUSTED, saying why and what to do,
// for one more of either kind, while another caller opens its own as
// usual and plain log reads still work; a place comes back when one of
// the caller's streams ends.
func TestStreamsPerCallerCap(t *testing.T) {
	const maxStreams = 3
	e := startStreamEnv(t, maxStreams)
	root, vera := e.client(t, adminTok), e.client(t, viewerTok)

	var held []context.CancelFunc
	for i, kind := range []string{"watch", "follow", "watch"} {
		end, err := openStream(t, root, kind)
		if err != nil {
			t.Fatalf("root's stream %d (%s) within the cap: %v", i+1, kind, err)
		}
		held = append(held, end)
	}
	for _, kind := range []string{"follow", "watch"} {
		_, err := openStream(t, root, kind)
		if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "user root already holds 3") ||
			!strings.Contains(err.Error(), "--max-streams-per-caller") {
			t.Fatalf("root's %s over the cap: %v; want RESOURCE_EXHAUSTED naming root, the cap and the flag", kind, err)
		}
	}
	for i, kind := range []string{"follow", "watch", "follow"} {
		if _, err := openStream(t, vera, kind); err != nil {
			t.Fatalf("vera's stream %d (%s) while root holds its cap: %v", i+1, kind, err)
		}
	}
	// A read without follow ends by itself: it takes no place.
	s, err := root.ActorLogs(t.Context(), &atev1.ActorLogsRequest{Atespace: "a", Name: "x"})
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := s.Recv(); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("root's plain log read at its cap: %v", err)
		}
	}

	held[0]()
	testwait.Until(t, "root opens a stream again once one of its own ended", func() bool {
		_, err := openStream(t, root, "follow")
		if err != nil && status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("root's stream after one ended: %v", err)
		}
		return err == nil
	})
	if _, err := openStream(t, root, "watch"); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("root's stream over the cap again: %v; want RESOURCE_EXHAUSTED", err)
	}
}
