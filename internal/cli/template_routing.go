package cli

import atev1 "substrate.dev/ate/api/ate/v1"

// routingFields are the template fields the router enforces:
//
//	routeTimeoutSeconds: 300       # the actor's answer to one request
//	streamIdleTimeoutSeconds: 300  # silence inside a streaming response
//	idle: {after: 10m, action: pause}   # or action: suspend
//	eviction: {evictable: true, priority: 0, minRunSeconds: 5, allowOpenStreams: false}
//	streams: {idle: count, wakeOn: any}   # or idle: ignore, wakeOn: request
//	ingress: {policy: public}             # or policy: token
//
// The server validates them; the client only carries them.
type routingFields struct {
	RouteTimeoutSeconds      int32     `json:"routeTimeoutSeconds,omitempty"`
	StreamIdleTimeoutSeconds int32     `json:"streamIdleTimeoutSeconds,omitempty"`
	Idle                     *idleFile `json:"idle,omitempty"`
	// Eviction says whether and when the actor may be checkpointed to
	// free its worker for a waiting request.
	Eviction *evictionFile `json:"eviction,omitempty"`
	// Streams says how listening streams (GET for Server-Sent Events)
	// weigh on idleness and wake-ups (docs/actors.md, Long-lived streams).
	Streams *streamsFile `json:"streams,omitempty"`
	// Ingress says who the router lets reach the actors
	// (docs/security.md, Router ingress policy).
	Ingress *ingressFile `json:"ingress,omitempty"`
}

type ingressFile struct {
	// Policy is public (the default) or token.
	Policy string `json:"policy,omitempty"`
}

type streamsFile struct {
	// Idle is count (the default) or ignore; WakeOn any (the default) or
	// request.
	Idle   string `json:"idle,omitempty"`
	WakeOn string `json:"wakeOn,omitempty"`
}

type evictionFile struct {
	// Evictable and MinRunSeconds are pointers: unset means the server's
	// default (true, 5 s), which differs from false and 0.
	Evictable        *bool  `json:"evictable,omitempty"`
	Priority         int32  `json:"priority,omitempty"`
	MinRunSeconds    *int32 `json:"minRunSeconds,omitempty"`
	AllowOpenStreams bool   `json:"allowOpenStreams,omitempty"`
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
	if e := r.Eviction; e != nil {
		spec.Eviction = &atev1.EvictionPolicy{Evictable: e.Evictable, Priority: e.Priority,
			MinRunSeconds: e.MinRunSeconds, AllowOpenStreams: e.AllowOpenStreams}
	}
	if st := r.Streams; st != nil {
		spec.Streams = &atev1.StreamPolicy{Idle: st.Idle, WakeOn: st.WakeOn}
	}
	if in := r.Ingress; in != nil {
		spec.Ingress = &atev1.IngressPolicy{Policy: in.Policy}
	}
}
