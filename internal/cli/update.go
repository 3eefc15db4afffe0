package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/names"
)

// templateMoveHelp is what `ate update actor --template` does, shared by
// both update commands' help.
const templateMoveHelp = `Templates are immutable; a new version of one is a new template. Moving an
actor to it keeps the actor's durable data and drops its memory: the next
resume starts from the new template's golden snapshot (or cold-boots) with
the actor's volumes. The new template must be in the same atespace, with the
same sandbox class and identical volumes and volume mounts. The actor must be
SUSPENDED or CRASHED (suspend a RUNNING or PAUSED one first); anything else
is refused with FAILED_PRECONDITION saying why.`

func newUpdateCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "update KIND",
		Short: "Move actors to another template",
		Example: `  ate update actor notes-1 --template notes-v2
  ate update actors --from-template notes-v1 --template notes-v2`,
	}
	var to, from string
	one := &cobra.Command{
		Use:   "actor NAME | ATESPACE/NAME --template NEW",
		Short: "Move a suspended actor to another template, keeping its volumes",
		Long:  "Move a SUSPENDED or CRASHED actor to template NEW.\n\n" + templateMoveHelp,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.moveActor(cmd, args[0], to)
		},
	}
	one.Flags().StringVar(&to, "template", "", "the template to move the actor to (required)")
	_ = one.MarkFlagRequired("template")
	many := &cobra.Command{
		Use:   "actors --from-template OLD --template NEW",
		Short: "Move every suspended actor of template OLD to NEW (a rollout)",
		Long: "Move every SUSPENDED or CRASHED actor of template OLD in the atespace to NEW,\n" +
			"one at a time, and list those skipped (RUNNING, PAUSED, refused) and why;\n" +
			"run it again once they are suspended. It exits non-zero only when it\n" +
			"cannot list the actors.\n\n" + templateMoveHelp,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.moveActors(cmd, from, to)
		},
	}
	many.Flags().StringVar(&to, "template", "", "the template to move the actors to (required)")
	many.Flags().StringVar(&from, "from-template", "", "move the actors of this template (required)")
	_ = many.MarkFlagRequired("template")
	_ = many.MarkFlagRequired("from-template")
	kindGroup(cmd, one, many)
	return cmd
}

func (a *app) moveActor(cmd *cobra.Command, arg, to string) error {
	key, err := a.actorKey(arg)
	if err != nil {
		return err
	}
	s, err := a.connect(cmd.Context())
	if err != nil {
		return err
	}
	defer s.close()
	actor, err := call(cmd.Context(), s, s.client.UpdateActor, &atev1.UpdateActorRequest{Atespace: key.Atespace, Name: key.Name, Template: to})
	if err != nil {
		return err
	}
	msg := fmt.Sprintf("actor %s moved to template %s (%s); its next resume starts from %s with its volumes", key, to, actor.GetState(), to)
	return printResult(cmd.OutOrStdout(), a.output, actor, actorTable(a.now()), msg)
}

func (a *app) moveActors(cmd *cobra.Command, from, to string) error {
	atespace, err := a.atespaceName()
	if err != nil {
		return err
	}
	s, err := a.connect(cmd.Context())
	if err != nil {
		return err
	}
	defer s.close()
	actors, err := listActors(cmd.Context(), s, &atev1.ListActorsRequest{Atespace: atespace})
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	moved, skipped := 0, 0
	for _, actor := range actors {
		if actor.GetTemplate() != from {
			continue
		}
		key := names.ActorKey{Atespace: actor.GetAtespace(), Name: actor.GetName()}
		_, err := call(cmd.Context(), s, s.client.UpdateActor, &atev1.UpdateActorRequest{Atespace: key.Atespace, Name: key.Name, Template: to})
		if err != nil {
			skipped++
			fmt.Fprintf(out, "skipped %s: %v\n", key, err)
			continue
		}
		moved++
		fmt.Fprintf(out, "moved %s to %s\n", key, to)
	}
	fmt.Fprintf(out, "%d moved to %s, %d skipped\n", moved, to, skipped)
	return nil
}
