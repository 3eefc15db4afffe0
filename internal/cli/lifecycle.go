package cli

import (
	"context"

	"github.com/spf13/cobra"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/checkpoint"
	"substrate.dev/ate/internal/names"
)

// actorVerb is one state-changing verb on an actor: `ate VERB actor NAME`.
type actorVerb struct {
	verb, short, actorShort, past string
	rpc                           func(context.Context, *session, names.ActorKey) (*atev1.Actor, error)
}

// actorVerbs are the lifecycle verbs, in help order.
var actorVerbs = []actorVerb{
	{checkpoint.Suspend.String(), "Checkpoint a running actor to the snapshot store and free its worker",
		"Suspend an actor (a suspended actor stays suspended)", "suspended",
		func(ctx context.Context, s *session, k names.ActorKey) (*atev1.Actor, error) {
			return call(ctx, s, s.client.SuspendActor, &atev1.SuspendActorRequest{Atespace: k.Atespace, Name: k.Name})
		}},
	{"resume", "Restore an actor on a free worker",
		"Resume an actor, waiting up to --timeout for a free worker", "resumed",
		func(ctx context.Context, s *session, k names.ActorKey) (*atev1.Actor, error) {
			return call(ctx, s, s.client.ResumeActor, &atev1.ResumeActorRequest{Atespace: k.Atespace, Name: k.Name})
		}},
	{checkpoint.Pause.String(), "Checkpoint a running actor to its node's disk and free its worker",
		"Pause an actor; its next resume prefers the same node", "paused",
		func(ctx context.Context, s *session, k names.ActorKey) (*atev1.Actor, error) {
			return call(ctx, s, s.client.PauseActor, &atev1.PauseActorRequest{Atespace: k.Atespace, Name: k.Name})
		}},
	{"revert", "Return an actor to its last durable snapshot, discarding what happened since",
		"Revert a RUNNING, PAUSED or CRASHED actor to SUSPENDED at its last durable snapshot", "reverted",
		func(ctx context.Context, s *session, k names.ActorKey) (*atev1.Actor, error) {
			return call(ctx, s, s.client.RevertActor, &atev1.RevertActorRequest{Atespace: k.Atespace, Name: k.Name})
		}},
}

// newActorVerbCommands returns one command per lifecycle verb.
func newActorVerbCommands(a *app) []*cobra.Command {
	var out []*cobra.Command
	for _, v := range actorVerbs {
		cmd := &cobra.Command{Use: v.verb + " KIND NAME", Short: v.short}
		kindGroup(cmd, &cobra.Command{
			Use:   "actor NAME | ATESPACE/NAME",
			Short: v.actorShort,
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				return a.actorAction(cmd, args[0], v.past, v.rpc)
			},
		})
		out = append(out, cmd)
	}
	return out
}
