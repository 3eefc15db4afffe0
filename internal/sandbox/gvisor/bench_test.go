package gvisor

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"substrate.dev/ate/internal/sandbox"

	"substrate.dev/ate/internal/latency"
)

// BenchmarkColdBoot measures `runsc run` of the counter until its first
// HTTP answer: what an activation costs without any snapshot.
func BenchmarkColdBoot(b *testing.B) {
	for _, v := range []struct {
		name          string
		prepared, cli bool
	}{
		{"run", false, false},
		{"prepared", true, false},
		{"prepared-cli", true, true},
	} {
		b.Run(v.name, func(b *testing.B) {
			r := newRuntimeWith(b, Config{ForceCLI: v.cli})
			measureStarts(b, r, newSlot(b), v.prepared, func(slot sandbox.Slot, spec sandbox.Spec) error {
				return r.Run(b.Context(), slot, spec)
			})
		})
	}
}

// BenchmarkRestore measures `runsc restore` of one checkpoint of the
// counter until its first HTTP answer: the sandbox's floor under every
// activation from a snapshot; and, as python-<N>MB/<variant>, of
// python-notes holding N MiB of live state under each image variant
// (benchPythonRestore).
func BenchmarkRestore(b *testing.B) {
	for _, v := range []struct {
		name          string
		img           ImageOptions
		prepared, cli bool
	}{
		{"default", ImageOptions{}, false, false},
		{"prepared", ImageOptions{}, true, false},
		{"prepared-cli", ImageOptions{}, true, true},
		{"prepared-background", ImageOptions{Background: true}, true, false},
		{"compressed", ImageOptions{Compress: true}, false, false},
		{"zero-pages-excluded", ImageOptions{ExcludeZeroPages: true}, false, false},
	} {
		b.Run(v.name, func(b *testing.B) {
			cfg := debugConfig(Config{Images: v.img, ForceCLI: v.cli})
			benchRestore(b, newRuntimeWith(b, cfg), v.prepared)
		})
	}
	for _, mb := range pythonStateSizes() {
		for _, v := range pythonVariants(mb) {
			b.Run(fmt.Sprintf("python-%dMB/%s", mb, v.name), func(b *testing.B) {
				benchPythonRestore(b, mb, v)
			})
		}
	}
}

func benchRestore(b *testing.B, r *Runtime, prepared bool) {
	slot := newSlot(b)
	spec := newSpec(b, r)
	runReady(b, r, slot, spec)
	img := checkpoint(b, r, slot, spec.ID)
	size := float64(dirBytes(b, img)) / (1 << 20)
	measureStarts(b, r, slot, prepared, func(slot sandbox.Slot, spec sandbox.Spec) error {
		return r.Restore(b.Context(), slot, spec, img)
	})
	b.ReportMetric(size, "image-MiB")
}

// measureStarts times start (a run or a restore of a fresh spec) until
// the counter answers, once per iteration, and reports percentiles; the
// container is destroyed untimed after each. With prepared, each spec is
// first created untimed (Runtime.Prepare), as a node's standby is.
func measureStarts(b *testing.B, r *Runtime, slot sandbox.Slot, prepared bool, start func(sandbox.Slot, sandbox.Spec) error) {
	var lat []time.Duration
	for b.Loop() {
		var spec sandbox.Spec
		if prepared {
			b.StopTimer()
			spec = newPrepared(b, r, slot)
			b.StartTimer()
		} else {
			spec = newSpec(b, r)
		}
		t0 := time.Now()
		if err := start(slot, spec); err != nil {
			b.Fatal(err)
		}
		waitReady(b, r, slot)
		lat = append(lat, time.Since(t0))
		b.StopTimer()
		if err := r.Destroy(context.Background(), slot, spec.ID); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	latency.Report(b, "", lat, 0.50, 0.95, 0.99)
	b.ReportMetric(0, "ns/op")
}

func dirBytes(b *testing.B, dir string) int64 {
	entries, err := os.ReadDir(dir)
	if err != nil {
		b.Fatal(err)
	}
	var total int64
	for _, e := range entries {
		if info, err := e.Info(); err == nil && info.Mode().IsRegular() {
			total += info.Size()
		}
	}
	return total
}
