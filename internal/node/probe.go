package node

import (
	"context"
	"fmt"
	"io"
	"net"
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
func (n *Node) probe(ctx context.Context, sb sandbox.Slot, spec *atev1.ActorTemplateSpec, port int) error {
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
		check = func() error { return n.httpProbe(ctx, sb, get) }
	}
	wait := 2 * time.Millisecond
	for {
		err := check()
		if err == nil {
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

func (n *Node) httpProbe(ctx context.Context, sb sandbox.Slot, get *atev1.HTTPGetAction) error {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return n.cfg.Runtime.DialContext(ctx, sb, int(get.GetPort()))
		},
		DisableKeepAlives: true,
	}
	defer tr.CloseIdleConnections()
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	path := get.GetPath()
	if path == "" {
		path = "/"
	}
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, "http://"+sandbox.InteriorAddr+path, nil)
	if err != nil {
		return err
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	_ = resp.Body.Close()
	if resp.StatusCode >= 400 {
		return fmt.Errorf("probe GET %s answered %d", path, resp.StatusCode)
	}
	return nil
}
