package node

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"substrate.dev/ate/internal/nodeapi"
)

// TestSelfServiceAlarms: POST /v1/alarms hands the hosted actor's worker,
// uid and body to the call handler as the alarms call and relays its
// answer; without a handler, or without an actor, it says why.
func TestSelfServiceAlarms(t *testing.T) {
	var got struct{ worker, uid, call, body string }
	handler := func(_ context.Context, worker, uid, call string, body []byte) (int, []byte) {
		got.worker, got.uid, got.call, got.body = worker, uid, call, string(body)
		return http.StatusCreated, []byte(`{"id":"a1"}`)
	}
	for _, tc := range []struct {
		name    string
		handler nodeapi.SelfCallFunc
		hosted  string
		body    string
		status  int
		answer  string
		handled bool
	}{
		{"set", handler, "uid-1", `{"in":"1m","path":"/t"}`, http.StatusCreated, `{"id":"a1"}`, true},
		{"no handler", nil, "uid-1", `{}`, http.StatusNotImplemented, "Control API", false},
		{"no actor", handler, "", `{}`, http.StatusConflict, "hosts no actor", false},
		{"body too large", handler, "uid-1", strings.Repeat("x", maxSelfBody+1), http.StatusRequestEntityTooLarge, "at most", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got.worker, got.uid, got.call, got.body = "", "", "", ""
			s := &slot{name: "w3"}
			if tc.hosted != "" {
				s.gate.open(tc.hosted, "c", 8080, 0)
			}
			ss := &selfService{log: slog.New(slog.DiscardHandler), call: tc.handler}
			rec := httptest.NewRecorder()
			ss.handler(s).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/alarms", strings.NewReader(tc.body)))
			if rec.Code != tc.status || !strings.Contains(rec.Body.String(), tc.answer) {
				t.Fatalf("answer %d %q, want %d saying %q", rec.Code, rec.Body, tc.status, tc.answer)
			}
			if handled := got.worker != ""; handled != tc.handled {
				t.Fatalf("handler called: %v, want %v", handled, tc.handled)
			}
			if tc.handled && (got.worker != "w3" || got.uid != tc.hosted || got.call != "alarms" || got.body != tc.body) {
				t.Fatalf("handler got %+v", got)
			}
		})
	}
}

// TestSelfServiceCalls: token, suspend and pause hand the hosted actor's
// worker, uid, call and body to the call handler (the API server, which
// checks the assignment) and relay its verdict, a refusal included; no
// actor means 409 without asking; no handler (no uplink): 501, nothing
// done.
func TestSelfServiceCalls(t *testing.T) {
	type call struct{ worker, uid, call, body string }
	var got call
	verdict := func(status int, answer string) nodeapi.SelfCallFunc {
		return func(_ context.Context, worker, uid, c string, body []byte) (int, []byte) {
			got = call{worker, uid, c, string(body)}
			return status, []byte(answer)
		}
	}
	for _, tc := range []struct {
		name, path, body, hosted string
		handler                  nodeapi.SelfCallFunc
		status                   int
		answer                   string
		want                     call
		ctype                    string
	}{
		{"token", "/v1/token", `{"audience":"x"}`, "uid-1", verdict(200, `{"token":"t"}`), 200, `{"token":"t"}`,
			call{"w3", "uid-1", "token", `{"audience":"x"}`}, "application/json"},
		{"token refused", "/v1/token", ``, "uid-1", verdict(409, "moved"), 409, "moved", call{"w3", "uid-1", "token", ""}, "text/plain; charset=utf-8"},
		{"token no handler", "/v1/token", ``, "uid-1", nil, 501, "not available", call{}, ""},
		{"token no actor", "/v1/token", ``, "", verdict(200, "x"), 409, "hosts no actor", call{}, ""},
		{"suspend", "/v1/suspend", ``, "uid-1", verdict(202, "suspend requested"), 202, "suspend requested", call{"w3", "uid-1", "suspend", ""}, ""},
		{"pause refused", "/v1/pause", ``, "uid-1", verdict(409, "not on worker"), 409, "not on worker", call{"w3", "uid-1", "pause", ""}, ""},
		{"suspend no handler", "/v1/suspend", ``, "uid-1", nil, 501, "not available", call{}, ""},
		{"unknown action", "/v1/explode", ``, "uid-1", verdict(202, "x"), 404, "", call{}, ""},
		// The actor is untrusted: nothing it sends names the worker, the
		// incarnation or the call. Its slot and gate do; the body goes
		// as is, for the API server to refuse what it does not know.
		{"token naming another actor", "/v1/token?worker=w9&actorUid=uid-9&call=suspend", `{"worker":"w9"}`, "uid-1",
			verdict(400, "bad"), 400, "bad", call{"w3", "uid-1", "token", `{"worker":"w9"}`}, ""},
		{"suspend naming another actor", "/v1/suspend?worker=w9&actorUid=uid-9", ``, "uid-1",
			verdict(202, "suspend requested"), 202, "suspend requested", call{"w3", "uid-1", "suspend", ""}, ""},
		{"no action", "/v1/", ``, "uid-1", verdict(202, "x"), 404, "", call{}, ""},
		{"action with a slash", "/v1/suspend%2Ftoken", ``, "uid-1", verdict(202, "x"), 404, "", call{}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got = call{}
			s := &slot{name: "w3"}
			if tc.hosted != "" {
				s.gate.open(tc.hosted, "c", 8080, 0)
			}
			ss := &selfService{log: slog.New(slog.DiscardHandler), call: tc.handler}
			rec := httptest.NewRecorder()
			ss.handler(s).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, tc.path, strings.NewReader(tc.body)))
			if rec.Code != tc.status || !strings.Contains(rec.Body.String(), tc.answer) {
				t.Fatalf("answer %d %q, want %d saying %q", rec.Code, rec.Body, tc.status, tc.answer)
			}
			if got != tc.want {
				t.Fatalf("handler got %+v, want %+v", got, tc.want)
			}
			if tc.ctype != "" && rec.Header().Get("Content-Type") != tc.ctype {
				t.Errorf("Content-Type %q, want %q", rec.Header().Get("Content-Type"), tc.ctype)
			}
		})
	}
}
