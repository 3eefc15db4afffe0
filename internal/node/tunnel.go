package node

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"time"

	"substrate.dev/ate/internal/router"
)

type ctxKey int

const targetKey ctxKey = iota

type tunnelTarget struct {
	worker string
	port   int
}

// NewTunnel returns the worker tunnel: an HTTP handler that forwards each
// request to the sandbox of the worker named in the Ate-Worker header, but
// only if that worker hosts the actor named by Ate-Actor-Uid; otherwise it
// answers 421 Misdirected Request (RFC 9110 §15.5.20) so the router
// re-resolves. Both headers are removed before forwarding.
func (n *Node) NewTunnel() http.Handler {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			t := ctx.Value(targetKey).(tunnelTarget)
			_, _, sb, err := n.assignment(t.worker)
			if err != nil {
				return nil, err
			}
			return n.cfg.Runtime.DialContext(ctx, sb, t.port)
		},
		// Connections are per worker and port; the key below keeps a
		// pooled connection from going to another worker's sandbox.
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     30 * time.Second,
	}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			t := pr.In.Context().Value(targetKey).(tunnelTarget)
			// The URL host only keys the connection pool: one pool per
			// worker and port, never shared across sandboxes.
			pr.Out.URL = &url.URL{Scheme: "http", Host: t.worker + ".ate:" + strconv.Itoa(t.port),
				Path: pr.In.URL.Path, RawPath: pr.In.URL.RawPath, RawQuery: pr.In.URL.RawQuery}
			pr.Out.Host = pr.In.Host
			pr.Out.Header.Del(router.HeaderWorker)
			pr.Out.Header.Del(router.HeaderActorUID)
			pr.Out.Header["X-Forwarded-For"] = pr.In.Header["X-Forwarded-For"]
		},
		Transport:     tr,
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if errors.Is(err, context.Canceled) {
				return
			}
			n.log.WarnContext(r.Context(), "tunnel upstream", "worker", r.Header.Get(router.HeaderWorker), "err", err)
			http.Error(w, "actor did not answer: "+err.Error(), http.StatusBadGateway)
		},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		worker, uid := r.Header.Get(router.HeaderWorker), r.Header.Get(router.HeaderActorUID)
		have, port, _, err := n.assignment(worker)
		if err != nil || uid == "" || have != uid {
			n.log.DebugContext(r.Context(), "stale assignment", slog.String("worker", worker), slog.String("uid", uid))
			http.Error(w, "worker "+worker+" does not host this actor now", http.StatusMisdirectedRequest)
			return
		}
		ctx := context.WithValue(r.Context(), targetKey, tunnelTarget{worker: worker, port: port})
		proxy.ServeHTTP(w, r.WithContext(ctx))
	})
}
