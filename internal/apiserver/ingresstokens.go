package apiserver

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/auth"
	"substrate.dev/ate/internal/names"
	"substrate.dev/ate/internal/store"
)

// maxBearerBytes bounds a token ReviewIngressToken looks at: far above
// an ingress token (50 bytes) or a JWT with a few claims, far below what
// would make hashing or parsing it a cost worth attacking.
const maxBearerBytes = 16 << 10

// IngressAuthorizer says whether principal p may reach the actors of
// atespace through the router: nil when it may, an error saying why not
// otherwise. The RBAC policy provides it (an editor or admin of the
// atespace, say).
type IngressAuthorizer func(ctx context.Context, p *auth.Principal, atespace string) error

// SetIngressAuthenticator makes ReviewIngressToken accept, besides the
// atespace's ingress tokens, bearer tokens authn authenticates whose
// principal authz lets into the atespace. authn must accept credentials
// meant for actors only — JWTs of their own audience, never the API's
// (internal/up wires an OIDC verifier of --oidc-ingress-client-id). Call
// it before serving; with either nil only ingress tokens are accepted.
func (s *Server) SetIngressAuthenticator(authn auth.TokenAuthenticator, authz IngressAuthorizer) {
	s.ingressAuthn, s.ingressAuthz = authn, authz
}

// CreateIngressToken implements atev1.ControlServer. The token is in
// the response only; the store keeps its SHA-256.
func (s *Server) CreateIngressToken(ctx context.Context, req *atev1.CreateIngressTokenRequest) (*atev1.IngressToken, error) {
	if err := validatePair("ingress token name", req.GetAtespace(), req.GetName()); err != nil {
		return nil, toStatus(err)
	}
	secret := auth.NewIngressToken()
	t := &store.IngressToken{Atespace: req.GetAtespace(), Name: req.GetName(), UID: NewUID(),
		Hash: auth.HashToken(secret), CreateTime: time.Now().UTC()}
	if err := s.store.CreateIngressToken(ctx, t); err != nil {
		return nil, toStatus(err)
	}
	out := ingressTokenToProto(t)
	out.Token = secret
	return out, nil
}

// ListIngressTokens implements atev1.ControlServer; an empty atespace
// lists all. Secrets are never listed (the store has none).
func (s *Server) ListIngressTokens(ctx context.Context, req *atev1.ListIngressTokensRequest) (*atev1.ListIngressTokensResponse, error) {
	if req.GetAtespace() != "" {
		if err := names.ValidateLabel("atespace", req.GetAtespace()); err != nil {
			return nil, toStatus(err)
		}
	}
	list, err := s.store.ListIngressTokens(ctx, req.GetAtespace())
	if err != nil {
		return nil, toStatus(err)
	}
	out := &atev1.ListIngressTokensResponse{}
	for _, t := range list {
		out.Tokens = append(out.Tokens, ingressTokenToProto(t))
	}
	return out, nil
}

// DeleteIngressToken implements atev1.ControlServer.
func (s *Server) DeleteIngressToken(ctx context.Context, req *atev1.DeleteIngressTokenRequest) (*atev1.DeleteIngressTokenResponse, error) {
	if err := validatePair("ingress token name", req.GetAtespace(), req.GetName()); err != nil {
		return nil, toStatus(err)
	}
	if err := s.store.DeleteIngressToken(ctx, req.GetAtespace(), req.GetName()); err != nil {
		return nil, toStatus(err)
	}
	return &atev1.DeleteIngressTokenResponse{}, nil
}

// ReviewIngressToken implements atev1.ControlServer for the router: an
// ingress token (auth.IsIngressToken) is looked up by its hash in the
// atespace; any other token goes to the authenticator and authorizer
// set by SetIngressAuthenticator, if any. A refusal is allowed=false
// (logged at debug with its reason, never the token); only a bad
// request or a store that cannot answer is an error, so the router does
// not cache an outage as a refusal.
func (s *Server) ReviewIngressToken(ctx context.Context, req *atev1.ReviewIngressTokenRequest) (*atev1.ReviewIngressTokenResponse, error) {
	if err := names.ValidateLabel("atespace", req.GetAtespace()); err != nil {
		return nil, toStatus(err)
	}
	token := req.GetToken()
	if token == "" || len(token) > maxBearerBytes {
		return nil, toStatus(fmt.Errorf("%w: token must be 1..%d bytes", errInvalid, maxBearerBytes))
	}
	if auth.IsIngressToken(token) {
		t, err := s.store.FindIngressToken(ctx, req.GetAtespace(), auth.HashToken(token))
		if errors.Is(err, store.ErrNotFound) {
			s.log.Debug("ingress token refused", "atespace", req.GetAtespace(), "reason", "no such token in the atespace")
			return &atev1.ReviewIngressTokenResponse{}, nil
		}
		if err != nil {
			return nil, toStatus(err)
		}
		return &atev1.ReviewIngressTokenResponse{Allowed: true, Subject: "ingresstoken:" + t.Atespace + "/" + t.Name}, nil
	}
	if s.ingressAuthn == nil || s.ingressAuthz == nil {
		s.log.Debug("ingress token refused", "atespace", req.GetAtespace(), "reason", "not an ingress token, and no token authenticator is configured")
		return &atev1.ReviewIngressTokenResponse{}, nil
	}
	p, err := s.ingressAuthn.Authenticate(ctx, token)
	if err != nil {
		s.log.Debug("ingress token refused", "atespace", req.GetAtespace(), "reason", err)
		return &atev1.ReviewIngressTokenResponse{}, nil
	}
	if err := s.ingressAuthz(ctx, p, req.GetAtespace()); err != nil {
		s.log.Debug("ingress token refused", "atespace", req.GetAtespace(), "principal", p.String(), "reason", err)
		return &atev1.ReviewIngressTokenResponse{}, nil
	}
	return &atev1.ReviewIngressTokenResponse{Allowed: true, Subject: p.String()}, nil
}

func ingressTokenToProto(t *store.IngressToken) *atev1.IngressToken {
	return &atev1.IngressToken{Atespace: t.Atespace, Name: t.Name, Uid: t.UID, CreateTime: timestamppb.New(t.CreateTime)}
}
