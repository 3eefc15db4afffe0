package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"substrate.dev/ate/internal/nodeapi"
	"substrate.dev/ate/internal/store"
	"substrate.dev/ate/internal/testwait"
)

// events waits until the store holds want events of actor a and returns
// them.
func (e *env) events(t *testing.T, want int) []*store.Event {
	t.Helper()
	var es []*store.Event
	testwait.Until(t, fmt.Sprintf("%d events", want), func() bool {
		var err error
		es, err = e.st.ListEvents(context.Background(), store.EventFilter{Atespace: "default", Actor: "a"})
		must(t, err)
		return len(es) >= want
	})
	return es
}

func steps(es []*store.Event) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = string(e.From) + ">" + string(e.To)
	}
	return out
}

// TestEventsOfWorkflows: each workflow's state changes become events in
// order, failures as Warnings with their message, including a crash on a
// lost node; LogRun of a start is the claimed record's version.
func TestEventsOfWorkflows(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	e.resume(t)
	if run, v := e.node.last.LogRun, e.get(t).Version; run == 0 || run >= v {
		t.Fatalf("LogRun %d, want the claim's version (before RUNNING's %d)", run, v)
	}
	if _, err := e.m.Suspend(ctx, key("a")); err != nil {
		t.Fatal(err)
	}
	e.node.onStart = func(nodeapi.StartRequest) error { return errors.New("injected restore failure") }
	if _, err := e.m.Resume(ctx, key("a")); !errors.Is(err, ErrResumeFailed) {
		t.Fatalf("Resume = %v, want ErrResumeFailed", err)
	}
	e.node.onStart = nil
	e.resume(t)
	w, err := e.st.GetWorker(ctx, e.get(t).Worker)
	must(t, err)
	must(t, e.m.WorkersLost(ctx, []*store.Worker{w}, "node n1 lost: no heartbeat for 15s"))
	must(t, e.m.Delete(ctx, key("a"), false))

	es := e.events(t, 10)
	want := []string{"SUSPENDED>RESUMING", "RESUMING>RUNNING", "RUNNING>SUSPENDING", "SUSPENDING>SUSPENDED",
		"SUSPENDED>RESUMING", "RESUMING>SUSPENDED", "SUSPENDED>RESUMING", "RESUMING>RUNNING", "RUNNING>CRASHED", "CRASHED>DELETED"}
	if got := steps(es); !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	for i, ev := range es {
		wantType := store.EventNormal
		if i == 5 || i == 8 {
			wantType = store.EventWarning
		}
		if ev.Type != wantType || ev.ActorUID != "a-uid" {
			t.Errorf("event %d (%s) type %s uid %s, want %s a-uid", i, steps(es)[i], ev.Type, ev.ActorUID, wantType)
		}
		if i < 9 && (ev.Record == nil || ev.Record.State != ev.To) {
			t.Errorf("event %d record %+v, want the actor in %s", i, ev.Record, ev.To)
		}
	}
	if !strings.Contains(es[5].Message, "injected restore failure") || es[5].Worker == "" || es[5].Node != "n1" {
		t.Errorf("failed restore event %+v, want its message, worker and node", es[5])
	}
	if !strings.Contains(es[8].Message, "no heartbeat") {
		t.Errorf("lost node event message %q, want the node-loss reason", es[8].Message)
	}
	// The record's message outlives the write that set it: the resumes
	// after the suspend and after the failed restore must not repeat it.
	for _, i := range []int{4, 6} {
		if es[i].Message != "" && es[i].Message == es[i-1].Message {
			t.Errorf("event %d (%s) repeats the previous event's message %q", i, steps(es)[i], es[i].Message)
		}
	}
}

func TestEventType(t *testing.T) {
	for _, tc := range []struct {
		from, to store.ActorState
		want     store.EventType
	}{
		{store.Suspended, store.Resuming, store.EventNormal},
		{store.Resuming, store.Running, store.EventNormal},
		{store.Resuming, store.Suspended, store.EventWarning},
		{store.Resuming, store.Crashed, store.EventWarning},
		{store.Running, store.Crashed, store.EventWarning},
		{store.Suspending, store.Suspended, store.EventNormal},
		{store.Suspending, store.Running, store.EventWarning},
		{store.Pausing, store.Paused, store.EventNormal},
		{store.Suspended, store.Deleted, store.EventNormal},
	} {
		t.Run(string(tc.from)+">"+string(tc.to), func(t *testing.T) {
			if got := eventType(tc.from, tc.to); got != tc.want {
				t.Fatalf("eventType = %s, want %s", got, tc.want)
			}
		})
	}
}
