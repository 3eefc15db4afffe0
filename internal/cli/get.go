package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/names"
)

// listPageSize is what `get actors` asks for per page: the server's cap, so
// large atespaces take few round trips.
const listPageSize = 1000

func newGetCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "get KIND [NAME]",
		Short: "Show actors, templates, workers, nodes, atespaces, alarms, tags or ingress tokens",
		Example: `  ate get actors
  ate get actor counter-1 -o json
  ate get actor team/counter-1
  ate get actors --expired
  ate get actors -l tier=web,track!=canary --show-labels
  ate get templates -n team
  ate get workers
  ate get nodes
  ate get alarms --actor counter-1
  ate get tags
  ate get events --actor counter-1 -w
  ate get actor counter-1 -w`,
	}
	var alarmActor string
	alarms := &cobra.Command{
		Use: "alarms", Aliases: []string{"alarm"},
		Short: "Show the atespace's pending and failed alarms (or one actor's, --actor), soonest first",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return a.getAlarms(cmd, alarmActor) },
	}
	alarms.Flags().StringVar(&alarmActor, "actor", "", "only this actor's alarms (NAME or ATESPACE/NAME)")
	var expired, watch, showLabels bool
	var selector string
	actors := &cobra.Command{
		Use: "actor [NAME | ATESPACE/NAME]", Aliases: []string{"actors"},
		Short: "Show one actor, or all actors of the atespace",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if expired && len(args) > 0 {
				return fmt.Errorf("--expired lists the atespace's actors: give no NAME")
			}
			if selector != "" && len(args) > 0 {
				return fmt.Errorf("--selector lists the atespace's actors: give no NAME")
			}
			if watch {
				if len(args) != 1 {
					return fmt.Errorf("--watch follows one actor: give its NAME (ate get events -w follows all)")
				}
				key, err := a.actorKey(args[0])
				if err != nil {
					return err
				}
				s, err := a.connect(cmd.Context())
				if err != nil {
					return err
				}
				defer s.close()
				return a.watchActor(cmd.Context(), s, key, cmd.OutOrStdout())
			}
			return a.getActors(cmd, args, actorFilter{expired: expired, selector: selector}, showLabels)
		},
	}
	actors.Flags().BoolVar(&expired, "expired", false,
		"only the actors the next expiry sweep would delete: SUSPENDED or CRASHED, unused for their template's ttl.deleteAfterIdle (a dry run)")
	actors.Flags().StringVarP(&selector, "selector", "l", "",
		"only the actors whose labels match this Kubernetes label selector (tier=web, tier!=db, tier in (a,b), tier, !tier; comma means AND)")
	actors.Flags().BoolVar(&showLabels, "show-labels", false, "add a LABELS column to the table")
	actors.Flags().BoolVarP(&watch, "watch", "w", false, "print the actor, then again as each state change leaves it, until interrupted or it is deleted")
	kindGroup(cmd,
		actors,
		&cobra.Command{
			Use: "template [NAME]", Aliases: []string{"templates"},
			Short: "Show one actor template, or all templates of the atespace",
			Args:  cobra.MaximumNArgs(1),
			RunE:  func(cmd *cobra.Command, args []string) error { return a.getTemplates(cmd, args) },
		},
		&cobra.Command{
			Use: "worker [NAME]", Aliases: []string{"workers"},
			Short: "Show one worker, or all workers",
			Args:  cobra.MaximumNArgs(1),
			RunE:  func(cmd *cobra.Command, args []string) error { return a.getWorkers(cmd, args) },
		},
		&cobra.Command{
			Use: "node", Aliases: []string{"nodes"},
			Short: "Show the node agents the API server knows: phase (READY, DRAINING, PENDING, LOST), workers, last heartbeat",
			Args:  cobra.NoArgs,
			RunE:  func(cmd *cobra.Command, _ []string) error { return a.getNodes(cmd) },
		},
		&cobra.Command{
			Use: "rolebinding [NAME]", Aliases: []string{"rolebindings"},
			Short: "Show the role bindings the API keeps (admin only)",
			Args:  cobra.MaximumNArgs(1),
			RunE:  func(cmd *cobra.Command, args []string) error { return a.getRoleBindings(cmd, args) },
		},
		&cobra.Command{
			Use: "atespace [NAME]", Aliases: []string{"atespaces"},
			Short: "Show one atespace, or all atespaces",
			Args:  cobra.MaximumNArgs(1),
			RunE:  func(cmd *cobra.Command, args []string) error { return a.getAtespaces(cmd, args) },
		},
		alarms,
		&cobra.Command{
			Use: "tag [NAME]", Aliases: []string{"tags"},
			Short: "Show one tag, or all tags of the atespace",
			Args:  cobra.MaximumNArgs(1),
			RunE:  func(cmd *cobra.Command, args []string) error { return a.getTags(cmd, args) },
		},
		newEventsCommand(a),
		&cobra.Command{
			Use: "ingresstoken", Aliases: []string{"ingresstokens"},
			Short: "Show the atespace's ingress tokens (names and ages; the tokens themselves are never shown again)",
			Args:  cobra.NoArgs,
			RunE:  func(cmd *cobra.Command, _ []string) error { return a.getIngressTokens(cmd) },
		},
	)
	return cmd
}

// actorFilter is what `get actors` asks ListActors to keep.
type actorFilter struct {
	expired  bool
	selector string
}

func (a *app) getActors(cmd *cobra.Command, args []string, filter actorFilter, showLabels bool) error {
	ctx, out := cmd.Context(), cmd.OutOrStdout()
	var key names.ActorKey
	var err error
	if len(args) == 1 {
		key, err = a.actorKey(args[0])
	} else {
		key.Atespace, err = a.atespaceName()
	}
	if err != nil {
		return err
	}
	s, err := a.connect(cmd.Context())
	if err != nil {
		return err
	}
	defer s.close()
	t := actorTable(a.now())
	if showLabels {
		t = withLabels(t)
	}
	if len(args) == 1 {
		actor, err := call(ctx, s, s.client.GetActor, &atev1.GetActorRequest{Atespace: key.Atespace, Name: key.Name})
		if err != nil {
			return err
		}
		return printObjects(out, a.output, []*atev1.Actor{actor}, true, t)
	}
	actors, err := listActors(ctx, s, &atev1.ListActorsRequest{Atespace: key.Atespace,
		ExpiredOnly: filter.expired, LabelSelector: filter.selector})
	if err != nil {
		return err
	}
	if len(actors) == 0 && a.output == formatTable {
		switch {
		case filter.expired:
			fmt.Fprintf(cmd.ErrOrStderr(), "No expired actors in atespace %s.\n", key.Atespace)
		case filter.selector != "":
			fmt.Fprintf(cmd.ErrOrStderr(), "No actors match %q in atespace %s.\n", filter.selector, key.Atespace)
		default:
			fmt.Fprintf(cmd.ErrOrStderr(), "No actors found in atespace %s.\n", key.Atespace)
		}
		return nil
	}
	return printObjects(out, a.output, actors, false, t)
}

// listActors follows next_page_token until the server says there is no
// more; req gives the atespace and filter, and is modified.
func listActors(ctx context.Context, s *session, req *atev1.ListActorsRequest) ([]*atev1.Actor, error) {
	var all []*atev1.Actor
	seen := map[string]bool{}
	req.PageSize = listPageSize
	for {
		resp, err := call(ctx, s, s.client.ListActors, req)
		if err != nil {
			return nil, err
		}
		all = append(all, resp.GetActors()...)
		next := resp.GetNextPageToken()
		if next == "" {
			return all, nil
		}
		// A server bug that hands back an old token would loop forever.
		if seen[next] {
			return nil, fmt.Errorf("list actors: server repeated page token %q", next)
		}
		seen[next] = true
		req.PageToken = next
	}
}

func (a *app) getTemplates(cmd *cobra.Command, args []string) error {
	ctx, out := cmd.Context(), cmd.OutOrStdout()
	var atespace, name string
	var err error
	if len(args) == 1 {
		atespace, name, err = a.templateKey(args[0])
	} else {
		atespace, err = a.atespaceName()
	}
	if err != nil {
		return err
	}
	s, err := a.connect(cmd.Context())
	if err != nil {
		return err
	}
	defer s.close()
	t := templateTable(a.now())
	if len(args) == 1 {
		tmpl, err := call(ctx, s, s.client.GetActorTemplate, &atev1.GetActorTemplateRequest{Atespace: atespace, Name: name})
		if err != nil {
			return err
		}
		return printObjects(out, a.output, []*atev1.ActorTemplate{tmpl}, true, t)
	}
	resp, err := call(ctx, s, s.client.ListActorTemplates, &atev1.ListActorTemplatesRequest{Atespace: atespace})
	if err != nil {
		return err
	}
	if len(resp.GetTemplates()) == 0 && a.output == formatTable {
		fmt.Fprintf(cmd.ErrOrStderr(), "No templates found in atespace %s.\n", atespace)
		return nil
	}
	return printObjects(out, a.output, resp.GetTemplates(), false, t)
}

func (a *app) getWorkers(cmd *cobra.Command, args []string) error {
	ctx, out := cmd.Context(), cmd.OutOrStdout()
	if len(args) == 1 {
		if err := names.ValidateLabel("worker name", args[0]); err != nil {
			return err
		}
	}
	s, err := a.connect(cmd.Context())
	if err != nil {
		return err
	}
	defer s.close()
	resp, err := call(ctx, s, s.client.ListWorkers, &atev1.ListWorkersRequest{})
	if err != nil {
		return err
	}
	workers := resp.GetWorkers()
	if len(args) == 1 {
		// The API has no GetWorker; the list is small (one entry per slot).
		for _, w := range workers {
			if w.GetName() == args[0] {
				return printObjects(out, a.output, []*atev1.Worker{w}, true, workerTable())
			}
		}
		return &APIError{Status: status.Newf(codes.NotFound, "worker %s not found", args[0])}
	}
	if len(workers) == 0 && a.output == formatTable {
		fmt.Fprintln(cmd.ErrOrStderr(), "No workers found.")
		return nil
	}
	return printObjects(out, a.output, workers, false, workerTable())
}

func (a *app) getAtespaces(cmd *cobra.Command, args []string) error {
	ctx, out := cmd.Context(), cmd.OutOrStdout()
	if len(args) == 1 {
		if err := names.ValidateLabel("atespace", args[0]); err != nil {
			return err
		}
	}
	s, err := a.connect(cmd.Context())
	if err != nil {
		return err
	}
	defer s.close()
	t := atespaceTable(a.now())
	if len(args) == 1 {
		ns, err := call(ctx, s, s.client.GetAtespace, &atev1.GetAtespaceRequest{Name: args[0]})
		if err != nil {
			return err
		}
		return printObjects(out, a.output, []*atev1.Atespace{ns}, true, t)
	}
	resp, err := call(ctx, s, s.client.ListAtespaces, &atev1.ListAtespacesRequest{})
	if err != nil {
		return err
	}
	return printObjects(out, a.output, resp.GetAtespaces(), false, t)
}

func (a *app) getNodes(cmd *cobra.Command) error {
	s, err := a.connect(cmd.Context())
	if err != nil {
		return err
	}
	defer s.close()
	resp, err := call(cmd.Context(), s, s.client.ListNodes, &atev1.ListNodesRequest{})
	if err != nil {
		return err
	}
	if len(resp.GetNodes()) == 0 && a.output == formatTable {
		fmt.Fprintln(cmd.ErrOrStderr(), "No nodes found.")
		return nil
	}
	return printObjects(cmd.OutOrStdout(), a.output, resp.GetNodes(), false, nodeTable(a.now()))
}
