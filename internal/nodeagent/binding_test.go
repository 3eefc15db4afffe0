package nodeagent

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/auth"
	"substrate.dev/ate/internal/pki"
	"substrate.dev/ate/internal/store"
)

// TestNodeIdentityBinding: over real mutual TLS, a node's certificate
// binds it to its name: it can register and report only as itself and
// only its own workers; other components cannot call the registry.
func TestNodeIdentityBinding(t *testing.T) {
	r, _, st := newTestRegistry(t)
	r.SetSelfCallHandler(func(context.Context, string, string, string, []byte) (int, []byte) { return 201, nil })
	if err := st.PutWorker(t.Context(), &store.Worker{Name: "w2", Node: "n2"}); err != nil {
		t.Fatal(err)
	}
	ca, err := pki.NewCA(auth.DefaultTrustDomain, 0)
	if err != nil {
		t.Fatal(err)
	}
	transport := func(c auth.Component, name string) *pki.Transport {
		src, err := pki.NewMemorySource(ca, pki.LeafRequest{Identity: auth.Identity{Component: c, Name: name}})
		if err != nil {
			t.Fatal(err)
		}
		return &pki.Transport{Source: src, TrustDomain: auth.DefaultTrustDomain}
	}
	gs := grpc.NewServer(transport(auth.ComponentAPIServer, "api").ServerOptions(pki.ClientCertOptional)...)
	atev1.RegisterNodeRegistryServer(gs, r)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	client := func(c auth.Component, name string) atev1.NodeRegistryClient {
		conn, err := grpc.NewClient(ln.Addr().String(), transport(c, name).DialOption(auth.ComponentAPIServer))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return atev1.NewNodeRegistryClient(conn)
	}
	// session sends msgs on a new Register stream of cl and returns the
	// first error the stream ends with (nil: welcomed, all sent, and the
	// stream still open).
	session := func(cl atev1.NodeRegistryClient, h *atev1.NodeHello, then ...*atev1.NodeMessage) error {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		s, err := cl.Register(ctx)
		if err != nil {
			return err
		}
		if err := s.Send(&atev1.NodeMessage{Msg: &atev1.NodeMessage_Hello{Hello: h}}); err != nil {
			return err
		}
		if _, err := s.Recv(); err != nil {
			return err
		}
		for _, m := range then {
			if err := s.Send(m); err != nil {
				break
			}
		}
		if len(then) == 0 {
			return nil
		}
		_, err = s.Recv()
		return err
	}
	n1 := client(auth.ComponentNode, "n1")
	event := func(worker string) *atev1.NodeMessage {
		return &atev1.NodeMessage{Msg: &atev1.NodeMessage_Event{Event: &atev1.NodeEvent{Kind: atev1.NodeEvent_SELF_REQUEST, Worker: worker, ActorUid: "a", Action: "suspend"}}}
	}
	for _, tc := range []struct {
		name string
		err  error
		want codes.Code
	}{
		{"registers as another node", session(n1, hello("n2", 1, &atev1.NodeWorker{Name: "w9"})), codes.PermissionDenied},
		{"registers another node's worker", session(n1, hello("n1", 1, &atev1.NodeWorker{Name: "w2"})), codes.PermissionDenied},
		{"a router registers", session(client(auth.ComponentRouter, "r"), hello("n1", 1, &atev1.NodeWorker{Name: "w1"})), codes.PermissionDenied},
		{"asks suspension on another node's worker", session(n1, hello("n1", 1, &atev1.NodeWorker{Name: "w1"}), event("w2")), codes.PermissionDenied},
		{"reports another node's worker's activity", session(n1, hello("n1", 1, &atev1.NodeWorker{Name: "w1"}),
			&atev1.NodeMessage{Msg: &atev1.NodeMessage_Heartbeat{Heartbeat: &atev1.NodeHeartbeat{Activity: []*atev1.WorkerActivity{{Worker: "w2"}}}}}), codes.PermissionDenied},
		{"registers as itself", session(n1, hello("n1", 1, &atev1.NodeWorker{Name: "w1"})), codes.OK},
	} {
		if got := status.Code(tc.err); got != tc.want {
			t.Errorf("%s: %v, want %s", tc.name, tc.err, tc.want)
		}
	}
	if _, err := n1.SetSelfAlarm(t.Context(), &atev1.SetSelfAlarmRequest{Node: "n2", Worker: "w2", ActorUid: "a"}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("an alarm for another node's worker: %v, want PermissionDenied", err)
	}
	if resp, err := n1.SetSelfAlarm(t.Context(), &atev1.SetSelfAlarmRequest{Node: "n1", Worker: "w1", ActorUid: "a"}); err != nil || resp.GetStatus() != 201 {
		t.Errorf("an alarm for its own worker: %v, %v", resp, err)
	}
	// Nothing a refused session sent reached the store: w2 is still n2's.
	if w, err := st.GetWorker(t.Context(), "w2"); err != nil || w.Node != "n2" {
		t.Errorf("w2 after the refusals: %+v, %v", w, err)
	}
}
