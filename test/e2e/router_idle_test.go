package e2e

import (
	"net/http"
	"strings"
	"testing"
	"time"

	atev1 "substrate.dev/ate/api/ate/v1"
)

// TestRouterIdle: a template's idle policy (2 s here) pauses or suspends
// an actor the router has seen no traffic for, and not before; an open
// stream counts as traffic however long it runs. The actor's last
// activity is recorded and shown by `ate get actor`; the next request
// resumes the actor with its memory.
func TestRouterIdle(t *testing.T) {
	const after = 2 * time.Second
	in := startUp(t, 2)
	in.counterTemplate("idle-pause", nil, "idle: {after: 2s, action: pause}\n")
	in.counterTemplate("idle-suspend", nil, "idle: {after: 2s, action: suspend}\n")

	tests := []struct {
		template string
		want     atev1.ActorState
	}{
		{"idle-pause", atev1.ActorState_PAUSED},
		{"idle-suspend", atev1.ActorState_SUSPENDED},
	}
	for _, tt := range tests {
		t.Run(tt.template, func(t *testing.T) {
			actor := tt.template + "-1"
			in.ate("create", "actor", actor, "--template", tt.template)
			in.mustCount("default/"+actor, 1)
			last := time.Now()
			waitFor(t, "the idle actor to be put away", 20*time.Second, func() bool {
				s := in.state(actor)
				if s == atev1.ActorState_RUNNING {
					return false
				}
				if time.Since(last) < after {
					t.Fatalf("actor %s after %s without traffic, want RUNNING until %s", s, time.Since(last), after)
				}
				return s == tt.want
			})
			a := in.actor(actor)
			if la := a.GetLastActivity(); la == nil || la.AsTime().Before(last.Add(-5*time.Second)) || la.AsTime().After(last.Add(time.Second)) {
				t.Errorf("last activity %v, want about %s", la, last.Format(time.StampMilli))
			}
			if out := in.ate("get", "actor", actor); !strings.Contains(out, "LAST ACTIVITY") || !strings.Contains(out, " ago ") {
				t.Errorf("ate get actor does not show the last activity:\n%s", out)
			}
			in.mustCount("default/"+actor, 2) // resumed, memory intact
		})
	}

	t.Run("open stream is activity", func(t *testing.T) {
		in.ate("create", "actor", "streamer", "--template", "idle-suspend")
		in.mustCount("default/streamer", 1)
		// Six events 1 s apart: the stream lasts 5 s, 2.5× idle.after.
		resp, err := httpClient.Do(in.newRequest(t.Context(), http.MethodGet, "default/streamer", "/sse?n=6&gap=1000", nil))
		if err != nil {
			t.Fatal(err)
		}
		data, _, err := readEvents(resp.Body)
		resp.Body.Close()
		if err != nil || len(data) != 6 {
			t.Fatalf("stream: %v %v, want 6 events", data, err)
		}
		ended := time.Now()
		in.wantState("streamer", atev1.ActorState_RUNNING) // right after a 5 s stream
		waitFor(t, "the actor to be suspended once idle", 20*time.Second, func() bool {
			return in.state("streamer") == atev1.ActorState_SUSPENDED
		})
		if idle := time.Since(ended); idle < after {
			t.Errorf("suspended %s after the stream ended, want at least %s", idle, after)
		}
	})
}

// TestRouterIdleWithoutAction: a template with idle.after and no action,
// created through `ate create template`, is accepted, and the router
// suspends its idle actor (checkpoint.ParseAction: no action means
// suspend) once it has had no traffic for idle.after.
func TestRouterIdleWithoutAction(t *testing.T) {
	const after = 2 * time.Second
	in := startUp(t, 1)
	in.counterTemplate("idle-default", nil, "idle: {after: 2s}\n")
	in.ate("create", "actor", "idle-default-1", "--template", "idle-default")
	// Taken before the request: the router's idle clock starts when the
	// request ends, a little later, so the bound below never fails a
	// suspend that came on time.
	last := time.Now()
	in.mustCount("default/idle-default-1", 1)
	waitFor(t, "the idle actor to be suspended", 20*time.Second, func() bool {
		s := in.state("idle-default-1")
		if s != atev1.ActorState_RUNNING && time.Since(last) < after {
			t.Fatalf("actor %s after %s without traffic, want RUNNING until %s", s, time.Since(last), after)
		}
		return s == atev1.ActorState_SUSPENDED
	})
	if a := in.actor("idle-default-1"); a.GetReason() != atev1.CheckpointReason_IDLE {
		t.Errorf("suspended for %s, want IDLE", a.GetReason())
	}
	in.mustCount("default/idle-default-1", 2) // resumed, memory intact
}
