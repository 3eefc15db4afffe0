package snapshottest

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"substrate.dev/ate/internal/snapshot"
)

// substitutedRefused is a compromised node's attack on another actor's
// past: with the store's credentials (every node holds them), it deletes
// the victim's snapshot and commits its own files under the victim's
// very reference, so files and manifest agree (sizes, SHA-256, Ref) and
// only the manifest digest the record holds can tell. Open and Clone of
// the recorded reference must refuse it, and what they refuse with must
// not hand out the attacker's files.
func substitutedRefused(t *testing.T, s snapshot.Store) {
	ctx := context.Background()
	victim := commit(t, s, "victim-uid")
	_, id, err := snapshot.SplitRef(victim)
	if err != nil {
		t.Fatal(err)
	}

	if err := s.Delete(ctx, snapshot.Bare(victim)); err != nil {
		t.Fatal(err)
	}
	st, err := s.Stage("victim-uid", id)
	if err != nil {
		t.Fatal(err)
	}
	planted := []byte("attacker's volume")
	p := filepath.Join(st.Dir, "volumes", "data", "a", "b", "c.txt")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, planted, 0o644); err != nil {
		t.Fatal(err)
	}
	forged, err := s.Commit(ctx, st, snapshot.ScopeFull)
	if err != nil {
		t.Fatal(err)
	}
	if snapshot.Bare(forged) != snapshot.Bare(victim) {
		t.Fatalf("the forgery landed at %s, not at the victim's %s", forged, victim)
	}

	o, err := s.Open(ctx, victim)
	if err == nil {
		got, _ := os.ReadFile(filepath.Join(o.Dir, "volumes", "data", "a", "b", "c.txt"))
		o.Close()
		t.Fatalf("Open of the recorded reference accepted the substituted snapshot (volume file %q)", got)
	}
	if !errors.Is(err, snapshot.ErrCorrupt) {
		t.Fatalf("Open of the substituted snapshot = %v, want ErrCorrupt", err)
	}
	if _, err := s.Committed(ctx, victim); !errors.Is(err, snapshot.ErrCorrupt) {
		t.Errorf("Committed of the substituted snapshot = %v, want ErrCorrupt", err)
	}
	// A tag or fork of the victim must not launder the forgery under a
	// fresh digest of its own.
	if ref, err := s.Clone(ctx, victim, "tag-uid", ""); !errors.Is(err, snapshot.ErrCorrupt) {
		t.Errorf("Clone of the substituted snapshot = %q, %v; want ErrCorrupt", ref, err)
	}

	// The attacker's own reference (its digest) opens: the refusal is the
	// digest's, not a broken store.
	o, err = s.Open(ctx, forged)
	if err != nil {
		t.Fatalf("Open of the forgery by its own digest: %v", err)
	}
	defer o.Close()
	if got, _ := os.ReadFile(filepath.Join(o.Dir, "volumes", "data", "a", "b", "c.txt")); !bytes.Equal(got, planted) {
		t.Fatalf("forgery holds %q", got)
	}
}
