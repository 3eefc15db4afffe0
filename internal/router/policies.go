package router

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/auth"
	"substrate.dev/ate/internal/checkpoint"
	"substrate.dev/ate/internal/streams"
)

// policyCache holds the policy of each actor's template, keyed by the
// actor's uid, with the template's name beside it. Templates are
// immutable and cannot be deleted while an actor uses them, so the entry
// stays right until the actor is moved to another template (ate update
// actor --template): a lookup naming another template than the entry
// fetches again. The template's name alone would not do as the key, since
// a name can be reused once its template is deleted, and an Actor does
// not carry its template's uid; so each incarnation costs one
// GetActorTemplate, once per template it runs, next to the GetActor or
// ResumeActor that found it.
//
// Safe for concurrent use. It grows by one small entry per actor
// incarnation the router has routed to.
type policyCache struct {
	client atev1.ControlClient
	logger *slog.Logger

	mu sync.Mutex
	// byActor maps actor uid → its template's policy; guarded by mu.
	byActor map[string]templatePolicy
}

// templatePolicy is the policy of the named template.
type templatePolicy struct {
	template string
	policy   Policy
}

func newPolicyCache(client atev1.ControlClient, logger *slog.Logger) policyCache {
	return policyCache{client: client, logger: logger, byActor: make(map[string]templatePolicy)}
}

// get returns a's policy, fetching its template on the first call for a's
// uid. Errors are GetActorTemplate's, translated (fromControl).
func (c *policyCache) get(ctx context.Context, a *atev1.Actor) (Policy, error) {
	c.mu.Lock()
	e, ok := c.byActor[a.GetUid()]
	c.mu.Unlock()
	if ok && e.template == a.GetTemplate() {
		return e.policy, nil
	}
	tpl, err := c.client.GetActorTemplate(ctx, &atev1.GetActorTemplateRequest{Atespace: a.GetAtespace(), Name: a.GetTemplate()})
	if err != nil {
		return Policy{}, fmt.Errorf("get template %s/%s of actor %s/%s: %w",
			a.GetAtespace(), a.GetTemplate(), a.GetAtespace(), a.GetName(), fromControl(err))
	}
	p, err := policyOf(tpl.GetSpec())
	if err != nil {
		// The API validates templates; one that slipped through still
		// routes, without idle handling.
		c.logger.Warn("template's routing policy ignored in part", "template", a.GetTemplate(), "atespace", a.GetAtespace(),
			"uid", tpl.GetUid(), "err", err)
	}
	c.mu.Lock()
	c.byActor[a.GetUid()] = templatePolicy{template: a.GetTemplate(), policy: p}
	c.mu.Unlock()
	return p, nil
}

// policyOf reads the router's policy from a template spec. Zero timeouts
// stay zero (the router's defaults apply). An empty idle.after, or one of
// zero, disables idle handling; an empty idle.action means suspend
// (checkpoint.ParseAction); empty streams fields are streams.Parse's
// defaults. On error the timeouts are still returned.
//
// An ingress policy the router does not know fails closed: it asks for a
// token, which is the stricter of the two.
func policyOf(spec *atev1.ActorTemplateSpec) (Policy, error) {
	p, err := trafficPolicyOf(spec)
	ingress, ierr := auth.ParseIngressPolicy(spec.GetIngress().GetPolicy())
	if ierr != nil {
		ingress = auth.IngressToken
	}
	p.Ingress = ingress
	return p, errors.Join(err, ierr)
}

// trafficPolicyOf is policyOf without the ingress policy.
func trafficPolicyOf(spec *atev1.ActorTemplateSpec) (Policy, error) {
	p := Policy{
		RouteTimeout:      time.Duration(spec.GetRouteTimeoutSeconds()) * time.Second,
		StreamIdleTimeout: time.Duration(spec.GetStreamIdleTimeoutSeconds()) * time.Second,
	}
	sp, err := streams.Parse(spec.GetStreams().GetIdle(), spec.GetStreams().GetWakeOn())
	if err != nil {
		return p, err
	}
	p.Streams = sp
	after := spec.GetIdle().GetAfter()
	if after == "" {
		return p, nil
	}
	d, err := time.ParseDuration(after)
	if err != nil {
		return p, fmt.Errorf("idle.after %q: %w", after, err)
	}
	if d <= 0 {
		return p, nil
	}
	action, err := checkpoint.ParseAction(spec.GetIdle().GetAction())
	if err != nil {
		return p, fmt.Errorf("idle.action: %w", err)
	}
	p.IdleAfter, p.IdleAction = d, action
	return p, nil
}
