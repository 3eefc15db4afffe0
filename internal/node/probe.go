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
// probe after boot or restore. A cold Python interpreter took 10.9 s on
// these machines (shared/notes/gvisor-on-these-machines.md, item 13).
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
	rctx, cancel := context.WithTimeout(context.WithValue(ctx, targetKey, t), 2*time.Second)
	defer cancel()
	// path may carry a query: append it, do not set it as URL.Path.
	path = cmp.Or(path, "/")
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, t.url().String()+path, nil)
	if err != nil {
		return err
	}
	req.Host = sandbox.InteriorAddr
	resp, err := n.conns.RoundTrip(req)
	if err != nil {
		return err
	}
	// Read to the end (within reason) so the connection can be reused.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	_ = resp.Body.Close()
	if resp.StatusCode >= 400 {
		return fmt.Errorf("probe GET %s answered %d", path, resp.StatusCode)
	}
	return nil
}
