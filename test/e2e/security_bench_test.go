package e2e

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"substrate.dev/ate/internal/latency"
)

// BenchmarkSecurityOverhead measures what issue 18's checks add on the
// request path, in one run: the same cluster (API server, one node of one
// worker, router, as separate processes over a loopback SeaweedFS) started
// three ways, each measured on warm requests and on activations
// (suspended → first byte, resumed on the node that suspended it, after
// an untimed suspend that waits for the worker's standby):
//
//   - insecure: every component --insecure (plaintext, no tokens): the
//     baseline, as before issue 18;
//   - mtls: certificates from `ate certs` on every connection (router →
//     API server, API server ⇄ node, router → worker tunnel) and the
//     router's calls authorised by its certificate identity;
//   - mtls+ingress-token: as mtls, and the template's ingress policy is
//     "token": every request carries an ingress token the router checks
//     (ReviewIngressToken, cached 10 s) before it proxies or resumes.
//
// A warm request crosses the router and the tunnel's TLS connection
// (kept alive); an activation adds the router's GetActor/ResumeActor
// over mTLS with the interceptor's checks, and the API server's calls to
// the node. Reported: p50/p95/p99 per case; the difference between the
// cases is the overhead (BENCHMARKS.md).
func BenchmarkSecurityOverhead(b *testing.B) {
	for _, mode := range []struct {
		name              string
		insecure, ingress bool
	}{
		{"insecure", true, false},
		{"mtls", false, false},
		{"mtls+ingress-token", false, true},
	} {
		b.Run(mode.name, func(b *testing.B) {
			c := startClusterWith(b, clusterOptions{timing: clusterTiming, insecure: mode.insecure}, "node-a")
			extra, bearer := "", ""
			if mode.ingress {
				extra = "ingress: {policy: token}\n"
			}
			c.in.counterTemplate("sec", nil, extra)
			c.in.ate("create", "actor", "bench", "--template", "sec")
			if mode.ingress {
				bearer = lastLine(c.in.ate("create", "ingresstoken", "bench"))
			}
			get := func(b *testing.B) {
				req := c.in.newRequest(context.Background(), http.MethodGet, "default/bench", "/", nil)
				if bearer != "" {
					req.Header.Set("Authorization", "Bearer "+bearer)
				}
				resp, err := httpClient.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != http.StatusOK {
					b.Fatalf("GET = %d %q %v", resp.StatusCode, body, err)
				}
			}
			get(b) // the first start, and the ingress review cached
			b.Run("warm", func(b *testing.B) {
				var lat []time.Duration
				for b.Loop() {
					start := time.Now()
					get(b)
					lat = append(lat, time.Since(start))
				}
				latency.Report(b, "", lat, 0.50, 0.95, 0.99)
				b.ReportMetric(0, "ns/op")
			})
			b.Run("activation", func(b *testing.B) {
				var lat []time.Duration
				for b.Loop() {
					b.StopTimer()
					want := c.nodes["node-a"].records("standby prepared") + 1
					c.in.suspend("bench")
					waitFor(b, "standby on node-a", 30*time.Second, func() bool { return c.nodes["node-a"].records("standby prepared") >= want })
					b.StartTimer()
					start := time.Now()
					get(b)
					lat = append(lat, time.Since(start))
				}
				latency.Report(b, "", lat, 0.50, 0.95, 0.99)
				b.ReportMetric(0, "ns/op")
			})
		})
	}
}
