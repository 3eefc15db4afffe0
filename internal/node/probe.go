package node

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/sandbox"
)

// DefaultProbeTimeout bounds how long a sandbox may take to pass its wakeup
// probe after boot or restore: generous, since a cold boot of an
// interpreted runtime under gVisor can take many seconds.
const DefaultProbeTimeout = 60 * time.Second

// probe waits until the wakeup probe passes: an HTTP GET answering 2xx or
// 3xx, or, for templates without one, a TCP connect to the traffic port.
// It polls with a short, growing interval since a restored server usually
// answers at once and a booting one within seconds.
//
// An HTTP probe goes through the node's pooled sandbox connections
// (tunnel.go), so the actor's first request reuses its connection.
func (n *Node) probe(ctx context.Context, sb sandbox.Slot, container string, spec *atev1.ActorTemplateSpec, port int) error {
	p := spec.GetWakeupProbe()
	timeout := DefaultProbeTimeout
	if s := p.GetTimeoutSeconds(); s > 0 {
		timeout = time.Duration(s) * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	check := func() error {
		conn, err := n.cfg.Runtime.DialContext(ctx, sb, port)
		if err != nil {
			return err
		}
		return conn.Close()
	}
	if get := p.GetHttpGet(); get != nil {
		t := tunnelTarget{worker: sb.Name, container: container, port: int(get.GetPort()), sb: sb}
		check = func() error { return n.httpProbe(ctx, t, get.GetPath()) }
	}
	wait := 2 * time.Millisecond
	start := time.Now()
	for attempt := 1; ; attempt++ {
		err := check()
		if err == nil {
			n.log.DebugContext(ctx, "wakeup probe passed", "worker", sb.Name, "attempts", attempt, "duration", time.Since(start))
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wakeup probe did not pass within %s: %w", timeout, err)
		case <-time.After(wait):
		}
		wait = min(wait*2, 100*time.Millisecond)
	}
}

func (n *Node) httpProbe(ctx context.Context, t tunnelTarget, path string) error {
	path = cmp.Or(path, "/")
	code, err := n.sandboxRequest(ctx, t, http.MethodGet, path, 2*time.Second)
	if err != nil {
		return err
	}
	if code >= 400 {
		return fmt.Errorf("probe GET %s answered %d", path, code)
	}
	return nil
}

// sandboxRequest sends one request with an empty body to path (which may
// carry a query) in t's container through the node's pooled sandbox
// connections, bounded by timeout, and returns the status code. The body
// is read (up to 4 KiB) and dropped, so the connection can be reused.
func (n *Node) sandboxRequest(ctx context.Context, t tunnelTarget, method, path string, timeout time.Duration) (int, error) {
	rctx, cancel := context.WithTimeout(context.WithValue(ctx, targetKey, t), timeout)
	defer cancel()
	// path may carry a query: append it, do not set it as URL.Path.
	req, err := http.NewRequestWithContext(rctx, method, t.url().String()+path, http.NoBody)
	if err != nil {
		return 0, err
	}
	req.Host = sandbox.InteriorAddr
	resp, err := n.conns.RoundTrip(req)
	if err != nil {
		if rctx.Err() != nil && ctx.Err() == nil {
			return 0, fmt.Errorf("no answer within %s: %w", timeout, err)
		}
		return 0, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

// DefaultRestoreHookTimeout bounds a template's onRestore call when its
// timeoutSeconds is 0.
const DefaultRestoreHookTimeout = 5 * time.Second

// restoreHook calls req's onRestore hook, if its template has one, in
// container: POST <path> with an empty body to its port, through the same
// pooled sandbox connections as the wakeup probe, bounded by the hook's
// timeoutSeconds (DefaultRestoreHookTimeout when 0). It is made after the
// probe passed and before any request is let in, so the workload can
// reseed what the snapshot copied. A transport error, the timeout or any
// answer but 2xx fails it with "onRestore hook POST <path> on port
// <port>: <what>"; the start then fails, and the lifecycle puts the actor
// back where it was.
func (n *Node) restoreHook(ctx context.Context, sb sandbox.Slot, container string, req StartRequest) error {
	hook := req.Spec.GetOnRestore()
	post := hook.GetHttpPost()
	if post == nil {
		return nil
	}
	timeout := DefaultRestoreHookTimeout
	if s := hook.GetTimeoutSeconds(); s > 0 {
		timeout = time.Duration(s) * time.Second
	}
	path, port := cmp.Or(post.GetPath(), "/"), int(post.GetPort())
	t := tunnelTarget{worker: sb.Name, container: container, port: port, sb: sb}
	start := time.Now()
	code, err := n.sandboxRequest(ctx, t, http.MethodPost, path, timeout)
	if err == nil && (code < 200 || code > 299) {
		err = fmt.Errorf("answered %d, want 2xx", code)
	}
	if err != nil {
		return fmt.Errorf("onRestore hook POST %s on port %d: %w", path, port, err)
	}
	n.log.InfoContext(ctx, "restore hook answered", "actor", req.Key(), "worker", sb.Name,
		"container", container, "path", path, "port", port, "status", code, "duration", time.Since(start))
	return nil
}
