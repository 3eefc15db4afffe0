package bench

import (
	"context"
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	"substrate.dev/ate/internal/sandbox/fake"

	"substrate.dev/ate/internal/latency"
)

// Wake-up benchmark shape: the most clients any sub-benchmark runs, and
// how many actors each client cycles through. Every client owns its
// actors and there is a worker per client, so clients never wait for one
// actor's lock or for a free worker: what is measured is the control
// plane's own throughput.
const (
	maxClients      = 64
	actorsPerClient = 2
)

// BenchmarkWakeups measures control-plane throughput with zero sandbox
// cost: each client loops ResumeActor → SuspendActor over its own actors
// through the gRPC API. One op is one wake-up (a resume and the suspend
// that frees its worker again); wakeups/s counts resumes completed per
// second of wall time across all clients, p50/p99 are ResumeActor's
// latency as the client sees it, and cycle-p50/p99 the whole resume and
// suspend.
//
// medium=disk keeps the store and the snapshots in the benchmark's temp
// dir on the machine's disk, as `ate up` does. medium=tmpfs puts them in
// /dev/shm, where fsync and file creation cost nothing: not a durable
// setup, but it shows what the control plane's own CPU allows once the
// file system is out of the way.
func BenchmarkWakeups(b *testing.B) {
	for _, medium := range []string{"disk", "tmpfs"} {
		b.Run("medium="+medium, func(b *testing.B) {
			benchWakeups(b, mediumDir(b, medium))
		})
	}
}

func benchWakeups(b *testing.B, dir string) {
	// Built by the first sub-benchmark that runs (so a -bench filter
	// that selects none builds nothing) and shared by the rest.
	var c *Cluster
	var actors []string
	defer func() {
		if c != nil {
			closeCluster(b, c)
		}
	}()
	for _, clients := range clientCounts {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			if c == nil {
				c = startCluster(b, dir, maxClients, fake.Config{})
				actors = createActors(b, c.Client, maxClients*actorsPerClient)
			}
			runWakeups(b, c, actors, clients)
		})
	}
}

// runWakeups runs b.N wake-ups spread over clients goroutines.
func runWakeups(b *testing.B, c *Cluster, actors []string, clients int) {
	ctx := context.Background()
	resumes := make([][]time.Duration, clients)
	cpu0 := processCPU(b)
	cycles, elapsed := runParallel(b, clients, func(i, n int) error {
		name := actors[i*actorsPerClient+n%actorsPerClient]
		t0 := time.Now()
		if _, err := resume(ctx, c.Client, name); err != nil {
			return err
		}
		resumes[i] = append(resumes[i], time.Since(t0))
		_, err := suspend(ctx, c.Client, name)
		return err
	})
	cpu := processCPU(b) - cpu0
	if n := c.Runtime.Len(); n != 0 {
		b.Fatalf("%d sandboxes still run after every wake-up was suspended", n)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "wakeups/s")
	b.ReportMetric(latency.Ms(cpu)/float64(b.N), "cpu-ms/wakeup")
	reportLatency(b, "", slices.Concat(resumes...))
	reportLatency(b, "cycle-", cycles)
}

// processCPU is the CPU time (user and system) this process has used.
// Per wake-up it is steadier than the rate on a shared VM, since it does
// not count time other tenants held the cores; it includes the clients'
// side of gRPC, as the rate does.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportLatency reports the p50 and p99 of lat as <prefix>p50-ms and
// <prefix>p99-ms.
func reportLatency(b *testing.B, prefix string, lat []time.Duration) {
	latency.Report(b, prefix, lat, 0.50, 0.99)
}
