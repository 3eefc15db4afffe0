package cli

import atev1 "substrate.dev/ate/api/ate/v1"

// routingFields are the template fields the router enforces:
//
//	routeTimeoutSeconds: 300       # the actor's answer to one request
//	streamIdleTimeoutSeconds: 300  # silence inside a streaming response
//	idle: {after: 10m, action: pause}   # or action: suspend
//
// The server validates them; the client only carries them.
type routingFields struct {
	RouteTimeoutSeconds      int32     `json:"routeTimeoutSeconds,omitempty"`
	StreamIdleTimeoutSeconds int32     `json:"streamIdleTimeoutSeconds,omitempty"`
	Idle                     *idleFile `json:"idle,omitempty"`
}

type idleFile struct {
	// After is a Go duration ("10m").
	After  string `json:"after"`
	Action string `json:"action,omitempty"`
}

func (r routingFields) apply(spec *atev1.ActorTemplateSpec) {
	spec.RouteTimeoutSeconds = r.RouteTimeoutSeconds
	spec.StreamIdleTimeoutSeconds = r.StreamIdleTimeoutSeconds
	if r.Idle != nil {
		spec.Idle = &atev1.IdlePolicy{After: r.Idle.After, Action: r.Idle.Action}
	}
}
