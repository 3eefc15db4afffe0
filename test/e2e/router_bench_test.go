package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"substrate.dev/ate/internal/netns"
	"substrate.dev/ate/internal/sandbox"

	"substrate.dev/ate/internal/latency"
)

// directClient reaches the counter's server inside worker's sandbox the
// way the tunnel does, without router or tunnel: from the worker's outer
// network namespace to the sandbox's interior address.
func directClient(conns int, worker string) (*http.Client, string) {
	nsPath := netns.SlotFor(worker).DialNetNSPath
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return netns.DialContext(ctx, nsPath, network, addr)
		},
		MaxIdleConnsPerHost: conns,
		DisableCompression:  true,
	}
	return &http.Client{Transport: tr, Timeout: time.Minute}, "http://" + net.JoinHostPort(sandbox.InteriorAddr, "8080") + "/"
}

// BenchmarkRouterWarm compares requests to a RUNNING counter actor through
// the router (router → tunnel → sandbox) with requests straight to its
// sandbox, in the same run: per iteration one sequential GET each way
// (latency), then 16 concurrent clients for 3 s each way (throughput).
// Keep-alive connections both ways.
func BenchmarkRouterWarm(b *testing.B) {
	const conns, window = 16, 3 * time.Second
	in := startUp(b, 2, "--demo")
	in.mustCount("default/counter-1", 1)
	direct, directURL := directClient(conns, in.actor("counter-1").GetWorker())
	routed := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conns, DisableCompression: true}, Timeout: time.Minute}
	viaRouter := func() error { return benchGet(routed, in.routerURL()+"/", "default/counter-1") }
	viaDirect := func() error { return benchGet(direct, directURL, "") }

	var routerLat, directLat []time.Duration
	for b.Loop() {
		for _, m := range []struct {
			get func() error
			lat *[]time.Duration
		}{{viaRouter, &routerLat}, {viaDirect, &directLat}} {
			start := time.Now()
			if err := m.get(); err != nil {
				b.Fatal(err)
			}
			*m.lat = append(*m.lat, time.Since(start))
		}
	}
	b.StopTimer()
	routerRate, err := throughput(conns, window, viaRouter)
	if err != nil {
		b.Fatal(err)
	}
	directRate, err := throughput(conns, window, viaDirect)
	if err != nil {
		b.Fatal(err)
	}
	latency.Report(b, "router-", routerLat, 0.5, 0.99)
	latency.Report(b, "direct-", directLat, 0.5, 0.99)
	b.ReportMetric(latency.Ms(latency.Quantile(routerLat, 0.5)-latency.Quantile(directLat, 0.5)), "added-p50-ms")
	b.ReportMetric(routerRate, "router-req/s")
	b.ReportMetric(directRate, "direct-req/s")
	b.ReportMetric(routerRate/directRate, "throughput-ratio")
	b.ReportMetric(0, "ns/op")
}

func benchGet(c *http.Client, url, actor string) error {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if actor != "" {
		req.Header.Set("Ate-Target-Actor", actor)
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %d", url, resp.StatusCode)
	}
	return nil
}

// throughput runs get from conns goroutines for window and returns the
// completed requests per second.
func throughput(conns int, window time.Duration, get func() error) (float64, error) {
	var done atomic.Int64
	var first atomic.Pointer[error]
	deadline := time.Now().Add(window)
	var wg sync.WaitGroup
	for range conns {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				if err := get(); err != nil {
					first.CompareAndSwap(nil, &err)
					return
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	if err := first.Load(); err != nil {
		return 0, *err
	}
	return float64(done.Load()) / window.Seconds(), nil
}

// BenchmarkRouterParkedMemory measures what a parked request costs the
// `ate up` process: its resident memory with 2000 requests parked (the
// only worker busy) minus before, per request. Each iteration parks a
// fresh lot and then frees the worker so all are served.
func BenchmarkRouterParkedMemory(b *testing.B) {
	const n = 2000
	in := startUp(b, 1, "--park-budget", "5m")
	// "busy" must keep the only worker until the test frees it.
	in.pinnedCounterTemplate("counter")
	for _, name := range []string{"busy", "waiter"} {
		in.ate("create", "actor", name, "--template", "counter")
	}
	in.mustCount("default/waiter", 1) // restored once, so its first resume is not measured cold
	pid := in.pid()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: n}, Timeout: 10 * time.Minute}
	var perReq []float64
	round := 0
	for b.Loop() {
		b.StopTimer()
		round++
		in.suspend("waiter")
		in.mustCount("default/busy", round) // the only worker is busy
		before := rssKiB(b, pid)
		b.StartTimer()
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for range n {
			wg.Go(func() {
				if err := benchGet(client, in.routerURL()+"/", "default/waiter"); err != nil {
					errs <- err
				}
			})
		}
		waitFor(b, "all requests parked", 2*time.Minute, func() bool { return in.parkedLogged(n) == round })
		perReq = append(perReq, float64(rssKiB(b, pid)-before)/n)
		in.suspend("busy")
		wg.Wait()
		close(errs)
		for err := range errs {
			b.Fatal(err)
		}
	}
	b.ReportMetric(slices.Max(perReq), "KiB/parked-req")
	b.ReportMetric(0, "ns/op")
}

// rssKiB reads the resident set size of process pid.
func rssKiB(b *testing.B, pid int) int {
	b.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kib, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			if err != nil {
				b.Fatal(err)
			}
			return kib
		}
	}
	b.Fatal("no VmRSS in /proc/pid/status")
	return 0
}
