package e2e

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// TestClusterObservability: with `ate apiserver`, `ate node` and `ate
// router` as separate processes, each serves /metrics on its
// --management-addr, the counters of a resume and a suspend move there
// by exactly one (the node's starts on the node, the lifecycle's on the
// API server, the router's on the router), and the activation is one
// trace across the three processes: the node's restore hangs on the API
// server's NodeAgent call.
func TestClusterObservability(t *testing.T) {
	recv := startOTLPReceiver(t)
	dir := t.TempDir()
	// A local directory both the API server and the node use as the
	// durable snapshot store: one machine, no S3 needed.
	snaps := filepath.Join(dir, "snapshots")
	apiMgmt, nodeMgmt, routerMgmt := freeAddr(t), freeAddr(t), freeAddr(t)
	_, fields := startComponent(t, "apiserver", "ate apiserver ready", "apiserver", "--data-dir", filepath.Join(dir, "api"),
		"--listen", "127.0.0.1:0", "--snapshots", snaps, "--management-addr", apiMgmt, "--log-level", "debug")
	apiAddr := fields["api"].(string)
	c := &cluster{t: t, dir: dir, snaps: snaps, nodes: map[string]*component{}}
	c.startNode("node-a", apiAddr, "--management-addr", nodeMgmt)
	router, fields := startComponent(t, "router", "ate router ready", "router", "--api", apiAddr, "--listen", "127.0.0.1:0",
		"--drain-delay", "0s", "--management-addr", routerMgmt, "--log-level", "debug")
	in := clusterInstallation(t, dir, apiAddr, fields["router"].(string))
	in.createTemplate("examples/counter/template.yaml", "counter")
	in.ate("create", "actor", "counter-1", "--template", "counter")
	scrapeAll := func() (api, node, rt map[string]*dto.MetricFamily) {
		for _, x := range []struct {
			addr string
			out  *map[string]*dto.MetricFamily
		}{{apiMgmt, &api}, {nodeMgmt, &node}, {routerMgmt, &rt}} {
			in.metricsAddr = x.addr
			*x.out = in.scrape()
		}
		return api, node, rt
	}
	api0, node0, rt0 := scrapeAll()
	in.mustCount("default/counter-1", 1)
	in.ate("suspend", "actor", "counter-1")
	api1, node1, rt1 := scrapeAll()

	for _, c := range []struct {
		where         string
		before, after map[string]*dto.MetricFamily
		name          string
		labels        map[string]string
		delta         float64
	}{
		{"apiserver", api0, api1, "ate_lifecycle_resumes_total", map[string]string{"source": "golden", "outcome": "ok"}, 1},
		{"apiserver", api0, api1, "ate_lifecycle_resumes_total", nil, 1},
		{"apiserver", api0, api1, "ate_lifecycle_checkpoints_total", map[string]string{"action": "suspend", "outcome": "ok"}, 1},
		{"apiserver", api0, api1, "grpc_server_handled_total", map[string]string{"grpc_method": "ResumeActor", "grpc_code": "OK"}, 1},
		{"apiserver", api0, api1, "grpc_client_handled_total", map[string]string{"grpc_method": "StartActor", "grpc_code": "OK"}, 1},
		{"node", node0, node1, "ate_node_start_seconds", map[string]string{"kind": "restore", "outcome": "ok"}, 1},
		{"node", node0, node1, "ate_node_checkpoint_seconds", map[string]string{"outcome": "ok"}, 1},
		{"node", node0, node1, "grpc_server_handled_total", map[string]string{"grpc_method": "StartActor", "grpc_code": "OK"}, 1},
		{"router", rt0, rt1, "ate_router_requests_total", map[string]string{"activation": "resumed", "code": "2xx"}, 1},
		{"router", rt0, rt1, "ate_router_park_outcomes_total", map[string]string{"outcome": "resumed"}, 1},
		{"router", rt0, rt1, "grpc_client_handled_total", map[string]string{"grpc_method": "ResumeActor", "grpc_code": "OK"}, 1},
	} {
		b, _ := sum(t, c.before, c.name, c.labels)
		a := sample(t, c.after, c.name, c.labels)
		if a-b != c.delta {
			t.Errorf("%s: %s%v moved by %g (%g → %g), want %g", c.where, c.name, c.labels, a-b, b, a, c.delta)
		}
	}

	var traceID string
	waitFor(t, "the router's access line of the resume", 10*time.Second, func() bool {
		for _, rec := range componentRecords(router, "request") {
			if rec["activation"] == "resumed" {
				traceID, _ = rec["trace_id"].(string)
				return true
			}
		}
		return false
	})
	var start, agent, restore bool
	waitFor(t, "the node's spans in the router's trace", 15*time.Second, func() bool {
		spans := recv.trace(traceID)
		byID := map[string]string{}
		for _, s := range spans {
			byID[string(s.GetSpanId())] = s.GetName()
		}
		for _, s := range spans {
			switch s.GetName() {
			case "ate.v1.NodeAgent/StartActor":
				agent = true
			case "node.start":
				start = byID[string(s.GetParentSpanId())] == "ate.v1.NodeAgent/StartActor"
			case "node.restore":
				restore = byID[string(s.GetParentSpanId())] == "node.start"
			}
		}
		return agent && start && restore
	})
}

// componentRecords returns c's log records whose msg is msg.
func componentRecords(c *component, msg string) []map[string]any {
	var out []map[string]any
	for line := range strings.Lines(c.logText()) {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] == msg {
			out = append(out, rec)
		}
	}
	return out
}
