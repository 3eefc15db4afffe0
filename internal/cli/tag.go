package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	atev1 "substrate.dev/ate/api/ate/v1"
)

// newTagCommand is `ate tag actor NAME TAG`.
func newTagCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tag KIND NAME TAG",
		Short: "Take a named, retained snapshot of an actor, to fork new actors from",
		Long: `Take a named, retained snapshot (a tag) of an actor: of a RUNNING actor a
checkpoint that leaves it running (its sandbox freezes for the moment the
checkpoint takes); of a SUSPENDED or CRASHED one a copy of its latest
snapshot, sharing the bytes where the snapshot store can; of a PAUSED one
an upload of its paused checkpoint. The tag lives in the actor's atespace
and outlives the actor. New actors start from it with
ate create actor NEW --from-tag TAG, each with its own identity
(docs/actors.md, Tags and fork).`,
		Example: `  ate tag actor counter-1 at-five
  ate create actor counter-2 --from-tag at-five
  ate get tags
  ate delete tag at-five`,
	}
	kindGroup(cmd, &cobra.Command{
		Use: "actor NAME | ATESPACE/NAME TAG", Short: "Tag an actor",
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error { return a.tagActor(cmd, args[0], args[1]) },
	})
	return cmd
}

func (a *app) tagActor(cmd *cobra.Command, arg, tag string) error {
	key, err := a.actorKey(arg)
	if err != nil {
		return err
	}
	s, err := a.connect(cmd.Context())
	if err != nil {
		return err
	}
	defer s.close()
	t, err := call(cmd.Context(), s, s.client.TagActor, &atev1.TagActorRequest{Atespace: key.Atespace, Actor: key.Name, Tag: tag})
	if err != nil {
		return err
	}
	return printResult(cmd.OutOrStdout(), a.output, t, tagTable(a.now()), fmt.Sprintf("tag %s/%s of actor %s created", t.GetAtespace(), t.GetName(), key))
}

// getTags is `ate get tags [NAME]`.
func (a *app) getTags(cmd *cobra.Command, args []string) error {
	s, err := a.connect(cmd.Context())
	if err != nil {
		return err
	}
	defer s.close()
	if len(args) == 1 {
		key, err := a.actorKey(args[0])
		if err != nil {
			return err
		}
		t, err := call(cmd.Context(), s, s.client.GetTag, &atev1.GetTagRequest{Atespace: key.Atespace, Name: key.Name})
		if err != nil {
			return err
		}
		return printObjects(cmd.OutOrStdout(), a.output, []*atev1.Tag{t}, true, tagTable(a.now()))
	}
	atespace, err := a.atespaceName()
	if err != nil {
		return err
	}
	resp, err := call(cmd.Context(), s, s.client.ListTags, &atev1.ListTagsRequest{Atespace: atespace})
	if err != nil {
		return err
	}
	if len(resp.GetTags()) == 0 && a.output == formatTable {
		fmt.Fprintf(cmd.ErrOrStderr(), "No tags found in atespace %s.\n", atespace)
		return nil
	}
	return printObjects(cmd.OutOrStdout(), a.output, resp.GetTags(), false, tagTable(a.now()))
}

func (a *app) deleteTag(cmd *cobra.Command, arg string) error {
	key, err := a.actorKey(arg)
	if err != nil {
		return err
	}
	s, err := a.connect(cmd.Context())
	if err != nil {
		return err
	}
	defer s.close()
	if _, err := call(cmd.Context(), s, s.client.DeleteTag, &atev1.DeleteTagRequest{Atespace: key.Atespace, Name: key.Name}); err != nil {
		return err
	}
	_, err = fmt.Fprintf(cmd.OutOrStdout(), "tag %s deleted\n", key)
	return err
}

func tagTable(now time.Time) table[*atev1.Tag] {
	return table[*atev1.Tag]{
		header: []string{"NAME", "ACTOR", "TEMPLATE", "AGE"},
		row: func(x *atev1.Tag) []string {
			return []string{x.GetAtespace() + "/" + x.GetName(), x.GetActor(), x.GetTemplate(), age(now, x.GetCreateTime())}
		},
	}
}
