package up

import (
	"errors"

	"substrate.dev/ate/internal/apiserver"
	"substrate.dev/ate/internal/auth"
)

// wireAuth makes api's role binding changes apply at once, and lets the
// router's token ingress policy accept, besides ingress tokens, the
// ingress-audience JWTs of c (auth.NewIngressAuthenticator) of users who
// hold any role in the actor's atespace (auth.Policy.MayReach).
func wireAuth(api *apiserver.Server, a *auth.Authorizer, c auth.Config) error {
	if a == nil {
		if c.IngressClientID != "" {
			return errors.New("--oidc-ingress-client-id: the API server has no authorisation to check the users it names against")
		}
		return nil
	}
	api.SetBindingsChanged(a.Policy.Invalidate)
	ia, err := auth.NewIngressAuthenticator(c)
	if err != nil || ia == nil {
		return err
	}
	api.SetIngressAuthenticator(ia, a.Policy.MayReach)
	return nil
}
