package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/names"
)

func newDeleteCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "delete KIND NAME",
		Short: "Delete an actor, actor template, atespace, alarm, tag or ingress token",
		Long: `Delete an actor, actor template or atespace.

Only a SUSPENDED or CRASHED actor can be deleted (suspend it first, or
pass --force to stop it and delete it from any state); a template only
while no actor or tag uses it; an atespace only when it is empty (no
actors, templates or tags). Deleting a tag leaves the actors forked from
it as they are: each has its own copy.`,
		Example: `  ate suspend actor counter-1 && ate delete actor counter-1
  ate delete template counter
  ate delete atespace team
  ate delete alarm ID
  ate delete tag at-five`,
	}
	var force bool
	actor := &cobra.Command{
		Use: "actor NAME | ATESPACE/NAME", Short: "Delete a suspended actor and its snapshots",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return a.deleteActor(cmd, args[0], force) },
	}
	actor.Flags().BoolVar(&force, "force", false, "delete from any state, stopping the actor's sandbox first")
	kindGroup(cmd,
		actor,
		&cobra.Command{
			Use: "template NAME", Short: "Delete an actor template no actor uses",
			Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error { return a.deleteTemplate(cmd, args[0]) },
		},
		&cobra.Command{
			Use: "atespace NAME", Short: "Delete an empty atespace",
			Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error { return a.deleteAtespace(cmd, args[0]) },
		},
		&cobra.Command{
			Use: "alarm ID", Short: "Cancel an alarm (ate get alarms lists their ids)",
			Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error { return a.deleteAlarm(cmd, args[0]) },
		},
		&cobra.Command{
			Use: "tag NAME | ATESPACE/NAME", Short: "Delete a tag and its snapshot (forks of it keep theirs)",
			Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error { return a.deleteTag(cmd, args[0]) },
		},
		&cobra.Command{
			Use: "ingresstoken NAME | ATESPACE/NAME", Short: "Revoke an ingress token (routers stop accepting it within their cache TTL)",
			Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error { return a.deleteIngressToken(cmd, args[0]) },
		},
		&cobra.Command{
			Use: "rolebinding NAME", Short: "Delete a role binding (admin only)",
			Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error { return a.deleteRoleBinding(cmd, args[0]) },
		},
	)
	return cmd
}

func (a *app) deleteActor(cmd *cobra.Command, arg string, force bool) error {
	key, err := a.actorKey(arg)
	if err != nil {
		return err
	}
	s, err := a.connect(cmd.Context())
	if err != nil {
		return err
	}
	defer s.close()
	if _, err := call(cmd.Context(), s, s.client.DeleteActor, &atev1.DeleteActorRequest{Atespace: key.Atespace, Name: key.Name, Force: force}); err != nil {
		return err
	}
	_, err = fmt.Fprintf(cmd.OutOrStdout(), "actor %s deleted\n", key)
	return err
}

func (a *app) deleteTemplate(cmd *cobra.Command, arg string) error {
	atespace, name, err := a.templateKey(arg)
	if err != nil {
		return err
	}
	s, err := a.connect(cmd.Context())
	if err != nil {
		return err
	}
	defer s.close()
	if _, err := call(cmd.Context(), s, s.client.DeleteActorTemplate, &atev1.DeleteActorTemplateRequest{Atespace: atespace, Name: name}); err != nil {
		return err
	}
	_, err = fmt.Fprintf(cmd.OutOrStdout(), "template %s/%s deleted\n", atespace, name)
	return err
}

func (a *app) deleteAtespace(cmd *cobra.Command, name string) error {
	if err := names.ValidateLabel("atespace", name); err != nil {
		return err
	}
	s, err := a.connect(cmd.Context())
	if err != nil {
		return err
	}
	defer s.close()
	if _, err := call(cmd.Context(), s, s.client.DeleteAtespace, &atev1.DeleteAtespaceRequest{Name: name}); err != nil {
		return err
	}
	_, err = fmt.Fprintf(cmd.OutOrStdout(), "atespace %s deleted\n", name)
	return err
}
