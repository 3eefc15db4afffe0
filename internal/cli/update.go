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
  ate update actors --from-template notes-v1 --template notes-v2
  ate update actors --selector app=notes,track!=canary --template notes-v2`,
	}
	var to, from, selector string
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
		Use:   "actors (--selector SELECTOR | --from-template OLD) --template NEW",
		Short: "Move every suspended actor matching a label selector or of template OLD to NEW (a rollout)",
		Long: "Move every SUSPENDED or CRASHED actor of the atespace whose labels match\n" +
			"--selector (Kubernetes label-selector syntax, filtered by the server) and/or\n" +
			"whose template is --from-template (both given: both must hold) to NEW, one at\n" +
			"a time, and list those skipped (RUNNING, PAUSED, refused) and why; actors\n" +
			"already on NEW are left alone and counted. Run it again once the skipped\n" +
			"ones are suspended. It exits non-zero only when it cannot list the actors.\n\n" + templateMoveHelp,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if selector == "" && from == "" {
				// `--selector ''` would otherwise move every actor.
				return fmt.Errorf("give a non-empty --selector or --from-template: an empty one would move every actor of the atespace")
			}
			return a.moveActors(cmd, selector, from, to)
		},
	}
	many.Flags().StringVar(&to, "template", "", "the template to move the actors to (required)")
	many.Flags().StringVar(&from, "from-template", "", "move the actors of this template")
	many.Flags().StringVarP(&selector, "selector", "l", "", "move the actors whose labels match this label selector (tier=web,track!=canary)")
	_ = many.MarkFlagRequired("template")
	many.MarkFlagsOneRequired("selector", "from-template")
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

// moveActors is the rollout: it lists the atespace's actors matching
// selector (server side; "" matches all) and, when from is set, of
// template from, and moves each to template to with its own UpdateActor
// call, printing a line per actor and a count. A missing template to
// fails before anything moves.
func (a *app) moveActors(cmd *cobra.Command, selector, from, to string) error {
	atespace, err := a.atespaceName()
	if err != nil {
		return err
	}
	s, err := a.connect(cmd.Context())
	if err != nil {
		return err
	}
	defer s.close()
	// A missing target would skip every actor with the same NotFound: say
	// it once, before moving anything, and fail.
	if _, err := call(cmd.Context(), s, s.client.GetActorTemplate, &atev1.GetActorTemplateRequest{Atespace: atespace, Name: to}); err != nil {
		return err
	}
	actors, err := listActors(cmd.Context(), s, &atev1.ListActorsRequest{Atespace: atespace, LabelSelector: selector})
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	moved, skipped, already := 0, 0, 0
	for _, actor := range actors {
		if from != "" && actor.GetTemplate() != from {
			continue
		}
		if actor.GetTemplate() == to {
			already++
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
	fmt.Fprintf(out, "%d moved to %s, %d skipped", moved, to, skipped)
	if already > 0 {
		fmt.Fprintf(out, ", %d already on it", already)
	}
	fmt.Fprintln(out)
	return nil
}
