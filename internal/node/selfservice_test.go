package node

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestSelfServiceAlarms: POST /v1/alarms hands the hosted actor's worker,
// uid and body to the alarm handler and relays its answer; without a
// handler, or without an actor, it says why.
func TestSelfServiceAlarms(t *testing.T) {
	var got struct{ worker, uid, body string }
	handler := func(_ context.Context, worker, uid string, body []byte) (int, []byte) {
		got.worker, got.uid, got.body = worker, uid, string(body)
		return http.StatusCreated, []byte(`{"id":"a1"}`)
	}
	for _, tc := range []struct {
		name    string
		alarm   SelfAlarmFunc
		hosted  string
		body    string
		status  int
		answer  string
		handled bool
	}{
		{"set", handler, "uid-1", `{"in":"1m","path":"/t"}`, http.StatusCreated, `{"id":"a1"}`, true},
		{"no handler", nil, "uid-1", `{}`, http.StatusNotImplemented, "Control API", false},
		{"no actor", handler, "", `{}`, http.StatusConflict, "hosts no actor", false},
		{"body too large", handler, "uid-1", strings.Repeat("x", maxSelfAlarmBody+1), http.StatusRequestEntityTooLarge, "at most", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got.worker, got.uid, got.body = "", "", ""
			s := &slot{name: "w3"}
			if tc.hosted != "" {
				s.gate.open(tc.hosted, "c", 8080)
			}
			ss := &selfService{log: slog.New(slog.DiscardHandler), alarm: tc.alarm}
			rec := httptest.NewRecorder()
			ss.handler(s).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/alarms", strings.NewReader(tc.body)))
			if rec.Code != tc.status || !strings.Contains(rec.Body.String(), tc.answer) {
				t.Fatalf("answer %d %q, want %d saying %q", rec.Code, rec.Body, tc.status, tc.answer)
			}
			if handled := got.worker != ""; handled != tc.handled {
				t.Fatalf("handler called: %v, want %v", handled, tc.handled)
			}
			if tc.handled && (got.worker != "w3" || got.uid != tc.hosted || got.body != tc.body) {
				t.Fatalf("handler got %+v", got)
			}
		})
	}
}
