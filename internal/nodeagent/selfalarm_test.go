package nodeagent

import (
	"context"
	"net/http"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/auth"
	"substrate.dev/ate/internal/store"
)

// TestSetSelfAlarm: the registry relays a node's forwarded alarm request
// to its self-call handler, as the alarms call, only for the node's own
// workers.
func TestSetSelfAlarm(t *testing.T) {
	ctx := context.Background()
	r, _, st := newTestRegistry(t)
	if err := st.PutWorker(ctx, &store.Worker{Name: "w1", Node: "n1", TunnelAddr: "x"}); err != nil {
		t.Fatal(err)
	}
	req := &atev1.SetSelfAlarmRequest{Node: "n1", Worker: "w1", ActorUid: "uid-1", Body: []byte(`{"in":"1m","path":"/t"}`)}
	if _, err := r.SetSelfAlarm(ctx, req); status.Code(err) != codes.Unimplemented {
		t.Fatalf("without a handler: %v, want Unimplemented", err)
	}
	var got string
	r.SetSelfCallHandler(func(_ context.Context, worker, uid, call string, body []byte) (int, []byte) {
		got = worker + " " + uid + " " + call + " " + string(body)
		return http.StatusCreated, []byte(`{"id":"a1"}`)
	})
	for _, tc := range []struct {
		name, node, worker string
		code               codes.Code
	}{
		{"own worker", "n1", "w1", codes.OK},
		{"another node's worker", "n2", "w1", codes.FailedPrecondition},
		{"unknown worker", "n1", "w9", codes.FailedPrecondition},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got = ""
			req := &atev1.SetSelfAlarmRequest{Node: tc.node, Worker: tc.worker, ActorUid: "uid-1", Body: []byte("b")}
			resp, err := r.SetSelfAlarm(ctx, req)
			if status.Code(err) != tc.code {
				t.Fatalf("SetSelfAlarm = %v, want %s", err, tc.code)
			}
			if tc.code == codes.OK && (resp.GetStatus() != http.StatusCreated || string(resp.GetAnswer()) != `{"id":"a1"}` || got != "w1 uid-1 alarms b") {
				t.Fatalf("answer %d %q, handler got %q", resp.GetStatus(), resp.GetAnswer(), got)
			}
			if tc.code != codes.OK && got != "" {
				t.Fatalf("handler called for %s: %q", tc.name, got)
			}
		})
	}
}

// TestSelfCall: the registry relays a node's forwarded token or
// checkpoint call to its handler only for the node's own workers, and
// only for the node its certificate names.
func TestSelfCall(t *testing.T) {
	ctx := context.Background()
	r, _, st := newTestRegistry(t)
	if err := st.PutWorker(ctx, &store.Worker{Name: "w1", Node: "n1", TunnelAddr: "x"}); err != nil {
		t.Fatal(err)
	}
	if err := st.PutWorker(ctx, &store.Worker{Name: "w2", Node: "n2", TunnelAddr: "y"}); err != nil {
		t.Fatal(err)
	}
	req := &atev1.SelfCallRequest{Node: "n1", Worker: "w1", ActorUid: "uid-1", Call: "token"}
	if _, err := r.SelfCall(ctx, req); status.Code(err) != codes.Unimplemented {
		t.Fatalf("without a handler: %v, want Unimplemented", err)
	}
	var got string
	r.SetSelfCallHandler(func(_ context.Context, worker, uid, call string, body []byte) (int, []byte) {
		got = worker + " " + uid + " " + call + " " + string(body)
		return http.StatusOK, []byte(`{"token":"t"}`)
	})
	n1 := auth.NewContext(ctx, &auth.Principal{Component: &auth.Identity{Component: auth.ComponentNode, Name: "n1"}})
	for _, tc := range []struct {
		name, node, worker string
		ctx                context.Context
		code               codes.Code
	}{
		{"own worker", "n1", "w1", ctx, codes.OK},
		{"own worker, certificate", "n1", "w1", n1, codes.OK},
		{"another node's worker", "n2", "w1", ctx, codes.FailedPrecondition},
		{"certificate of another node", "n2", "w1", auth.NewContext(ctx, &auth.Principal{Component: &auth.Identity{Component: auth.ComponentNode, Name: "n1"}}), codes.PermissionDenied},
		{"unknown worker", "n1", "w9", ctx, codes.FailedPrecondition},
		// A node, itself by its certificate, asking for an actor on
		// another node's worker.
		{"certificate, another node's worker", "n1", "w2", n1, codes.FailedPrecondition},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got = ""
			resp, err := r.SelfCall(tc.ctx, &atev1.SelfCallRequest{Node: tc.node, Worker: tc.worker, ActorUid: "uid-1", Call: "token", Body: []byte("b")})
			if status.Code(err) != tc.code {
				t.Fatalf("SelfCall = %v, want %s", err, tc.code)
			}
			if tc.code == codes.OK && (resp.GetStatus() != http.StatusOK || got != "w1 uid-1 token b") {
				t.Fatalf("answer %d %q, handler got %q", resp.GetStatus(), resp.GetAnswer(), got)
			}
			if tc.code != codes.OK && got != "" {
				t.Fatalf("handler called for %s: %q", tc.name, got)
			}
		})
	}
}
