package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	atev1 "substrate.dev/ate/api/ate/v1"
)

// alarmDelivery is one entry of the counter's GET /alarms-received.
type alarmDelivery struct {
	Path, ID, Time, Attempt string
}

// alarmsReceived reads what the counter actor recorded of alarm
// deliveries (it resumes the actor if needed).
func (in *installation) alarmsReceived(actor string) []alarmDelivery {
	in.t.Helper()
	code, body := in.get(actor, "/alarms-received")
	if code != http.StatusOK {
		in.t.Fatalf("GET %s /alarms-received = %d %q", actor, code, body)
	}
	var out []alarmDelivery
	if err := json.Unmarshal([]byte(body), &out); err != nil {
		in.t.Fatalf("alarms-received %q: %v", body, err)
	}
	return out
}

// alarmGone reports whether alarm id is no longer listed: delivered (or
// cancelled).
func (in *installation) alarmGone(id string) bool {
	in.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := in.client.ListAlarms(ctx, &atev1.ListAlarmsRequest{Atespace: "default"})
	if err != nil {
		in.t.Fatalf("ListAlarms: %v", err)
	}
	for _, a := range resp.GetAlarms() {
		if a.GetId() == id {
			if a.GetState() == atev1.Alarm_FAILED {
				in.t.Fatalf("alarm %s FAILED: %s", id, a.GetMessage())
			}
			return false
		}
	}
	return true
}

// TestAlarmWakesSuspendedActor: an actor sets an alarm for 3 s ahead from
// inside its sandbox and is suspended; once the alarm is due it is
// RUNNING again and has received exactly one POST to its path, with the
// alarm's id and time, on the first attempt.
func TestAlarmWakesSuspendedActor(t *testing.T) {
	in := startUp(t, 2, "--demo")
	in.mustCount("default/counter-1", 1)
	setAt := time.Now()
	code, body := in.do(http.MethodPost, "default/counter-1", "/set-alarm", `{"in": "3s", "path": "/alarm/tick?n=1"}`)
	if code != http.StatusCreated {
		t.Fatalf("self-service alarm = %d %q, want 201", code, body)
	}
	var set struct{ ID, Time string }
	if err := json.Unmarshal([]byte(body), &set); err != nil || set.ID == "" {
		t.Fatalf("self-service alarm answer %q: %v", body, err)
	}
	// An invalid request is refused with the reason.
	if code, body := in.do(http.MethodPost, "default/counter-1", "/set-alarm", `{"in": "3s", "path": "tick"}`); code != http.StatusBadRequest {
		t.Fatalf("alarm with a relative path = %d %q, want 400", code, body)
	}
	in.ate("suspend", "actor", "counter-1")
	in.wantState("counter-1", atev1.ActorState_SUSPENDED)
	if in.alarmGone(set.ID) {
		t.Fatalf("alarm %s not listed before it is due", set.ID)
	}

	waitFor(t, "the alarm to wake the actor", 30*time.Second, func() bool {
		return in.state("counter-1") == atev1.ActorState_RUNNING
	})
	if waited := time.Since(setAt); waited < 3*time.Second {
		t.Fatalf("actor RUNNING %s after the alarm was set for 3 s ahead", waited)
	}
	waitFor(t, "the alarm to be delivered", 30*time.Second, func() bool { return in.alarmGone(set.ID) })
	got := in.alarmsReceived("default/counter-1")
	if len(got) != 1 || got[0].Path != "/alarm/tick?n=1" || got[0].ID != set.ID || got[0].Time != set.Time || got[0].Attempt != "1" {
		t.Fatalf("deliveries %+v, want one POST /alarm/tick?n=1 with id %s time %s attempt 1", got, set.ID, set.Time)
	}
	// The delivery resumed it, with its memory (count=1 before the suspend).
	in.mustCount("default/counter-1", 2)
}

// TestAlarmSurvivesKill: an alarm set with the CLI before `ate up` is
// SIGKILLed fires after the restart: the actor, CRASHED by the kill, is
// resumed from its last snapshot and receives it.
func TestAlarmSurvivesKill(t *testing.T) {
	dataDir := t.TempDir()
	in := startUpIn(t, dataDir, 2, "--demo")
	in.mustCount("default/counter-1", 1)
	out := in.ate("alarm", "actor", "counter-1", "--in", "6s", "--path", "/alarm/after-restart", "-o", "json")
	var set struct{ ID string }
	if err := json.Unmarshal([]byte(out), &set); err != nil || set.ID == "" {
		t.Fatalf("ate alarm -o json = %q: %v", out, err)
	}
	if list := in.ate("get", "alarms", "--actor", "counter-1"); !strings.Contains(list, set.ID) {
		t.Fatalf("ate get alarms does not list %s:\n%s", set.ID, list)
	}
	in.kill()

	in2 := startUpIn(t, dataDir, 2)
	waitFor(t, "the alarm to be delivered after the restart", 60*time.Second, func() bool { return in2.alarmGone(set.ID) })
	in2.wantState("counter-1", atev1.ActorState_RUNNING)
	got := in2.alarmsReceived("default/counter-1")
	if len(got) != 1 || got[0].Path != "/alarm/after-restart" || got[0].ID != set.ID {
		t.Fatalf("deliveries after the restart %+v, want one POST /alarm/after-restart with id %s", got, set.ID)
	}

	// Deleting an actor deletes its alarms.
	in2.ate("alarm", "actor", "counter-1", "--in", "1h", "--path", "/never")
	in2.ate("delete", "actor", "counter-1", "--force")
	if list, err := in2.ateErr("get", "alarms"); err != nil || strings.Contains(list, "/never") {
		t.Fatalf("alarms after deleting their actor (%v):\n%s", err, list)
	}
}

// TestClusterAlarmFromActor: with the node apart from the API server, an
// actor's self-service alarm request is forwarded to the API server
// (NodeRegistry.SetSelfAlarm) and the alarm wakes the suspended actor.
func TestClusterAlarmFromActor(t *testing.T) {
	c := startCluster(t, "node-a")
	c.counterActor()
	code, body := c.in.do(http.MethodPost, "default/counter-1", "/set-alarm", `{"in": "2s", "path": "/alarm/cluster"}`)
	if code != http.StatusCreated {
		t.Fatalf("self-service alarm on a separate node = %d %q, want 201", code, body)
	}
	var set struct{ ID string }
	if err := json.Unmarshal([]byte(body), &set); err != nil || set.ID == "" {
		t.Fatalf("self-service alarm answer %q: %v", body, err)
	}
	c.in.ate("suspend", "actor", "counter-1")
	waitFor(t, "the alarm to be delivered", 60*time.Second, func() bool { return c.in.alarmGone(set.ID) })
	c.in.wantState("counter-1", atev1.ActorState_RUNNING)
	got := c.in.alarmsReceived("default/counter-1")
	if len(got) != 1 || got[0].Path != "/alarm/cluster" || got[0].ID != set.ID {
		t.Fatalf("deliveries %+v, want one POST /alarm/cluster with id %s", got, set.ID)
	}
}

// TestAlarmWokenActorGoesIdle: an actor an alarm woke, with no request
// through a router, is put away by its template's idle policy (idle.after
// 2 s) after the delivery, as a router would have for traffic it saw.
func TestAlarmWokenActorGoesIdle(t *testing.T) {
	in := startUp(t, 2)
	in.counterTemplate("idle-alarm", nil, "idle: {after: 2s, action: suspend}\n")
	in.ate("create", "actor", "sleepy", "--template", "idle-alarm")
	out := in.ate("alarm", "actor", "sleepy", "--in", "1s", "--path", "/alarm/wake", "-o", "json")
	var set struct{ ID string }
	if err := json.Unmarshal([]byte(out), &set); err != nil || set.ID == "" {
		t.Fatalf("ate alarm -o json = %q: %v", out, err)
	}
	waitFor(t, "the alarm to be delivered", 30*time.Second, func() bool { return in.alarmGone(set.ID) })
	delivered := time.Now()
	waitFor(t, "the actor an alarm woke to be put away when idle", 30*time.Second, func() bool {
		return in.state("sleepy") == atev1.ActorState_SUSPENDED
	})
	if a := in.actor("sleepy"); a.GetResumes() != 1 || a.GetReason() != atev1.CheckpointReason_IDLE {
		t.Fatalf("actor after the idle put-away: resumes %d, reason %s (%s); want 1 resume, IDLE", a.GetResumes(), a.GetReason(), a.GetMessage())
	}
	if d := time.Since(delivered); d < time.Second {
		t.Fatalf("put away %s after the delivery, before idle.after (2 s) could have passed", d)
	}
}

// TestHAAlarmDeliveredOnce: two API server replicas over one PostgreSQL
// both know each alarm when it is due (it is set 17 s ahead, past their
// 15 s refresh) and race to deliver it; the alarm lease lets one deliver,
// so each actor receives exactly one POST, and the replicas together log
// exactly one delivery per alarm.
func TestHAAlarmDeliveredOnce(t *testing.T) {
	h := startHA(t, 2)
	h.in.createTemplate("examples/counter/template.yaml", "counter")
	ids := map[string]string{}
	for i, name := range []string{"ha-a", "ha-b"} {
		h.in.ate("create", "actor", name, "--template", "counter")
		h.in.mustCount("default/"+name, 1)
		// One set through each replica.
		al, err := h.replica[i].SetAlarm(context.Background(), &atev1.SetAlarmRequest{Atespace: "default", Actor: name, Path: "/alarm/ha", DelayMs: 17_000})
		if err != nil {
			t.Fatalf("SetAlarm on replica %d: %v", i, err)
		}
		ids[name] = al.GetId()
		h.in.ate("suspend", "actor", name)
	}
	for name, id := range ids {
		waitFor(t, "alarm of "+name+" delivered", 60*time.Second, func() bool { return h.in.alarmGone(id) })
	}
	for name, id := range ids {
		got := h.in.alarmsReceived("default/" + name)
		if len(got) != 1 || got[0].ID != id {
			t.Fatalf("%s received %+v, want exactly one delivery of %s", name, got, id)
		}
	}
	if n := h.apis[0].records("alarm delivered") + h.apis[1].records("alarm delivered"); n != len(ids) {
		t.Fatalf("replicas logged %d deliveries, want %d", n, len(ids))
	}
}
