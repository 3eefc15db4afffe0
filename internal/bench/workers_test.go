package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/names"
	"substrate.dev/ate/internal/sandbox/fake"
)

// workersActors is how many actors BenchmarkWorkers cycles through.
const workersActors = 8

// BenchmarkWorkers shows what the number of registered workers costs a
// resume. One op: ResumeActor of a SUSPENDED actor (timed: resume-*),
// PauseActor, ResumeActor of the PAUSED actor (timed: paused-resume-*;
// it restores on the node holding the checkpoint; that node is the
// manager's own, so its liveness costs no pass over the workers),
// SuspendActor. A claim seeks the node's free workers in the store's
// free-worker index, so neither resume should grow with the workers.
func BenchmarkWorkers(b *testing.B) {
	for _, workers := range []int{4, 64, 1024} {
		var c *Cluster
		var actors []string
		dir := b.TempDir()
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			if c == nil {
				c = startCluster(b, dir, workers, fake.Config{})
				actors = createActors(b, c.Client, workersActors)
			}
			runWorkers(b, c, actors)
		})
		if c != nil {
			closeCluster(b, c)
		}
	}
}

func runWorkers(b *testing.B, c *Cluster, actors []string) {
	ctx := context.Background()
	var resumes, pausedResumes []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		name := actors[i%len(actors)]
		t0 := time.Now()
		if _, err := resume(ctx, c.Client, name); err != nil {
			b.Fatal(err)
		}
		resumes = append(resumes, time.Since(t0))
		if _, err := c.Client.PauseActor(ctx, &atev1.PauseActorRequest{Atespace: names.DefaultAtespace, Name: name}); err != nil {
			b.Fatal(err)
		}
		t0 = time.Now()
		a, err := resume(ctx, c.Client, name)
		if err != nil {
			b.Fatal(err)
		}
		pausedResumes = append(pausedResumes, time.Since(t0))
		if a.GetMessage() != "" {
			b.Fatalf("resume of the paused actor did not use its paused checkpoint: %s", a.GetMessage())
		}
		if _, err := suspend(ctx, c.Client, name); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	reportLatency(b, "resume-", resumes)
	reportLatency(b, "paused-resume-", pausedResumes)
}
