package up

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	grpcmd "google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/apiserver"
	"substrate.dev/ate/internal/ateconfig"
	"substrate.dev/ate/internal/auth"
	"substrate.dev/ate/internal/names"
	"substrate.dev/ate/internal/store"
	"substrate.dev/ate/internal/store/bolt"
)

// authEnv is an API server with the authorisation interceptors over a
// real bolt store on a TCP port: atespaces a and b, each with template
// tpl, actor x, tag t1 and an alarm on x; tokens for admin, vera (viewer
// of a, from the policy file) and eddie (editor of a, bound through the
// API).
type authEnv struct {
	st     store.Store
	addr   string
	alarms map[string]string // atespace -> alarm id
}

const (
	adminTok  = "admin-token-0123456789"
	viewerTok = "vera-token-0123456789"
	editorTok = "eddie-token-0123456789"
	routerTok = "router-token-0123456789"
)

func startAuthEnv(t *testing.T) *authEnv {
	t.Helper()
	return startAuthEnvWith(t, nil)
}

// startAuthEnvWith is startAuthEnv with configure (if not nil) changing
// the API server's auth.Config last. The policy file also makes olga (an
// OIDC user, without prefix) a viewer of a.
func startAuthEnvWith(t *testing.T, configure func(*auth.Config)) *authEnv {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	st, err := bolt.Open(filepath.Join(dir, "ate.db"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	e := &authEnv{st: st, alarms: map[string]string{}}
	spec := &atev1.ActorTemplateSpec{Containers: []*atev1.ContainerSpec{{Name: "c", Image: "oci:/x"}}}
	for _, ns := range []string{"a", "b"} {
		must(t, st.CreateAtespace(ctx, &store.Atespace{Name: ns, UID: "ns-" + ns}))
		must(t, st.CreateTemplate(ctx, &store.Template{Atespace: ns, Name: "tpl", UID: "t-" + ns, Phase: store.TemplateReady, Spec: spec}))
		must(t, st.CreateActor(ctx, &store.Actor{Atespace: ns, Name: "x", UID: "uid-" + ns, Template: "tpl", Lifecycle: store.Lifecycle{State: store.Suspended}}))
		must(t, st.CreateTag(ctx, &store.Tag{Atespace: ns, Name: "t1", UID: "tag-" + ns, Actor: "x", ActorUID: "uid-" + ns, Template: "tpl", Snapshot: "tag-" + ns + "/s"}))
		at := time.Now().Add(time.Hour).UTC()
		id := "alarm-" + ns
		must(t, st.CreateAlarm(ctx, &store.Alarm{ID: id, Atespace: ns, Actor: "x", ActorUID: "uid-" + ns, Path: "/", At: at, NextAttempt: at, State: store.AlarmPending}, 10))
		e.alarms[ns] = id
	}
	tokens := filepath.Join(dir, "tokens.csv")
	must(t, os.WriteFile(tokens, []byte(adminTok+",root,1,\"ate:admins\"\n"+viewerTok+",vera,2\n"+editorTok+",eddie,3,\"devs\"\n"), 0o600))
	policy := filepath.Join(dir, "policy.yaml")
	must(t, os.WriteFile(policy, []byte("- name: vera-views-a\n  atespace: a\n  role: viewer\n  users: [vera]\n"+
		"- name: olga-views-a\n  atespace: a\n  role: viewer\n  users: [olga]\n"), 0o600))

	ac := auth.Config{TokenAuthFile: tokens, PolicyFile: policy}
	// As ate up's in-process router: a token standing for the component.
	ac.Extra = []auth.StaticToken{{Token: routerTok, Component: &auth.Identity{Component: auth.ComponentRouter, Name: "up"}}}
	if configure != nil {
		configure(&ac)
	}
	api := apiserver.New(st, nil, DefaultSandboxClass, nil, nil)
	authz, err := authorize(api, ac, "", st, nil)
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(authz.ServerOptions()...)
	atev1.RegisterControlServer(gs, api)
	atev1.RegisterNodeRegistryServer(gs, atev1.UnimplementedNodeRegistryServer{})
	healthpb.RegisterHealthServer(gs, apiserver.NewStoreHealth(st, slog.New(slog.DiscardHandler)))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	e.addr = ln.Addr().String()
	// eddie's binding goes through the API, as `ate create rolebinding`'s.
	if _, err := e.client(t, adminTok).CreateRoleBinding(ctx, &atev1.CreateRoleBindingRequest{Binding: &atev1.RoleBinding{
		Name: "devs-edit-a", Atespace: "a", Role: "editor", Groups: []string{"devs"}}}); err != nil {
		t.Fatalf("CreateRoleBinding: %v", err)
	}
	return e
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// conn dials with token as the client config's (none when empty).
func (e *authEnv) conn(t *testing.T, token string) *grpc.ClientConn {
	t.Helper()
	opts, err := ateconfig.DialOptions(ateconfig.Config{Server: e.addr, Token: token})
	if err != nil {
		t.Fatal(err)
	}
	c, err := grpc.NewClient(e.addr, append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func (e *authEnv) client(t *testing.T, token string) atev1.ControlClient {
	return atev1.NewControlClient(e.conn(t, token))
}

// dump is everything the store holds that an RPC could change.
func (e *authEnv) dump(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	var out []any
	ns, err := e.st.ListAtespaces(ctx)
	must(t, err)
	out = append(out, ns)
	for _, a := range []string{"a", "b"} {
		tpl, err := e.st.ListTemplates(ctx, a)
		must(t, err)
		out = append(out, tpl)
	}
	actors, _, err := e.st.ListActors(ctx, "", 1000, "")
	must(t, err)
	tags, err := e.st.ListTags(ctx, "")
	must(t, err)
	alarms, err := e.st.ListAlarms(ctx, "", "")
	must(t, err)
	rbs, err := e.st.ListRoleBindings(ctx)
	must(t, err)
	out = append(out, actors, tags, alarms, rbs)
	b, err := json.Marshal(out)
	must(t, err)
	return string(b)
}

// fill sets every atespace field reachable in m to atespace, every name
// to "x" and every id to id, setting the first message field of a oneof
// that leads to an atespace, so the request addresses one object there.
func fill(m protoreflect.Message, atespace, id string) bool {
	found := false
	fields := m.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		f := fields.Get(i)
		if f.IsList() || f.IsMap() {
			continue
		}
		switch {
		case f.Kind() == protoreflect.StringKind && f.Name() == "atespace":
			m.Set(f, protoreflect.ValueOfString(atespace))
			found = true
		case f.Kind() == protoreflect.StringKind && (f.Name() == "name" || f.Name() == "template"):
			m.Set(f, protoreflect.ValueOfString("x"))
		case f.Kind() == protoreflect.StringKind && f.Name() == "id":
			m.Set(f, protoreflect.ValueOfString(id))
		case f.Kind() == protoreflect.MessageKind:
			if o := f.ContainingOneof(); o != nil && m.WhichOneof(o) != nil {
				continue
			}
			sub := m.NewField(f).Message()
			if fill(sub, atespace, id) {
				m.Set(f, protoreflect.ValueOfMessage(sub))
				found = true
			}
		}
	}
	return found
}

// call invokes the method of full name (unary or streaming) with req and
// returns its status code.
func call(ctx context.Context, conn *grpc.ClientConn, md protoreflect.MethodDescriptor, full string, req proto.Message) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	outType, err := protoregistry.GlobalTypes.FindMessageByName(md.Output().FullName())
	if err != nil {
		return err
	}
	out := outType.New().Interface()
	if !md.IsStreamingClient() && !md.IsStreamingServer() {
		return conn.Invoke(ctx, full, req, out)
	}
	s, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: md.IsStreamingServer(), ClientStreams: md.IsStreamingClient()}, full)
	if err != nil {
		return err
	}
	if err := s.SendMsg(req); err != nil && !errors.Is(err, context.Canceled) {
		// io.EOF: the server ended the stream; RecvMsg has its status.
		_ = err
	}
	_ = s.CloseSend()
	return s.RecvMsg(out)
}

// methods lists every Control and NodeRegistry method with its rule.
func methods(t *testing.T) map[string]protoreflect.MethodDescriptor {
	t.Helper()
	out := map[string]protoreflect.MethodDescriptor{}
	for _, fd := range []protoreflect.FileDescriptor{atev1.File_ate_v1_control_proto, atev1.File_ate_v1_node_proto} {
		for i := 0; i < fd.Services().Len(); i++ {
			sd := fd.Services().Get(i)
			if sd.Name() != "Control" && sd.Name() != "NodeRegistry" {
				continue
			}
			for j := 0; j < sd.Methods().Len(); j++ {
				md := sd.Methods().Get(j)
				out["/"+string(sd.FullName())+"/"+string(md.Name())] = md
			}
		}
	}
	return out
}

func newRequest(t *testing.T, md protoreflect.MethodDescriptor, atespace, id string) proto.Message {
	t.Helper()
	mt, err := protoregistry.GlobalTypes.FindMessageByName(md.Input().FullName())
	if err != nil {
		t.Fatal(err)
	}
	m := mt.New()
	fill(m, atespace, id)
	return m.Interface()
}

// TestViewerCannotMutate: a viewer of atespace a calls every method that
// is not a read (the list comes from auth.Methods, so a new RPC is
// covered) on a's objects: each is refused with PERMISSION_DENIED before
// its handler runs, and the store is unchanged. On atespace b, which the
// viewer cannot see, every method answers NOT_FOUND (or PERMISSION_DENIED
// for cluster-wide ones).
func TestViewerCannotMutate(t *testing.T) {
	e := startAuthEnv(t)
	ctx := context.Background()
	before := e.dump(t)
	conn := e.conn(t, viewerTok)
	mds := methods(t)
	n := 0
	for full, rule := range auth.Methods {
		if rule.Access == auth.Read || rule.Access == auth.SelfAuthenticating || rule.Access == auth.Public {
			// A self-authenticating method checks its own credential
			// (workeridentity's tests), and the health check asks for
			// none (TestHealthCheckIsPublic): no role applies to them.
			continue
		}
		md, ok := mds[full]
		if !ok {
			t.Fatalf("auth.Methods names %s, which no service has", full)
		}
		n++
		for _, ns := range []string{"a", "b"} {
			err := call(ctx, conn, md, full, newRequest(t, md, ns, e.alarms[ns]))
			want := codes.PermissionDenied
			if ns == "b" && rule.Access == auth.Write {
				want = codes.NotFound
			}
			if status.Code(err) != want {
				t.Errorf("viewer of a: %s in %s = %v, want %s", full, ns, err, want)
			}
		}
	}
	if n < 20 {
		t.Fatalf("only %d mutating methods found in auth.Methods", n)
	}
	if after := e.dump(t); after != before {
		t.Errorf("refused calls changed the store:\nbefore %s\nafter  %s", before, after)
	}
}

// TestHealthCheckIsPublic: a caller with no token (a probe carries none)
// gets the health check's answer, and nothing else of the health
// service: its List and Watch, which say more, have no rule and are
// refused, as an anonymous Control call still is.
func TestHealthCheckIsPublic(t *testing.T) {
	e := startAuthEnv(t)
	ctx := context.Background()
	anon := e.conn(t, "")
	hc := healthpb.NewHealthClient(anon)
	if got, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || got.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("anonymous health check = %v, %v; want SERVING", got, err)
	}
	if _, err := hc.List(ctx, &healthpb.HealthListRequest{}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("anonymous health List = %v, want PERMISSION_DENIED", err)
	}
	w, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err == nil {
		_, err = w.Recv()
	}
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("anonymous health Watch = %v, want PERMISSION_DENIED", err)
	}
	if _, err := atev1.NewControlClient(anon).ListActors(ctx, &atev1.ListActorsRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("anonymous ListActors beside the health check = %v, want UNAUTHENTICATED", err)
	}
}

// TestTokens: no token, a malformed header, an unknown token, a valid
// token used on another atespace; nothing changes, and the invisible
// atespace's actor answers exactly as an absent one does.
func TestTokens(t *testing.T) {
	e := startAuthEnv(t)
	ctx := context.Background()
	before := e.dump(t)
	del := &atev1.DeleteActorRequest{Atespace: "a", Name: "x", Force: true}
	for name, c := range map[string]atev1.ControlClient{
		"none":    e.client(t, ""),
		"unknown": e.client(t, "no-such-token"),
		"jwt-ish": e.client(t, "eyJhbGciOiJub25lIn0.e30."),
	} {
		if _, err := c.DeleteActor(ctx, del); status.Code(err) != codes.Unauthenticated {
			t.Errorf("%s token: DeleteActor = %v, want UNAUTHENTICATED", name, err)
		}
		if _, err := c.ListActors(ctx, &atev1.ListActorsRequest{}); status.Code(err) != codes.Unauthenticated {
			t.Errorf("%s token: ListActors = %v, want UNAUTHENTICATED", name, err)
		}
	}
	// A header that is not "Bearer <token>".
	raw := e.conn(t, "")
	if err := raw.Invoke(metadataCtx(ctx, "authorization", "Basic dmVyYTp4"), atev1.Control_ListActors_FullMethodName,
		&atev1.ListActorsRequest{}, &atev1.ListActorsResponse{}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("Basic authorization: %v, want UNAUTHENTICATED", err)
	}

	// The API's own answer for an absent actor, c/x (no atespace c), and
	// the interceptor's for b/x, which a's editor cannot see: the same
	// code, message (but for the name) and details.
	_, absent := e.client(t, adminTok).GetActor(ctx, &atev1.GetActorRequest{Atespace: "c", Name: "x"})
	_, hidden := e.client(t, editorTok).GetActor(ctx, &atev1.GetActorRequest{Atespace: "b", Name: "x"})
	wantMsg := strings.ReplaceAll(status.Convert(absent).Message(), "c/x", "b/x")
	if status.Code(hidden) != codes.NotFound || status.Convert(hidden).Message() != wantMsg ||
		!proto.Equal(status.Convert(hidden).Proto().GetDetails()[0], status.Convert(absent).Proto().GetDetails()[0]) {
		t.Errorf("editor of a reading b/x: %v; want NOT_FOUND exactly as an absent actor (%v)", hidden, absent)
	}
	if _, err := e.client(t, editorTok).DeleteActor(ctx, &atev1.DeleteActorRequest{Atespace: "b", Name: "x", Force: true}); status.Code(err) != codes.NotFound {
		t.Errorf("editor of a deleting b/x: %v, want NOT_FOUND", err)
	}
	if after := e.dump(t); after != before {
		t.Errorf("refused calls changed the store:\nbefore %s\nafter  %s", before, after)
	}
}

// TestEditorListsOnlyItsAtespace: lists across atespaces hold only a's
// items for a's editor; a binding created through the API applies to
// the next call, and its deletion too.
func TestEditorListsOnlyItsAtespace(t *testing.T) {
	e := startAuthEnv(t)
	ctx := context.Background()
	ed, admin := e.client(t, editorTok), e.client(t, adminTok)
	atespacesOf := func() []string {
		t.Helper()
		var seen []string
		token := ""
		for {
			// Page size 1 walks every page token the caller gets.
			actors, err := ed.ListActors(ctx, &atev1.ListActorsRequest{PageSize: 1, PageToken: token})
			must(t, err)
			for _, a := range actors.GetActors() {
				seen = append(seen, "actor "+a.GetAtespace())
			}
			if token = actors.GetNextPageToken(); token == "" {
				break
			}
			if raw, _ := base64.RawURLEncoding.DecodeString(token); strings.Contains(string(raw), "b/") && !strings.Contains(strings.Join(seen, ","), "atespace b") {
				t.Errorf("page token %q names something of atespace b", raw)
			}
		}
		tpls, err := ed.ListActorTemplates(ctx, &atev1.ListActorTemplatesRequest{})
		must(t, err)
		for _, x := range tpls.GetTemplates() {
			seen = append(seen, "template "+x.GetAtespace())
		}
		tags, err := ed.ListTags(ctx, &atev1.ListTagsRequest{})
		must(t, err)
		for _, x := range tags.GetTags() {
			seen = append(seen, "tag "+x.GetAtespace())
		}
		ns, err := ed.ListAtespaces(ctx, &atev1.ListAtespacesRequest{})
		must(t, err)
		for _, x := range ns.GetAtespaces() {
			seen = append(seen, "atespace "+x.GetName())
		}
		slices.Sort(seen)
		return seen
	}
	if got := strings.Join(atespacesOf(), ", "); got != "actor a, atespace a, tag a, template a" {
		t.Errorf("editor of a lists %s; want a's only", got)
	}
	// b's lists are empty for a's editor, as an absent atespace's are.
	absent, err := admin.ListActors(ctx, &atev1.ListActorsRequest{Atespace: "c"})
	must(t, err)
	if got, err := ed.ListActors(ctx, &atev1.ListActorsRequest{Atespace: "b"}); err != nil || !proto.Equal(got, absent) {
		t.Errorf("editor of a lists b's actors: %v, %v; want %v as for an absent atespace", got, err, absent)
	}
	if got, err := ed.ListActorTemplates(ctx, &atev1.ListActorTemplatesRequest{Atespace: "b"}); err != nil || len(got.GetTemplates()) != 0 {
		t.Errorf("editor of a lists b's templates: %v, %v; want none", got, err)
	}
	if _, err := ed.ListRoleBindings(ctx, &atev1.ListRoleBindingsRequest{}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("editor lists role bindings: %v, want PERMISSION_DENIED", err)
	}
	_, err = admin.CreateRoleBinding(ctx, &atev1.CreateRoleBindingRequest{Binding: &atev1.RoleBinding{Name: "eddie-views-b", Atespace: "b", Role: "viewer", Users: []string{"eddie"}}})
	must(t, err)
	if got := strings.Join(atespacesOf(), ", "); got != "actor a, actor b, atespace a, atespace b, tag a, tag b, template a, template b" {
		t.Errorf("after binding eddie as b's viewer: %s", got)
	}
	_, err = admin.DeleteRoleBinding(ctx, &atev1.DeleteRoleBindingRequest{Name: "eddie-views-b"})
	must(t, err)
	if got := strings.Join(atespacesOf(), ", "); got != "actor a, atespace a, tag a, template a" {
		t.Errorf("after deleting the binding: %s", got)
	}
	for _, bad := range []*atev1.RoleBinding{
		{Name: "x", Atespace: "a", Role: "owner", Users: []string{"u"}},
		{Name: "x", Atespace: "a", Role: "viewer"},
		{Name: "Bad_Name", Atespace: "a", Role: "viewer", Users: []string{"u"}},
	} {
		if _, err := admin.CreateRoleBinding(ctx, &atev1.CreateRoleBindingRequest{Binding: bad}); status.Code(err) != codes.InvalidArgument {
			t.Errorf("CreateRoleBinding(%v) = %v, want INVALID_ARGUMENT", bad, err)
		}
	}
	if _, err := admin.CreateRoleBinding(ctx, &atev1.CreateRoleBindingRequest{Binding: &atev1.RoleBinding{Name: "devs-edit-a", Atespace: "a", Role: "viewer", Users: []string{"u"}}}); status.Code(err) != codes.AlreadyExists {
		t.Errorf("CreateRoleBinding of a taken name = %v, want ALREADY_EXISTS", err)
	}
}

func metadataCtx(ctx context.Context, kv ...string) context.Context {
	return grpcmd.AppendToOutgoingContext(ctx, kv...)
}

// TestRouterComponent: the router may call its methods in every atespace
// (no role bindings apply to it) and nothing else.
func TestRouterComponent(t *testing.T) {
	e := startAuthEnv(t)
	ctx := context.Background()
	before := e.dump(t)
	conn := e.conn(t, routerTok)
	mds := methods(t)
	for full, rule := range auth.Methods {
		if rule.Access == auth.SelfAuthenticating || rule.Access == auth.Public {
			continue // its handler checks its credential, or needs none
		}
		md := mds[full]
		allowed := slices.Contains(rule.Components, auth.ComponentRouter)
		if allowed && rule.Access != auth.Read {
			continue // a write would run its handler (no lifecycle here)
		}
		for _, ns := range []string{"a", "b"} {
			err := call(ctx, conn, md, full, newRequest(t, md, ns, e.alarms[ns]))
			refused := status.Code(err) == codes.PermissionDenied
			if refused == allowed {
				t.Errorf("router: %s in %s = %v; allowed to the router: %v", full, ns, err, allowed)
			}
		}
	}
	if after := e.dump(t); after != before {
		t.Errorf("the router's calls changed the store:\nbefore %s\nafter  %s", before, after)
	}
}

// TestEditorEvents: listing and watching events across atespaces, a's
// editor gets a's only (the watch's messages are filtered as they are
// sent).
func TestEditorEvents(t *testing.T) {
	e := startAuthEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, ns := range []string{"b", "a", "b", "a"} {
		must(t, e.st.AppendEvent(ctx, &store.Event{Time: time.Now(), Type: store.EventNormal, Atespace: ns, Actor: "x", ActorUID: "uid-" + ns,
			From: store.Suspended, To: store.Suspended, Message: "test"}))
	}
	ed := e.client(t, editorTok)
	list, err := ed.ListEvents(ctx, &atev1.ListEventsRequest{})
	must(t, err)
	if len(list.GetEvents()) != 2 {
		t.Errorf("editor of a lists %d events, want a's 2: %v", len(list.GetEvents()), list.GetEvents())
	}
	for _, ev := range list.GetEvents() {
		if ev.GetAtespace() != "a" {
			t.Errorf("editor of a lists an event of %s", ev.GetAtespace())
		}
	}
	w, err := ed.WatchEvents(ctx, &atev1.WatchEventsRequest{})
	must(t, err)
	for i := 0; i < 2; i++ {
		ev, err := w.Recv()
		must(t, err)
		if ev.GetAtespace() != "a" {
			t.Errorf("editor of a watches an event of %s", ev.GetAtespace())
		}
	}
	// A third b event, then an a event: the watch skips the first.
	must(t, e.st.AppendEvent(ctx, &store.Event{Time: time.Now(), Type: store.EventNormal, Atespace: "b", Actor: "x", ActorUID: "uid-b", To: store.Suspended, Message: "late"}))
	must(t, e.st.AppendEvent(ctx, &store.Event{Time: time.Now(), Type: store.EventNormal, Atespace: "a", Actor: "x", ActorUID: "uid-a", To: store.Suspended, Message: "late"}))
	ev, err := w.Recv()
	must(t, err)
	if ev.GetAtespace() != "a" || ev.GetMessage() != "late" {
		t.Errorf("next watched event %v, want a's late one", ev)
	}
}

// TestEvictionNamesOnlyToReaders attacks as a tenant: a's actor x was
// evicted for b's actor x-secret (its record written by a version that
// named it in the message too). vera, a viewer of a only, reads a's actor
// and events every way the API offers — get, list, list events, watch
// events — and finds the eviction but not b's actor's name; the cluster
// admin, who may read b, finds it.
func TestEvictionNamesOnlyToReaders(t *testing.T) {
	e := startAuthEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const secret = "x-secret"
	waiter := names.ActorKey{Atespace: "b", Name: secret}
	a, err := e.st.GetActor(ctx, names.ActorKey{Atespace: "a", Name: "x"})
	must(t, err)
	a.Reason, a.EvictedFor = store.ReasonEvicted, waiter
	a.Message = "suspended to make room for b/" + secret + " (evicted: least recently used idle actor)"
	a, err = e.st.UpdateActor(ctx, a)
	must(t, err)
	must(t, e.st.AppendEvent(ctx, &store.Event{Time: time.Now(), Type: store.EventNormal, Atespace: "a", Actor: "x", ActorUID: a.UID,
		From: store.Suspending, To: store.Suspended, Message: a.Message, Record: a}))

	seen := func(c atev1.ControlClient) string {
		t.Helper()
		var b strings.Builder
		got, err := c.GetActor(ctx, &atev1.GetActorRequest{Atespace: "a", Name: "x"})
		must(t, err)
		if got.GetReason() != atev1.CheckpointReason_EVICTED {
			t.Errorf("GetActor a/x: reason %s, want EVICTED", got.GetReason())
		}
		b.WriteString(prototext.Format(got))
		list, err := c.ListActors(ctx, &atev1.ListActorsRequest{Atespace: "a"})
		must(t, err)
		b.WriteString(prototext.Format(list))
		evs, err := c.ListEvents(ctx, &atev1.ListEventsRequest{Atespace: "a"})
		must(t, err)
		b.WriteString(prototext.Format(evs))
		w, err := c.WatchEvents(ctx, &atev1.WatchEventsRequest{Atespace: "a"})
		must(t, err)
		ev, err := w.Recv()
		must(t, err)
		if ev.GetActorRecord() == nil {
			t.Errorf("watched event without its record: %v", ev)
		}
		b.WriteString(prototext.Format(ev))
		return b.String()
	}
	if got := seen(e.client(t, viewerTok)); strings.Contains(got, secret) {
		t.Errorf("a viewer of a only sees b's actor's name:\n%s", got)
	} else if !strings.Contains(got, "to make room for an actor of another atespace") {
		t.Errorf("a viewer of a is not told the eviction was for another atespace's actor:\n%s", got)
	}
	if got := seen(e.client(t, adminTok)); !strings.Contains(got, `"b/`+secret+`"`) {
		t.Errorf("the cluster admin does not see whom the eviction was for:\n%s", got)
	}
}

// TestIngressReviewOfUserTokens: the router's ReviewIngressToken accepts
// an atespace's ingress tokens, and JWTs of the issuer with the ingress
// audience (--oidc-ingress-client-id) of a user holding any role in the
// atespace (auth.Policy.MayReach). Credentials for the API — static
// tokens, the admin token, JWTs with the API's audience — are refused,
// whatever the user's roles: the router's port is plain HTTP and its
// callers often third parties, so they must never carry one. And a JWT
// for actors opens no API call.
func TestIngressReviewOfUserTokens(t *testing.T) {
	is := newTestIssuer(t)
	e := startAuthEnvWith(t, func(c *auth.Config) {
		c.OIDC = auth.OIDCConfig{IssuerURL: is.srv.URL, ClientID: "ate", UsernamePrefix: "-", Client: is.srv.Client()}
		c.IngressClientID = "ate-ingress"
	})
	ctx := context.Background()
	it, err := e.client(t, adminTok).CreateIngressToken(ctx, &atev1.CreateIngressTokenRequest{Atespace: "a", Name: "web"})
	must(t, err)
	apiJWT, ingressJWT := is.sign(t, "olga", "ate"), is.sign(t, "olga", "ate-ingress")
	// Issuers with audience mappers (a Kubernetes TokenRequest with two
	// audiences) may put both in one token: it is neither credential.
	bothJWT := is.sign(t, "olga", "ate", "ate-ingress")
	router := e.client(t, routerTok)
	for _, c := range []struct {
		name, token, atespace string
		allowed               bool
		subject               string
	}{
		{"a's ingress token in a", it.GetToken(), "a", true, "ingresstoken:a/web"},
		{"a's ingress token in b", it.GetToken(), "b", false, ""},
		{"ingress-audience JWT of a viewer of a, in a", ingressJWT, "a", true, "olga"},
		{"ingress-audience JWT of a viewer of a, in b", ingressJWT, "b", false, ""},
		{"API-audience JWT of a viewer of a", apiJWT, "a", false, ""},
		{"JWT of both audiences", bothJWT, "a", false, ""},
		{"JWT of another audience", is.sign(t, "olga", "someone-else"), "a", false, ""},
		{"static token of a viewer of a", viewerTok, "a", false, ""},
		{"static token of an editor of a", editorTok, "a", false, ""},
		{"the cluster admin's token", adminTok, "b", false, ""},
		{"unknown token", "no-such-token", "a", false, ""},
		{"the router's own token", routerTok, "a", false, ""},
	} {
		got, err := router.ReviewIngressToken(ctx, &atev1.ReviewIngressTokenRequest{Atespace: c.atespace, Token: c.token})
		if err != nil {
			t.Errorf("%s: ReviewIngressToken: %v", c.name, err)
			continue
		}
		if got.GetAllowed() != c.allowed || got.GetSubject() != c.subject {
			t.Errorf("%s: allowed %v subject %q; want %v %q", c.name, got.GetAllowed(), got.GetSubject(), c.allowed, c.subject)
		}
	}
	// The two audiences are two credentials: the API takes its own...
	if _, err := e.client(t, apiJWT).ListActors(ctx, &atev1.ListActorsRequest{Atespace: "a"}); err != nil {
		t.Errorf("API-audience JWT on the API: %v", err)
	}
	// ...and never the actors'.
	if _, err := e.client(t, ingressJWT).ListActors(ctx, &atev1.ListActorsRequest{Atespace: "a"}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("ingress-audience JWT on the API: %v, want UNAUTHENTICATED", err)
	}
	if _, err := e.client(t, bothJWT).ListActors(ctx, &atev1.ListActorsRequest{Atespace: "a"}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("JWT of both audiences on the API: %v, want UNAUTHENTICATED", err)
	}
	// Users may not ask the router's question themselves (an oracle for
	// guessing tokens).
	if _, err := e.client(t, adminTok).ReviewIngressToken(ctx, &atev1.ReviewIngressTokenRequest{Atespace: "a", Token: viewerTok}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("admin calls ReviewIngressToken: %v, want PERMISSION_DENIED", err)
	}
}
