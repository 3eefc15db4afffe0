package apiserver

import (
	"context"
	"slices"
	"strings"

	"google.golang.org/protobuf/types/known/timestamppb"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/auth"
	"substrate.dev/ate/internal/lifecycle"
	"substrate.dev/ate/internal/names"
	"substrate.dev/ate/internal/store"
)

func atespaceToProto(a *store.Atespace) *atev1.Atespace {
	return &atev1.Atespace{Name: a.Name, Uid: a.UID, CreateTime: timestamppb.New(a.CreateTime)}
}

func templateToProto(t *store.Template) *atev1.ActorTemplate {
	return &atev1.ActorTemplate{
		Atespace: t.Atespace, Name: t.Name, Uid: t.UID, Spec: t.Spec, Status: templateStatusToProto(t),
		CreateTime: timestamppb.New(t.CreateTime),
	}
}

// templateStatusToProto is t's status: its phase as the enum and, for
// clients older than it, as the deprecated phase_name (the store's
// phases are the enum's names); its build phases, and for clients older
// than those, the message that joins their text.
func templateStatusToProto(t *store.Template) *atev1.ActorTemplateStatus {
	st := &atev1.ActorTemplateStatus{Message: t.Message, GoldenSnapshot: t.GoldenSnapshot, ImageDigest: t.ImageDigest,
		BuildPhases: slices.Clone(t.BuildPhases)}
	st.FillPhase(atev1.ActorTemplateStatus_Phase(atev1.ActorTemplateStatus_Phase_value[string(t.Phase)]))
	return st
}

// actorToProto is a as ctx's caller may see it: the actor an eviction
// of a made room for is named only to a caller who may read that
// actor's atespace (auth.MayRead) — no tenant learns another's actors'
// names — in EvictedFor and in a message a version that did not know
// this wrote.
func actorToProto(ctx context.Context, a *store.Actor) *atev1.Actor {
	out := &atev1.Actor{
		Atespace: a.Atespace, Name: a.Name, Uid: a.UID, Template: a.Template,
		State:  atev1.ActorState(atev1.ActorState_value[string(a.State)]),
		Worker: a.Worker, Snapshot: a.Snapshot, WorkerSelector: a.WorkerSelector,
		Message: a.Message, Version: a.Version, Resumes: a.Resumes,
		Node: a.Node, PausedSnapshot: a.PausedSnapshot,
		Reason:      atev1.CheckpointReason(atev1.CheckpointReason_value[string(a.Reason)]),
		EvictedFor:  keyToProto(a.EvictedFor),
		VolumesOnly: a.VolumesOnly, Labels: a.Labels,
		CreateTime: timestamppb.New(a.CreateTime), StateTime: timestamppb.New(a.StateTime),
	}
	if a.State == store.Running {
		out.Assignment = a.Assignment
	}
	if !a.EvictedFor.IsZero() && !auth.MayRead(ctx, a.EvictedFor.Atespace) {
		out.EvictedFor, out.Message = "", withoutName(a.Message, a.EvictedFor)
	}
	if !a.LastActivity.IsZero() {
		out.LastActivity = timestamppb.New(a.LastActivity)
	}
	return out
}

// workerToProto is w with its phase as the enum and, for clients older
// than it, as the deprecated phase_name.
func workerToProto(w *store.Worker) *atev1.Worker {
	out := &atev1.Worker{Name: w.Name, Node: w.Node, Actor: keyToProto(w.Actor),
		TunnelAddress: w.TunnelAddr, Labels: w.Labels, SandboxClass: w.SandboxClass}
	if w.Free() {
		out.FillPhase(atev1.Worker_FREE)
	} else {
		out.FillPhase(atev1.Worker_CLAIMED)
	}
	return out
}

// keyToProto is an actor reference's wire form: "<atespace>/<name>", or
// empty for none.
func keyToProto(k names.ActorKey) string {
	if k.IsZero() {
		return ""
	}
	return k.String()
}

// withoutName is msg with every mention of k replaced by what a caller
// who may not read k's atespace is told instead.
func withoutName(msg string, k names.ActorKey) string {
	return strings.ReplaceAll(msg, k.String(), lifecycle.AnotherAtespaceActor)
}
