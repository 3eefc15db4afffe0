package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	atev1 "substrate.dev/ate/api/ate/v1"
)

// newCreateIngressTokenCommand is `ate create ingresstoken NAME`.
func newCreateIngressTokenCommand(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "ingresstoken NAME | ATESPACE/NAME",
		Short: "Create a bearer token for the router to let into the atespace's token-policy actors (printed once)",
		Long: `Create an ingress token: a bearer token the router accepts for the actors of
the atespace whose template sets ingress: {policy: token}
(docs/security.md, Router ingress policy). Clients send it as
Authorization: Bearer <token>. The token is printed once, on standard
output; the API server keeps only its SHA-256, so it cannot be shown
again: delete it and create another if it is lost. Deleting it revokes
it; a router that accepted it keeps doing so for at most its cache TTL
(10 s by default).`,
		Example: `  ate create ingresstoken web -n team
  TOKEN=$(ate create ingresstoken ci)
  curl -H "Authorization: Bearer $TOKEN" -H "Ate-Target-Actor: default/counter-1" http://localhost:8080/`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return a.createIngressToken(cmd, args[0]) },
	}
}

func (a *app) createIngressToken(cmd *cobra.Command, arg string) error {
	key, err := a.actorKey(arg)
	if err != nil {
		return err
	}
	s, err := a.connect(cmd.Context())
	if err != nil {
		return err
	}
	defer s.close()
	t, err := call(cmd.Context(), s, s.client.CreateIngressToken, &atev1.CreateIngressTokenRequest{Atespace: key.Atespace, Name: key.Name})
	if err != nil {
		return err
	}
	if a.output == formatTable {
		// The token alone on stdout, so TOKEN=$(ate create ingresstoken
		// x) works; the note goes to stderr.
		fmt.Fprintf(cmd.ErrOrStderr(), "ingress token %s/%s created; it is shown only now:\n", t.GetAtespace(), t.GetName())
		_, err = fmt.Fprintln(cmd.OutOrStdout(), t.GetToken())
		return err
	}
	return printObjects(cmd.OutOrStdout(), a.output, []*atev1.IngressToken{t}, true, ingressTokenTable(a.now()))
}

// getIngressTokens is `ate get ingresstokens`.
func (a *app) getIngressTokens(cmd *cobra.Command) error {
	atespace, err := a.atespaceName()
	if err != nil {
		return err
	}
	s, err := a.connect(cmd.Context())
	if err != nil {
		return err
	}
	defer s.close()
	resp, err := call(cmd.Context(), s, s.client.ListIngressTokens, &atev1.ListIngressTokensRequest{Atespace: atespace})
	if err != nil {
		return err
	}
	if len(resp.GetTokens()) == 0 && a.output == formatTable {
		fmt.Fprintf(cmd.ErrOrStderr(), "No ingress tokens found in atespace %s.\n", atespace)
		return nil
	}
	return printObjects(cmd.OutOrStdout(), a.output, resp.GetTokens(), false, ingressTokenTable(a.now()))
}

func (a *app) deleteIngressToken(cmd *cobra.Command, arg string) error {
	key, err := a.actorKey(arg)
	if err != nil {
		return err
	}
	s, err := a.connect(cmd.Context())
	if err != nil {
		return err
	}
	defer s.close()
	if _, err := call(cmd.Context(), s, s.client.DeleteIngressToken, &atev1.DeleteIngressTokenRequest{Atespace: key.Atespace, Name: key.Name}); err != nil {
		return err
	}
	_, err = fmt.Fprintf(cmd.OutOrStdout(), "ingress token %s deleted\n", key)
	return err
}

func ingressTokenTable(now time.Time) table[*atev1.IngressToken] {
	return table[*atev1.IngressToken]{
		header: []string{"NAME", "AGE"},
		row: func(x *atev1.IngressToken) []string {
			return []string{x.GetAtespace() + "/" + x.GetName(), age(now, x.GetCreateTime())}
		},
	}
}
