package cli

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/names"
)

func newCreateCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "create KIND",
		Short: "Create an actor, actor template, atespace or ingress token",
		Example: `  ate create template -f counter.yaml
  ate create actor counter-1 --template counter
  ate create actor team/counter-2 --template counter --selector zone=a
  ate create actor counter-5 --template counter -l tier=web -l track=stable
  ate create actor counter-3 --from-tag at-five
  ate create actor counter-4 --from-actor counter-1
  ate create atespace team
  ate create rolebinding web-editors --role editor -n web --user alice`,
	}
	kindGroup(cmd, newCreateActorCommand(a), newCreateTemplateCommand(a), newCreateRoleBindingCommand(a), &cobra.Command{
		Use:   "atespace NAME",
		Short: "Create an atespace",
		Args:  cobra.ExactArgs(1),
		RunE:  func(cmd *cobra.Command, args []string) error { return a.createAtespace(cmd, args[0]) },
	}, newCreateIngressTokenCommand(a))
	return cmd
}

func newCreateActorCommand(a *app) *cobra.Command {
	var template string
	var selectors, labels []string
	var from forkFlags
	cmd := &cobra.Command{
		Use:   "actor NAME | ATESPACE/NAME (--template TEMPLATE | --from-tag TAG | --from-actor ACTOR)",
		Short: "Create a suspended actor from a template, a tag or another actor (it starts on first resume)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.createActor(cmd, args[0], template, selectors, labels, from)
		},
	}
	cmd.Flags().StringVar(&template, "template", "", "template to start from, in the actor's atespace")
	cmd.Flags().StringArrayVar(&selectors, "selector", nil, "worker label the actor must run on, KEY=VALUE (repeatable, or comma-separated)")
	cmd.Flags().StringArrayVarP(&labels, "labels", "l", nil,
		"label of the actor, KEY=VALUE (repeatable, or comma-separated); Kubernetes label syntax, at most 64; selected by ate get actors -l and ate update actors --selector")
	cmd.Flags().StringVar(&from.tag, "from-tag", "", "start from this tag of the atespace: its memory and volumes, its template, a new identity")
	cmd.Flags().StringVar(&from.actor, "from-actor", "", "fork this actor of the atespace: its state now (a RUNNING one keeps running), its template, a new identity")
	cmd.MarkFlagsOneRequired("template", "from-tag", "from-actor")
	cmd.MarkFlagsMutuallyExclusive("template", "from-tag", "from-actor")
	return cmd
}

// forkFlags are create actor's --from-tag and --from-actor.
type forkFlags struct{ tag, actor string }

func (a *app) createActor(cmd *cobra.Command, arg, template string, selectors, labelFlags []string, from forkFlags) error {
	key, err := a.actorKey(arg)
	if err != nil {
		return err
	}
	if from == (forkFlags{}) {
		if err := names.ValidateLabel("template name", template); err != nil {
			return err
		}
	}
	selector, err := parseKeyValues("--selector", selectors)
	if err != nil {
		return err
	}
	labels, err := parseKeyValues("--labels", labelFlags)
	if err != nil {
		return err
	}
	s, err := a.connect(cmd.Context())
	if err != nil {
		return err
	}
	defer s.close()
	actor, err := call(cmd.Context(), s, s.client.CreateActor, &atev1.CreateActorRequest{Actor: &atev1.Actor{
		Atespace: key.Atespace, Name: key.Name, Template: template, WorkerSelector: selector, Labels: labels,
	}, FromTag: from.tag, FromActor: from.actor})
	if err != nil {
		return err
	}
	return printResult(cmd.OutOrStdout(), a.output, actor, actorTable(a.now()), fmt.Sprintf("actor %s created", key))
}

// parseKeyValues turns the values of flag name, ["k=v", "a=b,c=d"], into a
// map. It returns nil for none so the request carries no empty map, and an
// error naming the flag for an entry without "=" or with an empty key.
func parseKeyValues(name string, flags []string) (map[string]string, error) {
	var m map[string]string
	for _, f := range flags {
		for kv := range strings.SplitSeq(f, ",") {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				return nil, fmt.Errorf("%s %q: want KEY=VALUE", name, kv)
			}
			if m == nil {
				m = map[string]string{}
			}
			m[k] = v
		}
	}
	return m, nil
}

func newCreateTemplateCommand(a *app) *cobra.Command {
	var file string
	var wait bool
	cmd := &cobra.Command{
		Use:   "template -f FILE",
		Short: "Create an actor template from a YAML file and start building its golden snapshot",
		Long: `Create an actor template from a YAML file ("-" reads standard input):

  name: counter
  containers:
  - name: counter
    image: oci:build/images/counter   # oci:PATH[:TAG], oci-archive:PATH or a registry reference
    command: ["/counter"]             # optional
    args: []                          # optional
    env: {K: V}                       # optional
    ports: [8080]
  wakeupProbe:
    httpGet: {path: /healthz, port: 8080}
    timeoutSeconds: 60                # optional
    afterRestore: skip                # optional: probe after a boot only; default probe
                                      # (after every boot and restore; docs/restore.md)
  sandboxClass: gvisor                # optional
  onRestore:                          # optional: called after every restore
    httpPost: {path: /ate/restored, port: 8080}
    timeoutSeconds: 5
  newActors: golden                   # optional: golden or coldBoot; default golden with onRestore,
                                      # else coldBoot (docs/restore.md)
  ttl: {deleteAfterIdle: 14d}         # optional: delete actors SUSPENDED or CRASHED and unused
                                      # this long (Go duration or whole days, >= 1s; docs/actors.md)
  streams: {idle: ignore, wakeOn: request}  # optional: open event streams do not keep the actor
                                      # awake, nor wake it (defaults count, any; docs/actors.md)
  ingress: {policy: token}            # optional: the router lets in only requests with a bearer
                                      # token (ate create ingresstoken); default public
                                      # (docs/security.md, Router ingress policy)

Relative oci: and oci-archive: paths are resolved against the current
directory. The template is created in --atespace.

New actors boot the image afresh unless the template has an onRestore
hook or says newActors: golden; actors that restore the golden snapshot
share its memory, random seeds included (docs/restore.md).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return a.createTemplate(cmd, file, wait) },
	}
	cmd.Flags().StringVarP(&file, "filename", "f", "", "template YAML file, or - for standard input (required)")
	cmd.Flags().BoolVar(&wait, "wait", false, "print the golden build's phases as they happen (on stderr) and return once it is READY; "+
		"exit 1 with the reason when it FAILED. --timeout bounds each poll, not the wait (interrupt to stop waiting; the build goes on)")
	_ = cmd.MarkFlagRequired("filename") // cannot fail: the flag is defined above
	return cmd
}

func (a *app) createTemplate(cmd *cobra.Command, file string, wait bool) error {
	atespace, err := a.atespaceName()
	if err != nil {
		return err
	}
	tmpl, err := a.readTemplate(cmd.InOrStdin(), file)
	if err != nil {
		return err
	}
	tmpl.Atespace = atespace
	s, err := a.connect(cmd.Context())
	if err != nil {
		return err
	}
	defer s.close()
	created, err := call(cmd.Context(), s, s.client.CreateActorTemplate, &atev1.CreateActorTemplateRequest{Template: tmpl})
	if err != nil {
		return err
	}
	msg := fmt.Sprintf("template %s/%s created (golden snapshot %s)", atespace, tmpl.GetName(), phaseOrPending(created))
	if err := printResult(cmd.OutOrStdout(), a.output, created, templateTable(a.now()), msg); err != nil {
		return err
	}
	if wait {
		return a.waitGolden(cmd, s, atespace, tmpl.GetName())
	}
	return nil
}

// readTemplate loads the -f argument, which is a path or "-" for stdin.
func (a *app) readTemplate(stdin io.Reader, file string) (*atev1.ActorTemplate, error) {
	if file != "-" {
		return LoadTemplateFile(file)
	}
	data, err := io.ReadAll(stdin)
	if err != nil {
		return nil, fmt.Errorf("read template from stdin: %w", err)
	}
	cwd, err := os.Getwd()
	if err != nil {
		return nil, fmt.Errorf("resolve image paths: %w", err)
	}
	t, err := parseTemplate(data, cwd)
	if err != nil {
		return nil, fmt.Errorf("template from stdin: %w", err)
	}
	return t, nil
}

func phaseOrPending(t *atev1.ActorTemplate) string {
	if p := t.GetStatus().PhaseOrName(); p != atev1.ActorTemplateStatus_PHASE_UNSPECIFIED {
		return strings.ToLower(p.String())
	}
	return "pending"
}

func (a *app) createAtespace(cmd *cobra.Command, name string) error {
	if err := names.ValidateLabel("atespace", name); err != nil {
		return err
	}
	s, err := a.connect(cmd.Context())
	if err != nil {
		return err
	}
	defer s.close()
	ns, err := call(cmd.Context(), s, s.client.CreateAtespace, &atev1.CreateAtespaceRequest{Name: name})
	if err != nil {
		return err
	}
	return printResult(cmd.OutOrStdout(), a.output, ns, atespaceTable(a.now()), fmt.Sprintf("atespace %s created", name))
}
