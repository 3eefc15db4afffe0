package node

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync"
	"syscall"
	"time"

	"substrate.dev/ate/internal/httpserve"
	"substrate.dev/ate/internal/sandbox"
	"substrate.dev/ate/internal/tunnelproto"
)

type ctxKey int

const targetKey ctxKey = iota

// tunnelTarget is one admitted request's destination: the container, not
// just the worker, so a pooled connection never outlives the sandbox it
// was made to.
type tunnelTarget struct {
	worker    string
	container string
	port      int
	sb        sandbox.Slot
}

// url is where requests to t go. Its host only keys the connection pool
// (newSandboxTransport): one pool per container and port, never shared
// across sandboxes.
func (t tunnelTarget) url() *url.URL {
	return &url.URL{Scheme: "http", Host: t.container + ".ate:" + strconv.Itoa(t.port)}
}

// newSandboxTransport returns the client side of every HTTP connection
// into this node's sandboxes: the tunnel's requests and the wakeup probe
// share it, so the first request after a start or restore reuses the
// connection the probe opened and warmed (a fresh connection into a
// restored sandbox costs a dial and a slow first answer: BENCHMARKS.md,
// Activation latency). Each request's context carries its tunnelTarget.
func (n *Node) newSandboxTransport() *http.Transport {
	return &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			t := ctx.Value(targetKey).(tunnelTarget)
			c, err := n.cfg.Runtime.DialContext(ctx, t.sb, t.port)
			if err != nil {
				return nil, err
			}
			return n.open.add(t.container, c), nil
		},
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     30 * time.Second,
	}
}

// openConns is every open connection into each container, so that those
// of a container that is gone are closed at once: the pool would never
// reuse them (its key names the container), only keep them until
// IdleConnTimeout, and a node starting thousands of containers a minute
// would pile them up.
type openConns struct{ keyedSet[*trackedConn] }

type trackedConn struct {
	net.Conn
	once      sync.Once
	container string
	open      *openConns
}

func (c *trackedConn) Close() error {
	c.once.Do(func() { c.open.remove(c.container, c) })
	return c.Conn.Close()
}

func (o *openConns) add(container string, c net.Conn) net.Conn {
	tc := &trackedConn{Conn: c, container: container, open: o}
	o.keyedSet.add(container, tc)
	return tc
}

// closeAll closes every connection into container.
func (o *openConns) closeAll(container string) {
	for _, c := range o.take(container) {
		_ = c.Close()
	}
}

// NewTunnel returns the worker tunnel: an HTTP handler that forwards each
// request to the sandbox of the worker named in tunnelproto.HeaderWorker,
// but only if that worker hosts the actor incarnation named by
// tunnelproto.HeaderActorUID; otherwise it answers tunnelproto.StatusStale
// (421) so the router re-resolves. Both headers are removed before
// forwarding. The protocol is tunnelproto's package doc.
//
// Bodies stream both ways at once (full duplex) and upgrades (WebSocket)
// pass through. A request still running when a checkpoint's drain grace
// runs out, or when its container is gone, is cut (cut.go): a stream or
// WebSocket to a sandbox that no longer answers would otherwise hang, as
// nothing answers at its address to reset the connection.
func (n *Node) NewTunnel() http.Handler {
	cuts := newCutter(n)
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			t := pr.In.Context().Value(targetKey).(tunnelTarget)
			pr.Out.URL = t.url()
			pr.Out.URL.Path, pr.Out.URL.RawPath, pr.Out.URL.RawQuery = pr.In.URL.Path, pr.In.URL.RawPath, pr.In.URL.RawQuery
			pr.Out.Host = pr.In.Host
			pr.Out.Header.Del(tunnelproto.HeaderWorker)
			pr.Out.Header.Del(tunnelproto.HeaderActorUID)
			pr.Out.Header.Del(tunnelproto.HeaderAssignment)
			pr.Out.Header["X-Forwarded-For"] = pr.In.Header["X-Forwarded-For"]
		},
		Transport:  n.conns,
		BufferPool: httpserve.NewBufferPool(),
		// Without it a stream cut mid-body (errCut, the router going
		// away) writes a plain-text "httputil: ReverseProxy read error"
		// line into the structured log. Debug: ErrorHandler logs every
		// failure that costs the client an answer; a cut body is the
		// cutter's or the client's doing.
		ErrorLog: slog.NewLogLogger(n.log.Handler(), slog.LevelDebug),
		// FlushInterval 0 flushes streams (no Content-Length, or
		// text/event-stream) on every write, and buffers the rest.

		// The markers are the tunnel's alone: an actor sending the error
		// marker would have its own answer replaced by the router's
		// error, and one answering 421 with the not-serving mark would
		// make routers park the requests of every actor on this node.
		ModifyResponse: func(resp *http.Response) error {
			resp.Header.Del(tunnelproto.HeaderError)
			resp.Header.Del(tunnelproto.HeaderNotServing)
			// Admission checked the lease, but the actor may have
			// computed this answer after it ran out: a slow handler, or
			// a node that stood still between the two. By then a
			// replica may have declared the node lost and restored the
			// actor elsewhere, so the answer would come from a copy
			// that is being abandoned (docs/ha.md, "The node counts
			// its own lease").
			if !n.Serving() {
				return errPastLease // the proxy closes the body
			}
			if rwc, ok := resp.Body.(io.ReadWriteCloser); ok && resp.StatusCode == http.StatusSwitchingProtocols {
				// An upgraded connection (WebSocket): the proxy needs
				// its body to stay writable.
				resp.Body = &servingConn{ReadWriteCloser: rwc, serving: n.Serving}
			} else {
				resp.Body = &servingBody{ReadCloser: resp.Body, serving: n.Serving}
			}
			if le, ok := resp.Request.Context().Value(listenKey).(*listenEnd); ok {
				resp.Body = le.wrap(resp.Body)
			}
			return nil
		},
		// The answer names no cause: err carries interior addresses,
		// the worker's namespace and the runtime's words, and the
		// answer may reach anonymous clients. The cause is logged here
		// with the router's request id; the router replaces the
		// marked answer with its own (tunnelproto.WriteError).
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if errors.Is(err, errPastLease) {
				// As for a request refused at admission past the
				// lease: the router parks it and looks again (it
				// replays only what is safe to replay; the actor may
				// have counted this one).
				n.log.InfoContext(r.Context(), "answer withheld: the actor gave it after this node's lease ran out",
					"worker", r.Context().Value(targetKey).(tunnelTarget).worker, "request_id", r.Header.Get(tunnelproto.HeaderRequestID))
				w.Header().Set(tunnelproto.HeaderNotServing, "1")
				http.Error(w, "this node's lease ran out before the actor answered", tunnelproto.StatusStale)
				return
			}
			if errors.Is(context.Cause(r.Context()), errListenEnded) {
				// A checkpoint drained the worker before the actor
				// answered this listening stream: the actor's answer
				// would have been ended at once anyway, so the router
				// resolves the actor again, as for any request the
				// draining tunnel refused.
				http.Error(w, "worker "+r.Header.Get(tunnelproto.HeaderWorker)+" is draining", tunnelproto.StatusStale)
				return
			}
			cut := errors.Is(context.Cause(r.Context()), errCut)
			if errors.Is(err, context.Canceled) && !cut {
				return // the router gave up on the request
			}
			t := r.Context().Value(targetKey).(tunnelTarget)
			worker, rid := t.worker, r.Header.Get(tunnelproto.HeaderRequestID)
			if now, cutOff := n.cutState(worker); cut || cutOff || now != t.container {
				// A checkpoint ended the request after its drain grace,
				// or the container is gone (a dial into a dead sandbox
				// is refused, which is not the app's fault): the actor
				// will be back, so the router says when to retry.
				n.log.InfoContext(r.Context(), "tunnel request cut", "worker", worker, "request_id", rid, "err", err)
				tunnelproto.WriteError(w, tunnelproto.KindCut)
				return
			}
			kind := tunnelproto.KindUpstream
			if errors.Is(err, syscall.ECONNREFUSED) {
				kind = tunnelproto.KindRefused // nothing listens on the actor's port
			}
			n.log.WarnContext(r.Context(), "tunnel upstream", "worker", worker, "request_id", rid, "kind", kind, "err", err)
			tunnelproto.WriteError(w, kind)
		},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		worker, uid := r.Header.Get(tunnelproto.HeaderWorker), r.Header.Get(tunnelproto.HeaderActorUID)
		t, ending, release, ok := n.enter(worker, uid, r)
		if !ok {
			if !n.Serving() {
				w.Header().Set(tunnelproto.HeaderNotServing, "1")
			}
			n.log.DebugContext(r.Context(), "stale assignment", slog.String("worker", worker), slog.String("uid", uid))
			http.Error(w, "worker "+worker+" does not host this actor now", tunnelproto.StatusStale)
			return
		}
		defer release()
		if r.ProtoMajor == 1 && http.NewResponseController(w).EnableFullDuplex() == nil {
			// Stream the body to the actor while its answer streams
			// back. Closing it before returning works around
			// golang/go#68560 (an unread body drained after the
			// handler races the next request's read).
			defer r.Body.Close()
		}
		ctx, cancel := context.WithCancelCause(context.WithValue(r.Context(), targetKey, t))
		defer cancel(nil)
		defer cuts.track(t, cancel)()
		if ending != nil {
			le := &listenEnd{cancel: cancel, metrics: n.cfg.Metrics}
			ctx = context.WithValue(ctx, listenKey, le)
			go le.watch(ctx, ending)
		}
		proxy.ServeHTTP(w, r.WithContext(ctx))
	})
}

// errPastLease: the actor answered after the node stopped serving.
var errPastLease = errors.New("the actor answered after this node's lease ran out")

// servingBody is a response body that ends with errPastLease instead of
// passing on what the actor sends once the node no longer serves: a
// stream's later bytes are computed then, possibly by a copy that a
// restore elsewhere has replaced.
type servingBody struct {
	io.ReadCloser
	serving func() bool
}

func (b *servingBody) Read(p []byte) (int, error) { return readServing(b.ReadCloser, p, b.serving) }

// servingConn is servingBody for an upgraded connection: what the actor
// sends stops there too; what the client sends is passed on, to a copy
// whose answers no longer reach anyone.
type servingConn struct {
	io.ReadWriteCloser
	serving func() bool
}

func (c *servingConn) Read(p []byte) (int, error) {
	return readServing(c.ReadWriteCloser, p, c.serving)
}

// readServing reads from r into p, unless the node no longer serves
// once the read returns.
func readServing(r io.Reader, p []byte, serving func() bool) (int, error) {
	n, err := r.Read(p)
	if n > 0 && !serving() {
		return 0, errPastLease
	}
	return n, err
}
