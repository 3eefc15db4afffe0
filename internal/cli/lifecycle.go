package cli

import (
	"context"

	"github.com/spf13/cobra"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/names"
)

func newPauseCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "pause KIND NAME",
		Short: "Checkpoint a running actor to its node's disk and free its worker",
	}
	kindGroup(cmd, &cobra.Command{
		Use:   "actor NAME | ATESPACE/NAME",
		Short: "Pause an actor; its next resume prefers the same node",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.actorAction(cmd, args[0], "paused", func(ctx context.Context, s *session, k names.ActorKey) (*atev1.Actor, error) {
				return call(ctx, s, s.client.PauseActor, &atev1.PauseActorRequest{Atespace: k.Atespace, Name: k.Name})
			})
		},
	})
	return cmd
}

func newRevertCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "revert KIND NAME",
		Short: "Return an actor to its last durable snapshot, discarding what happened since",
	}
	kindGroup(cmd, &cobra.Command{
		Use:   "actor NAME | ATESPACE/NAME",
		Short: "Revert a RUNNING, PAUSED or CRASHED actor to SUSPENDED at its last durable snapshot",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.actorAction(cmd, args[0], "reverted", func(ctx context.Context, s *session, k names.ActorKey) (*atev1.Actor, error) {
				return call(ctx, s, s.client.RevertActor, &atev1.RevertActorRequest{Atespace: k.Atespace, Name: k.Name})
			})
		},
	})
	return cmd
}
