// Package streams defines what Substrate calls a listening stream and how
// a template's stream policy (ActorTemplateSpec.streams) treats one. The
// worker tunnel, the router, the lifecycle workflows and the API server's
// validation all ask this one package, so the definition cannot drift
// between the component that counts streams and the one that acts on the
// count.
//
// Like internal/checkpoint it imports nothing of Substrate's: the router
// must not depend on lifecycle, nor the node on the router.
package streams

import (
	"fmt"
	"net/http"
	"strings"
)

// IsListen reports whether r opens a listening stream: a GET asking for
// Server-Sent Events (its Accept header names text/event-stream) that is
// not a protocol upgrade. Such a request carries no body: once it is
// admitted the client only listens, and whatever the server sends on it
// (keep-alives, notifications) is the server's doing. Any other request —
// a POST, even one that accepts an event-stream answer, a WebSocket, a
// plain GET — is a real request.
func IsListen(r *http.Request) bool {
	if r.Method != http.MethodGet || r.Header.Get("Upgrade") != "" {
		return false
	}
	for _, v := range r.Header.Values("Accept") {
		for part := range strings.SplitSeq(v, ",") {
			mt, _, _ := strings.Cut(part, ";")
			if strings.EqualFold(strings.TrimSpace(mt), "text/event-stream") {
				return true
			}
		}
	}
	return false
}

// Policy is a template's stream policy, parsed. The zero value is the
// default: listening streams count as traffic and any request wakes the
// actor. It is comparable.
type Policy struct {
	// IgnoreIdle: open listening streams do not keep the actor from
	// being idle (idle policy, idle checks, eviction); their start still
	// counts as traffic. Spelled idle: ignore.
	IgnoreIdle bool
	// WakeOnRequest: a listening stream to an actor that is not RUNNING
	// is held without resuming it, until a real request (anything
	// IsListen is false for) resumes it. Spelled wakeOn: request.
	WakeOnRequest bool
}

// Wire values of the policy's fields.
const (
	IdleCount     = "count"
	IdleIgnore    = "ignore"
	WakeOnAny     = "any"
	WakeOnRequest = "request"
)

// Parse reads a template's streams.idle and streams.wakeOn; empty strings
// are the defaults (count, any). An unknown value is an error naming the
// field and the accepted values.
func Parse(idle, wakeOn string) (Policy, error) {
	var p Policy
	switch idle {
	case "", IdleCount:
	case IdleIgnore:
		p.IgnoreIdle = true
	default:
		return Policy{}, fmt.Errorf("streams.idle %q: want %s or %s", idle, IdleCount, IdleIgnore)
	}
	switch wakeOn {
	case "", WakeOnAny:
	case WakeOnRequest:
		p.WakeOnRequest = true
	default:
		return Policy{}, fmt.Errorf("streams.wakeOn %q: want %s or %s", wakeOn, WakeOnAny, WakeOnRequest)
	}
	return p, nil
}

// Busy returns how many of inflight open requests keep the actor from
// being idle under p, listeners of them being listening streams.
func (p Policy) Busy(inflight, listeners int) int {
	if p.IgnoreIdle {
		return inflight - listeners
	}
	return inflight
}
