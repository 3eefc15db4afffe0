package controller

import (
	"context"
	"testing"
	"time"

	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"substrate.dev/ate/internal/testwait"
)

// TestLeaderElection: of two controllers only the leader writes (each
// renders its own worker image, so the Deployment shows who wrote it);
// the standby answers /readyz; when the leader stops, the standby takes
// over.
func TestLeaderElection(t *testing.T) {
	ns := namespace(t)
	api := startFake(t, &fakeControl{})
	fast := func(image string) Config {
		return Config{API: api, LeaderElect: true, Workers: WorkerSettings{Image: image},
			LeaseDuration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 200 * time.Millisecond}
	}
	first := startController(t, ns, nil, fast("ate:first"))
	create(t, newPool(ns, "w", 1))
	image := func() string {
		d := deployment(t, ns, "w")
		if d == nil {
			return ""
		}
		return d.Spec.Template.Spec.Containers[0].Image
	}
	testwait.Until(t, "Deployment by the first", func() bool { return image() == "ate:first" })

	second := startController(t, ns, nil, fast("ate:second"))
	testwait.Until(t, "standby /readyz 200", func() bool { code, _ := second.readyz(t); return code == 200 })
	// A change both would act on: only the leader does.
	p := getPool(t, ns, "w")
	before := p.DeepCopy()
	p.Spec.Replicas = ptr.To[int32](4)
	if err := testEnv.Client.Patch(context.Background(), p, client.MergeFrom(before)); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "replicas 4", func() bool { return replicasOf(deployment(t, ns, "w")) == 4 })
	if got := image(); got != "ate:first" {
		t.Fatalf("the standby wrote the Deployment (image %s)", got)
	}

	first.stop() // releases the Lease
	testwait.Until(t, "the second takes over", func() bool { return image() == "ate:second" })
}
