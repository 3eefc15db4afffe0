package nodeagent

import (
	"context"
	"net/http"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/store"
)

// TestSetSelfAlarm: the registry relays a node's forwarded alarm request
// to its handler only for the node's own workers.
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
	r.SetSelfAlarmHandler(func(_ context.Context, worker, uid string, body []byte) (int, []byte) {
		got = worker + " " + uid + " " + string(body)
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
			if tc.code == codes.OK && (resp.GetStatus() != http.StatusCreated || string(resp.GetAnswer()) != `{"id":"a1"}` || got != "w1 uid-1 b") {
				t.Fatalf("answer %d %q, handler got %q", resp.GetStatus(), resp.GetAnswer(), got)
			}
			if tc.code != codes.OK && got != "" {
				t.Fatalf("handler called for %s: %q", tc.name, got)
			}
		})
	}
}
