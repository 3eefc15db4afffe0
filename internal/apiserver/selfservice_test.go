package apiserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"substrate.dev/ate/internal/alarm"
	"substrate.dev/ate/internal/checkpoint"
	"substrate.dev/ate/internal/identity"
	"substrate.dev/ate/internal/lifecycle"
	"substrate.dev/ate/internal/names"
	"substrate.dev/ate/internal/nodeapi"
	"substrate.dev/ate/internal/store"
)

// selfDomain is each self-service domain at once: it records what it was
// asked and answers with its fields.
type selfDomain struct {
	alarm *store.Alarm
	token *identity.Token
	err   error
	got   string
}

func (d *selfDomain) SetSelf(_ context.Context, worker, uid string, body []byte) (*store.Alarm, error) {
	d.got = fmt.Sprintf("alarm %s %s %s", worker, uid, body)
	return d.alarm, d.err
}

func (d *selfDomain) MintSelf(_ context.Context, worker, uid string, body []byte) (*identity.Token, error) {
	d.got = fmt.Sprintf("token %s %s %s", worker, uid, body)
	return d.token, d.err
}

func (d *selfDomain) RequestSelfCheckpoint(_ context.Context, worker, uid string, action checkpoint.Action) error {
	d.got = fmt.Sprintf("%s %s %s", action, worker, uid)
	return d.err
}

// TestSelfServiceAnswers: each self-service call's result, and each
// domain error, becomes the status and body the node relays (the one
// table, selfStatus); only failures nobody foresaw are logged.
func TestSelfServiceAnswers(t *testing.T) {
	at := time.Date(2030, 1, 2, 3, 4, 5, 6, time.UTC)
	for _, tc := range []struct {
		name, call string
		d          selfDomain
		status     int
		body       string // the whole answer
		got        string // what the domain was asked; "" for nothing
	}{
		{"alarm set", "alarms", selfDomain{alarm: &store.Alarm{ID: "al1", At: at}}, http.StatusCreated,
			`{"id":"al1","time":"2030-01-02T03:04:05.000000006Z"}` + "\n", "alarm w1 uid-1 b"},
		{"token minted", "token", selfDomain{token: &identity.Token{Token: "jwt", ExpiresAt: at.Truncate(time.Second)}}, http.StatusOK,
			`{"token":"jwt","expiresAt":"2030-01-02T03:04:05Z"}` + "\n", "token w1 uid-1 b"},
		{"suspend requested", "suspend", selfDomain{}, http.StatusAccepted, "suspend requested\n", "suspend w1 uid-1"},
		{"pause requested", "pause", selfDomain{}, http.StatusAccepted, "pause requested\n", "pause w1 uid-1"},
		{"unknown call", "explode", selfDomain{}, http.StatusNotFound,
			`unknown self-service call "explode": want alarms, token, suspend or pause` + "\n", ""},
		{"empty call", "", selfDomain{}, http.StatusNotFound,
			`unknown self-service call "": want alarms, token, suspend or pause` + "\n", ""},
		{"call in capitals", "SUSPEND", selfDomain{}, http.StatusNotFound,
			`unknown self-service call "SUSPEND": want alarms, token, suspend or pause` + "\n", ""},
		{"bad alarm", "alarms", selfDomain{err: fmt.Errorf("%w: path %q must start with '/'", alarm.ErrInvalid, "t")}, http.StatusBadRequest,
			`invalid alarm: path "t" must start with '/'` + "\n", "alarm w1 uid-1 b"},
		{"bad token request", "token", selfDomain{err: fmt.Errorf("audience: %w", identity.ErrInvalid)}, http.StatusBadRequest,
			"audience: invalid token request\n", "token w1 uid-1 b"},
		{"alarm, not hosted", "alarms", selfDomain{err: fmt.Errorf("set alarm: %w", nodeapi.ErrNotHosted)}, http.StatusConflict,
			"set alarm: the worker does not host this actor now\n", "alarm w1 uid-1 b"},
		{"token, not hosted", "token", selfDomain{err: nodeapi.ErrNotHosted}, http.StatusConflict,
			"the worker does not host this actor now\n", "token w1 uid-1 b"},
		{"pause, not hosted", "pause", selfDomain{err: fmt.Errorf("pause refused: %w", nodeapi.ErrNotHosted)}, http.StatusConflict,
			"pause refused: the worker does not host this actor now\n", "pause w1 uid-1"},
		{"alarm limit", "alarms", selfDomain{err: fmt.Errorf("at most 1: %w", store.ErrTooMany)}, http.StatusTooManyRequests,
			"at most 1: too many\n", "alarm w1 uid-1 b"},
		{"store unreachable", "suspend", selfDomain{err: fmt.Errorf("suspend not requested: %w; retry later", store.ErrUnavailable)},
			http.StatusServiceUnavailable, "suspend not requested: " + store.ErrUnavailable.Error() + "; retry later\n", "suspend w1 uid-1"},
		{"deadline", "alarms", selfDomain{err: fmt.Errorf("set alarm: %w", context.DeadlineExceeded)}, http.StatusServiceUnavailable,
			"set alarm: context deadline exceeded\n", "alarm w1 uid-1 b"},
		{"write raced", "alarms", selfDomain{err: fmt.Errorf("set alarm: %w", store.ErrConflict)}, http.StatusServiceUnavailable,
			"set alarm: " + store.ErrConflict.Error() + "\n", "alarm w1 uid-1 b"},
		{"lease lost", "suspend", selfDomain{err: fmt.Errorf("suspend not requested: %w; retry later", store.ErrFenced)}, http.StatusServiceUnavailable,
			"suspend not requested: " + store.ErrFenced.Error() + "; retry later\n", "suspend w1 uid-1"},
		{"no issuer", "token", selfDomain{err: identity.ErrNoIssuer}, http.StatusServiceUnavailable,
			identity.ErrNoIssuer.Error() + "\n", "token w1 uid-1 b"},
		{"surprise", "token", selfDomain{err: errors.New("sign token: surprise")}, http.StatusInternalServerError,
			"sign token: surprise\n", "token w1 uid-1 b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logged bytes.Buffer
			d := tc.d
			s := NewSelfService(&d, &d, &d, slog.New(slog.NewTextHandler(&logged, nil)))
			status, body := s.Answer(context.Background(), "w1", "uid-1", tc.call, []byte("b"))
			if status != tc.status || string(body) != tc.body {
				t.Fatalf("Answer = %d %q, want %d %q", status, body, tc.status, tc.body)
			}
			if d.got != tc.got {
				t.Fatalf("domain asked %q, want %q", d.got, tc.got)
			}
			if wantLog := status == http.StatusInternalServerError; (logged.Len() > 0) != wantLog {
				t.Fatalf("logged %q; want a line only for a 500", logged.String())
			}
		})
	}
}

// TestSelfServiceThroughTheDomain: the statuses actors get from the real
// alarm scheduler, identity issuer and lifecycle workflows over a record
// store, for the cases their own tests check by error.
func TestSelfServiceThroughTheDomain(t *testing.T) {
	ctx := context.Background()
	st, must := openBolt(t)
	must(st.CreateAtespace(ctx, &store.Atespace{Name: "default"}))
	must(st.CreateTemplate(ctx, &store.Template{Atespace: "default", Name: "tpl", UID: "tpl", Phase: store.TemplateReady, Spec: validSpec()}))
	must(st.CreateActor(ctx, &store.Actor{Atespace: "default", Name: "a", UID: "uid-a", Template: "tpl", Lifecycle: store.Lifecycle{State: store.Suspended}}))
	must(st.PutWorker(ctx, &store.Worker{Name: "w1", Node: "n1"}))
	// b runs on w2 beside a on w1: an actor that learnt the other's uid
	// must not act for it through its own worker.
	must(st.CreateActor(ctx, &store.Actor{Atespace: "default", Name: "b", UID: "uid-b", Template: "tpl", Lifecycle: store.Lifecycle{State: store.Suspended}}))
	must(st.PutWorker(ctx, &store.Worker{Name: "w2", Node: "n1"}))
	run := func(name, worker string) *store.Actor {
		act, err := st.GetActor(ctx, names.ActorKey{Atespace: "default", Name: name})
		must(err)
		act, _, err = st.ClaimWorker(ctx, act, "", worker)
		must(err)
		act.State = store.Running
		act, err = st.UpdateActor(ctx, act)
		must(err)
		if act.Worker != worker {
			t.Fatalf("actor %s claimed %s, want %s", name, act.Worker, worker)
		}
		return act
	}
	act, b := run("a", "w1"), run("b", "w2")

	iss := identity.New(st, "", identity.Config{})
	lc := lifecycle.New(st, nil, nil, "test", nil)
	t.Cleanup(lc.Close)
	s := NewSelfService(alarm.New(st, nil, alarm.Config{MaxPending: 1}, nil), iss, lc, nil)
	answer := func(worker, uid, call, body string) (int, string) {
		status, answer := s.Answer(ctx, worker, uid, call, []byte(body))
		return status, string(answer)
	}
	if status, body := answer("w1", "uid-a", "token", ""); status != http.StatusServiceUnavailable || !strings.Contains(body, "--issuer-url") {
		t.Fatalf("token without an issuer URL: %d %q, want 503 naming the flag", status, body)
	}
	iss.SetIssuerURL("https://ate.example")
	for _, tc := range []struct {
		name, worker, uid, call, body string
		status                        int
		want                          string
	}{
		{"alarm set", "w1", "uid-a", "alarms", `{"in": "10m", "path": "/tick"}`, http.StatusCreated, `"id":`},
		{"alarm limit", "w1", "uid-a", "alarms", `{"in": "10m", "path": "/tick"}`, http.StatusTooManyRequests, "at most 1"},
		{"bad alarm", "w1", "uid-a", "alarms", `{"in": "10m", "path": "tick"}`, http.StatusBadRequest, "must start with '/'"},
		{"alarm, stale uid", "w1", "uid-old", "alarms", `{"in": "10m", "path": "/tick"}`, http.StatusConflict, "no longer hosts"},
		{"alarm, unknown worker", "w9", "uid-a", "alarms", `{"in": "10m", "path": "/tick"}`, http.StatusConflict, "not registered"},
		{"token", "w1", "uid-a", "token", ``, http.StatusOK, `"token":"`},
		{"bad token request", "w1", "uid-a", "token", `{"aud": "x"}`, http.StatusBadRequest, "token request body"},
		{"token, stale uid", "w1", "uid-old", "token", ``, http.StatusConflict, "no longer hosts"},
		{"suspend, stale uid", "w1", "uid-old", "suspend", ``, http.StatusConflict, "suspend refused"},
		{"pause, unknown worker", "w9", "uid-a", "pause", ``, http.StatusConflict, "pause refused"},
		{"token for b through a's worker", "w1", "uid-b", "token", ``, http.StatusConflict, "no longer hosts"},
		{"alarm for b through a's worker", "w1", "uid-b", "alarms", `{"in": "10m", "path": "/tick"}`, http.StatusConflict, "no longer hosts"},
		{"suspend b through a's worker", "w1", "uid-b", "suspend", ``, http.StatusConflict, "suspend refused"},
		{"pause a through b's worker", "w2", "uid-a", "pause", ``, http.StatusConflict, "pause refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := answer(tc.worker, tc.uid, tc.call, tc.body)
			if status != tc.status || !strings.Contains(body, tc.want) {
				t.Fatalf("Answer = %d %q, want %d saying %q", status, body, tc.status, tc.want)
			}
			if status/100 == 2 && !json.Valid([]byte(body)) {
				t.Fatalf("answer %q is not JSON", body)
			}
		})
	}
	for _, a := range []*store.Actor{act, b} {
		if got, err := st.GetActor(ctx, a.Key()); err != nil || got.State != store.Running {
			t.Fatalf("actor %s after refused checkpoints: %v, %v; want RUNNING", a.Name, got, err)
		}
	}
	if alarms, err := st.ListAlarms(ctx, "default", "b"); err != nil || len(alarms) != 0 {
		t.Fatalf("alarms of b after a's calls: %v, %v; want none", alarms, err)
	}
}
