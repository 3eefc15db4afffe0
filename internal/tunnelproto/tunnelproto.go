// Package tunnelproto is the protocol between a router and a node's worker
// tunnel. Both sides import it, so neither imports the other.
//
// # Addressing
//
// A router sends each request for an actor to the tunnel of the node that
// hosts the actor's worker, with two headers naming where it believes the
// actor is: HeaderWorker (the worker's name) and HeaderActorUID (the
// actor's uid, which identifies one incarnation of it), and, when the
// control plane holds leases, HeaderAssignment (the lease token its
// current placement was started under). Clients must not choose them: the
// router sets them, replacing any the client sent, and the tunnel removes
// them before the request reaches the actor.
//
// # Stale assignments
//
// The tunnel admits a request only if the named worker hosts that actor
// incarnation now, started under the named assignment if one is named,
// and is admitting requests (a checkpoint stops admitting
// before it drains). Otherwise it answers StatusStale (421 Misdirected
// Request, RFC 9110 §15.5.20) before anything reaches the actor. 421
// therefore means "the actor never saw this request": the router drops
// the target it used, resolves the actor again and may send the request
// again whatever its method. A refused connection to the tunnel means the
// same (the worker or its node is gone).
//
// # The tunnel's own answers
//
// When an admitted request gets no answer from the actor, the tunnel
// answers it itself with WriteError: a fixed text, never the cause (which
// names interior addresses, namespaces and the runtime, and which the
// tunnel logs with the request's X-Request-Id), and the marker HeaderError
// whose value is an ErrorKind. A router never relays a marked answer,
// marker included; it answers with its own text. The marker is the
// tunnel's alone: the tunnel removes it from the actor's responses, so an
// actor cannot make its own answer look like the tunnel's.
//
// After KindRefused or KindUpstream the actor is still on the worker (only
// its app failed to answer), so a router may keep its target; after
// KindCut the actor is going away (checkpoint, stop), so it looks again.
// A router treats a kind it does not know as KindUpstream.
package tunnelproto

import (
	"context"
	"net/http"
)

// Request headers a router sets on every request to a tunnel.
const (
	// HeaderWorker names the worker the router believes hosts the actor.
	HeaderWorker = "Ate-Worker"
	// HeaderActorUID is the uid of the actor incarnation the router
	// expects on that worker.
	HeaderActorUID = "Ate-Actor-Uid"
	// HeaderAssignment is the actor's assignment token as the router
	// resolved it (atev1.Actor.assignment, decimal): the tunnel refuses
	// the request (StatusStale) unless the worker's sandbox was started
	// under that token. Absent or "0": not checked (a control plane
	// without leases, or a router that predates it).
	HeaderAssignment = "Ate-Assignment"
	// HeaderRequestID carries the router's request id (X-Request-Id, the
	// load balancers' de-facto header), which the tunnel logs with its
	// errors and the actor may log too.
	HeaderRequestID = "X-Request-Id"
)

// StatusStale is the tunnel's answer to a request whose HeaderWorker does
// not host HeaderActorUID now, or is not admitting: the actor never saw
// the request, so it is safe to resolve the actor again and resend.
const StatusStale = http.StatusMisdirectedRequest

// HeaderNotServing marks a StatusStale answer given because the node
// serves nothing now (its lease ran out by its own count, or it was not
// welcomed yet): not this actor's assignment but the whole node is in
// question, and resolving again at once finds the same worker until the
// control plane welcomes the node again or declares it lost. Its value
// is "1".
const HeaderNotServing = "Ate-Node-Not-Serving"

// HeaderError marks an answer the tunnel made itself because the actor
// gave none (WriteError); its value is an ErrorKind.
const HeaderError = "Ate-Tunnel-Error"

// ErrorKind is the value of HeaderError: why the actor gave no answer.
type ErrorKind string

// Kinds of HeaderError.
const (
	// KindRefused: nothing listens on the actor's port. 502.
	KindRefused ErrorKind = "refused"
	// KindUpstream: the connection to the actor's port failed otherwise,
	// or broke before the actor answered. 502.
	KindUpstream ErrorKind = "upstream"
	// KindCut: the request was cut before an answer because the actor's
	// container was checkpointed after its drain grace, or stopped. 503
	// with Retry-After: the actor will be back.
	KindCut ErrorKind = "cut"
)

// WriteError writes the tunnel's own answer for a request the actor did
// not answer: a fixed text by kind and the marker, never the cause, which
// the caller logs. Nothing may have been written to w yet.
func WriteError(w http.ResponseWriter, kind ErrorKind) {
	code, body := http.StatusBadGateway, "actor did not answer"
	if kind == KindCut {
		// A client talking to the tunnel directly learns to retry too.
		w.Header().Set("Retry-After", "1")
		code, body = http.StatusServiceUnavailable, "actor is being suspended; retry"
	}
	w.Header().Set(HeaderError, string(kind))
	http.Error(w, body, code)
}

type nodeKey struct{}

// WithNode returns ctx saying that a request to a worker tunnel made with
// it must reach the tunnel of node, the node that registered the worker:
// a transport that checks tunnels' certificates (pki.NodeTransport)
// accepts only that node's.
func WithNode(ctx context.Context, node string) context.Context {
	return context.WithValue(ctx, nodeKey{}, node)
}

// NodeFrom returns the node WithNode put into ctx.
func NodeFrom(ctx context.Context) (string, bool) {
	n, ok := ctx.Value(nodeKey{}).(string)
	return n, ok && n != ""
}
