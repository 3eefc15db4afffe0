// Package router is Substrate's HTTP entry point. It picks the actor a
// request is for (from the Host header or Ate-Target-Actor), makes sure the
// actor is RUNNING — resuming it on demand, with one resume per actor however
// many requests wait for it, and with the number and patience of waiting
// ("parked") requests bounded — and proxies the request to the worker tunnel
// that fronts the actor's worker.
//
// Wiring: NewHandler builds the request chain over a Resolver (in production
// a ControlResolver over the Control API, the only part of the router that
// speaks gRPC: it translates status codes into the Resolver's errors);
// httpserve.Server serves it until its context ends, then drains it. The
// router's side of the worker tunnel protocol is tunnelproto's.
package router
