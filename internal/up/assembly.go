package up

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net/http"

	"substrate.dev/ate/internal/apiserver"
	"substrate.dev/ate/internal/auth"
	"substrate.dev/ate/internal/httpserve"
	"substrate.dev/ate/internal/store"
)

// cleanups are what a command's assembly steps opened, to be closed in
// reverse order when the command returns: one function's deferred
// calls, spread over the steps that open them.
type cleanups []func()

// add appends f, to run before everything added earlier.
func (c *cleanups) add(f func()) { *c = append(*c, f) }

// run runs them, last added first. A pointer receiver: `defer c.run()`
// must see what is added after the defer statement, not the empty list
// it held then (a value receiver is copied when the defer is evaluated:
// ate up once exited leaving its sandboxes, network namespaces and store
// open).
func (c *cleanups) run() {
	for i := len(*c) - 1; i >= 0; i-- {
		(*c)[i]()
	}
}

// step is one assembly step of a command: it builds on what the steps
// before it built and adds what it opens to the command's cleanups.
type step func(context.Context) error

// assemble runs steps in order, stopping at the first error.
func assemble(ctx context.Context, steps ...step) error {
	for _, s := range steps {
		if err := s(ctx); err != nil {
			return err
		}
	}
	return nil
}

// listenTunnel listens for the worker tunnel on addr, with tlsc (nil:
// plaintext). The tunnel must listen before the node exists (workers
// record its address); it serves the handler given to serve once it
// does, before the tunnel starts serving.
func listenTunnel(addr string, tlsc *tls.Config, log *slog.Logger) (ts *httpserve.Server, serve func(http.Handler), err error) {
	var tunnel http.Handler
	ts = httpserve.NewServer("worker-tunnel", addr, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tunnel.ServeHTTP(w, r)
	}), log)
	ts.TLS = tlsc
	if err := ts.Listen(); err != nil {
		return nil, nil, fmt.Errorf("tunnel: %w", err)
	}
	return ts, func(h http.Handler) { tunnel = h }, nil
}

// authorize checks c against the API server's own actor-identity issuer
// (auth.Config.CheckIssuer), builds its authorizer over st's role
// bindings and alarms, and wires it into api (wireAuth). The authorizer
// is nil when c checks nothing (auth.NewAuthorizer).
func authorize(api *apiserver.Server, c auth.Config, issuerURL string, st store.Store, log *slog.Logger) (*auth.Authorizer, error) {
	if err := c.CheckIssuer(issuerURL); err != nil {
		return nil, err
	}
	authz, err := auth.NewAuthorizer(c, st, apiserver.AlarmAtespace(st), log)
	if err != nil {
		return nil, err
	}
	if err := wireAuth(api, authz, c); err != nil {
		return nil, err
	}
	return authz, nil
}
