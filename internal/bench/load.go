package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/apiserver"
	"substrate.dev/ate/internal/image"
	"substrate.dev/ate/internal/names"
	"substrate.dev/ate/internal/store"
	"substrate.dev/ate/internal/store/bolt"
	"substrate.dev/ate/internal/up"
)

// Port is the traffic and probe port of the benchmark template; the fake
// sandbox serves $PORT, default 8080, like examples/counter.
const Port = 8080

// templatePoll is how often WaitTemplateReady asks for the template's
// phase; a golden build over the fake sandbox takes a few milliseconds.
const templatePoll = 5 * time.Millisecond

// PackImage writes a tiny single-file OCI image layout into dir (which
// must not exist or be an earlier layout) and returns its reference. The
// fake sandbox ignores the root filesystem and entrypoint, but the node
// unpacks and pins the image on every start exactly as for runsc.
func PackImage(ctx context.Context, dir string) (string, error) {
	src := filepath.Join(filepath.Dir(dir), filepath.Base(dir)+"-src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return "", fmt.Errorf("pack image: %w", err)
	}
	defer os.RemoveAll(src)
	if err := os.WriteFile(filepath.Join(src, "counter"), []byte("#!/bin/false\n"), 0o755); err != nil {
		return "", fmt.Errorf("pack image: %w", err)
	}
	err := image.Pack(ctx, image.PackOptions{Out: dir, Sources: []image.PackSource{{Src: src, Dest: "/"}},
		Entrypoint: []string{"/counter"}, ExposedPorts: []int{Port}, Compression: image.CompressionNone})
	if err != nil {
		return "", err
	}
	return "oci:" + dir, nil
}

// TemplateSpec is the counter template of examples/counter/template.yaml
// over imageRef.
func TemplateSpec(imageRef string) *atev1.ActorTemplateSpec {
	return &atev1.ActorTemplateSpec{
		Containers:  []*atev1.ContainerSpec{{Name: "counter", Image: imageRef, Ports: []int32{Port}}},
		WakeupProbe: &atev1.Probe{HttpGet: &atev1.HTTPGetAction{Path: "/healthz", Port: Port}},
		NewActors:   "golden",
	}
}

// CreateTemplate creates template name in the default atespace through the
// API and waits until its golden snapshot is built.
func CreateTemplate(ctx context.Context, c atev1.ControlClient, name, imageRef string) error {
	_, err := c.CreateActorTemplate(ctx, &atev1.CreateActorTemplateRequest{Template: &atev1.ActorTemplate{
		Atespace: names.DefaultAtespace, Name: name, Spec: TemplateSpec(imageRef)}})
	if err != nil {
		return fmt.Errorf("create template %s: %w", name, err)
	}
	return WaitTemplateReady(ctx, c, name)
}

// WaitTemplateReady polls template name (default atespace) until its
// golden snapshot is READY, its build FAILED, or ctx ends.
func WaitTemplateReady(ctx context.Context, c atev1.ControlClient, name string) error {
	tick := time.NewTicker(templatePoll)
	defer tick.Stop()
	for {
		t, err := c.GetActorTemplate(ctx, &atev1.GetActorTemplateRequest{Atespace: names.DefaultAtespace, Name: name})
		if err != nil {
			return fmt.Errorf("template %s: %w", name, err)
		}
		switch t.GetStatus().PhaseOrName() {
		case atev1.ActorTemplateStatus_READY:
			return nil
		case atev1.ActorTemplateStatus_FAILED:
			return fmt.Errorf("template %s: golden build failed: %s", name, t.GetStatus().GetMessage())
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("template %s not ready: %w", name, ctx.Err())
		case <-tick.C:
		}
	}
}

// ActorName is the name Preload gives actor i; names sort in i's order.
func ActorName(i int) string { return fmt.Sprintf("actor-%07d", i) }

// PreloadConfig says what Preload writes.
type PreloadConfig struct {
	// Dir is the data directory the store file ends up in (as up.DBName).
	Dir string
	// StageDir, if set, is where the file is filled before it is copied
	// into Dir: on a tmpfs (/dev/shm) each of the n transactions skips
	// its two fsyncs, which otherwise bound creation on disk
	// (BENCHMARKS.md, Control plane: Stored actors).
	StageDir string
	// Template is created in the default atespace, BUILDING, from
	// TemplateSpec(ImageRef): the Cluster started over the file builds
	// its golden snapshot in Recover, as after a restart.
	Template string
	ImageRef string
	// Actors is how many actors (ActorName(0..Actors-1)) to create;
	// Parallel is how many goroutines call CreateActor.
	Actors, Parallel int
}

// PreloadStats describes a Preload.
type PreloadStats struct {
	// Create is the time the Actors CreateActor calls took.
	Create time.Duration
	// Copy is the time moving the file into Dir took (with its fsync).
	Copy time.Duration
}

// Preload writes a store file holding the default atespace, one template
// and cfg.Actors SUSPENDED actors, through the store API (one
// store.CreateActor transaction per actor, as the API server makes them),
// for a Cluster to start over. Dir must not hold a store file yet.
func Preload(ctx context.Context, cfg PreloadConfig) (PreloadStats, error) {
	var stats PreloadStats
	dst := filepath.Join(cfg.Dir, up.DBName)
	if _, err := os.Stat(dst); err == nil {
		return stats, fmt.Errorf("preload: %s exists", dst)
	}
	path := dst
	if cfg.StageDir != "" {
		path = filepath.Join(cfg.StageDir, up.DBName)
	}
	st, err := bolt.Open(path, 5*time.Second)
	if err != nil {
		return stats, err
	}
	start := time.Now()
	err = fill(ctx, st, cfg)
	stats.Create = time.Since(start)
	if cerr := st.Close(); err == nil {
		err = cerr
	}
	if err != nil || path == dst {
		return stats, err
	}
	start = time.Now()
	err = copyFile(dst, path)
	stats.Copy = time.Since(start)
	return stats, errors.Join(err, os.Remove(path))
}

func fill(ctx context.Context, st store.Store, cfg PreloadConfig) error {
	if err := apiserver.EnsureDefaultAtespace(ctx, st); err != nil {
		return err
	}
	now := time.Now().UTC()
	err := st.CreateTemplate(ctx, &store.Template{Atespace: names.DefaultAtespace, Name: cfg.Template,
		UID: apiserver.NewUID(), Spec: TemplateSpec(cfg.ImageRef), CreateTime: now, Phase: store.TemplateBuilding})
	if err != nil {
		return err
	}
	var next atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	for range max(cfg.Parallel, 1) {
		g.Go(func() error {
			for {
				i := int(next.Add(1)) - 1
				if i >= cfg.Actors || gctx.Err() != nil {
					return nil
				}
				a := &store.Actor{Atespace: names.DefaultAtespace, Name: ActorName(i), UID: apiserver.NewUID(),
					Template: cfg.Template, Lifecycle: store.Lifecycle{State: store.Suspended}, CreateTime: now, StateTime: now}
				if err := st.CreateActor(gctx, a); err != nil {
					return fmt.Errorf("create %s: %w", a.Name, err)
				}
			}
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	return ctx.Err()
}

// copyFile copies src to a new file dst and makes it durable.
func copyFile(dst, src string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copy store file: %w", err)
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
