package lifecycle

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"substrate.dev/ate/internal/store"
)

// TestForeignSnapshotRefused: a compromised node, asked to checkpoint
// actor a, reports victim b's snapshot as a's. Were it recorded, a would
// restore b's past, and a's next suspend would delete b's snapshot as a's
// superseded one. The suspend fails instead (ErrForeignSnapshot), a's
// record does not point at b's snapshot, and b's snapshot survives a's
// next suspend and a's deletion.
func TestForeignSnapshotRefused(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	st, err := e.snaps.Stage("b-uid", "")
	must(t, err)
	must(t, os.WriteFile(filepath.Join(st.Dir, "checkpoint.img"), []byte("b's past"), 0o600))
	victim, err := e.snaps.Commit(ctx, st, 0)
	must(t, err)

	e.resume(t)
	e.node.reportRef = victim
	if _, err := e.m.Suspend(ctx, key("a")); !errors.Is(err, ErrForeignSnapshot) {
		t.Fatalf("Suspend with another owner's snapshot reported = %v, want ErrForeignSnapshot", err)
	}
	if a := e.get(t); a.Snapshot == victim || a.State != store.Crashed {
		t.Fatalf("after the refused checkpoint: state %s snapshot %q (b's is %q)", a.State, a.Snapshot, victim)
	}

	e.node.reportRef = ""
	e.resume(t)
	if _, err := e.m.Suspend(ctx, key("a")); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Delete(ctx, key("a"), false); err != nil {
		t.Fatal(err)
	}
	if _, err := e.snaps.Committed(ctx, victim); err != nil {
		t.Fatalf("b's snapshot after a's suspend and delete: %v", err)
	}
}
