package gvisor

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestWaitReturnsWhenSandboxExits: Wait blocks while the container runs
// (it still answers after Wait started) and returns once the sandbox is
// killed behind its back; a cancelled ctx ends it too.
func TestWaitReturnsWhenSandboxExits(t *testing.T) {
	r := newRuntime(t)
	slot := newSlot(t)
	spec := newSpec(t, r)
	runReady(t, r, slot, spec)

	ctx, cancel := context.WithCancel(t.Context())
	cancelled := make(chan error, 1)
	go func() { cancelled <- r.Wait(ctx, slot, spec.ID) }()
	done := make(chan error, 1)
	go func() { done <- r.Wait(t.Context(), slot, spec.ID) }()
	mustGet(t, r, slot, "/healthz")
	select {
	case err := <-done:
		t.Fatalf("Wait returned while the sandbox runs: %v", err)
	default:
	}
	cancel()
	select {
	case err := <-cancelled:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled Wait = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("cancelled Wait did not return")
	}
	if _, err := r.command(t.Context(), "kill", spec.ID, "KILL"); err != nil {
		t.Fatalf("runsc kill: %v", err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Wait after the kill = %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Wait did not return after the sandbox was killed")
	}
}
