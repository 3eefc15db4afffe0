package apiserver

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/alarm"
	"substrate.dev/ate/internal/store"
	"substrate.dev/ate/internal/store/bolt"
)

// TestAlarmRPCs: the alarm RPCs validate at the edge with the right
// codes and messages, and set, list and cancel through the scheduler.
func TestAlarmRPCs(t *testing.T) {
	ctx := context.Background()
	st, err := bolt.Open(filepath.Join(t.TempDir(), "ate.db"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(st.CreateAtespace(ctx, &store.Atespace{Name: "default"}))
	must(st.CreateTemplate(ctx, &store.Template{Atespace: "default", Name: "tpl", UID: "t", Spec: validSpec()}))
	must(st.CreateActor(ctx, &store.Actor{Atespace: "default", Name: "a", UID: "uid-a", Template: "tpl", Lifecycle: store.Lifecycle{State: store.Suspended}}))

	s := &Server{store: st}
	if _, err := s.SetAlarm(ctx, &atev1.SetAlarmRequest{Atespace: "default", Actor: "a", Path: "/t", DelayMs: 1000}); status.Code(err) != codes.Unimplemented {
		t.Fatalf("SetAlarm without a scheduler = %v, want Unimplemented", err)
	}
	s.SetAlarms(alarm.New(st, nil, alarm.Config{MaxPending: 2}, nil))

	now := time.Now()
	for _, tc := range []struct {
		name string
		req  *atev1.SetAlarmRequest
		code codes.Code
		want string
	}{
		{"delay", &atev1.SetAlarmRequest{Atespace: "default", Actor: "a", Path: "/t", DelayMs: 60_000}, codes.OK, ""},
		{"time", &atev1.SetAlarmRequest{Atespace: "default", Actor: "a", Path: "/t", Time: timestamppb.New(now.Add(time.Hour))}, codes.OK, ""},
		{"limit", &atev1.SetAlarmRequest{Atespace: "default", Actor: "a", Path: "/t", DelayMs: 60_000}, codes.ResourceExhausted, "at most 2"},
		{"both", &atev1.SetAlarmRequest{Atespace: "default", Actor: "a", Path: "/t", DelayMs: 1, Time: timestamppb.New(now)}, codes.InvalidArgument, "not both"},
		{"neither", &atev1.SetAlarmRequest{Atespace: "default", Actor: "a", Path: "/t"}, codes.InvalidArgument, "--at or --in"},
		{"negative", &atev1.SetAlarmRequest{Atespace: "default", Actor: "a", Path: "/t", DelayMs: -5}, codes.InvalidArgument, "negative"},
		{"too far", &atev1.SetAlarmRequest{Atespace: "default", Actor: "a", Path: "/t", DelayMs: alarm.MaxAhead.Milliseconds() + 1}, codes.InvalidArgument, "more than a year"},
		{"past", &atev1.SetAlarmRequest{Atespace: "default", Actor: "a", Path: "/t", Time: timestamppb.New(now.Add(-time.Hour))}, codes.InvalidArgument, "in the past"},
		{"bad path", &atev1.SetAlarmRequest{Atespace: "default", Actor: "a", Path: "t", DelayMs: 1000}, codes.InvalidArgument, "start with '/'"},
		{"long path", &atev1.SetAlarmRequest{Atespace: "default", Actor: "a", Path: "/" + strings.Repeat("x", 1024), DelayMs: 1000}, codes.InvalidArgument, "at most 1024"},
		{"bad name", &atev1.SetAlarmRequest{Atespace: "default", Actor: "A!", Path: "/t", DelayMs: 1000}, codes.InvalidArgument, ""},
		{"no actor", &atev1.SetAlarmRequest{Atespace: "default", Actor: "b", Path: "/t", DelayMs: 1000}, codes.NotFound, "default/b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := s.SetAlarm(ctx, tc.req)
			if status.Code(err) != tc.code || (tc.want != "" && !strings.Contains(fmt.Sprint(err), tc.want)) {
				t.Fatalf("SetAlarm = %v, want %s saying %q", err, tc.code, tc.want)
			}
			if tc.code == codes.OK && (got.GetId() == "" || got.GetState() != atev1.Alarm_PENDING || got.GetPath() != "/t" || got.GetActor() != "a") {
				t.Fatalf("SetAlarm answered %v", got)
			}
		})
	}
	list, err := s.ListAlarms(ctx, &atev1.ListAlarmsRequest{Atespace: "default", Actor: "a"})
	must(err)
	if len(list.GetAlarms()) != 2 || !list.GetAlarms()[0].GetTime().AsTime().Before(list.GetAlarms()[1].GetTime().AsTime()) {
		t.Fatalf("ListAlarms = %v, want the two alarms soonest first", list)
	}
	if _, err := s.ListAlarms(ctx, &atev1.ListAlarmsRequest{Actor: "a"}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("ListAlarms of an actor without atespace = %v, want InvalidArgument", err)
	}
	id := list.GetAlarms()[0].GetId()
	if _, err := s.CancelAlarm(ctx, &atev1.CancelAlarmRequest{Id: id}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CancelAlarm(ctx, &atev1.CancelAlarmRequest{Id: id}); status.Code(err) != codes.NotFound {
		t.Fatalf("second CancelAlarm = %v, want NotFound", err)
	}
	if _, err := s.CancelAlarm(ctx, &atev1.CancelAlarmRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("CancelAlarm without id = %v, want InvalidArgument", err)
	}
}
