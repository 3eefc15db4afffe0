package gvisor

import (
	"context"
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
// activation from a snapshot.
func BenchmarkRestore(b *testing.B) {
	for _, v := range []struct {
		name                string
		checkpoint, restore []string
		prepared, cli       bool
	}{
		{"default", nil, nil, false, false},
		{"prepared", nil, nil, true, false},
		{"prepared-cli", nil, nil, true, true},
		{"uncompressed", []string{"-compression=none"}, nil, false, false},
		{"uncompressed-background", []string{"-compression=none"}, []string{"-background"}, false, false},
		{"zero-pages-excluded", []string{"-exclude-committed-zero-pages"}, nil, false, false},
	} {
		b.Run(v.name, func(b *testing.B) {
			cfg := Config{CheckpointFlags: v.checkpoint, RestoreFlags: v.restore, ForceCLI: v.cli}
			benchRestore(b, newRuntimeWith(b, cfg), v.prepared)
		})
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
