package lifecycle

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"substrate.dev/ate/internal/snapshot"
	"substrate.dev/ate/internal/store"
)

// commitSnapshot writes a real snapshot of owner into e's store.
func (e *env) commitSnapshot(t *testing.T, owner, content string) string {
	t.Helper()
	st, err := e.snaps.Stage(owner, "")
	must(t, err)
	must(t, os.WriteFile(filepath.Join(st.Dir, "checkpoint.img"), []byte(content), 0o600))
	ref, err := e.snaps.Commit(context.Background(), st, snapshot.ScopeFull)
	must(t, err)
	return ref
}

// readSnapshot returns the content commitSnapshot wrote into ref.
func (e *env) readSnapshot(t *testing.T, ref string) (string, error) {
	t.Helper()
	o, err := e.snaps.Open(context.Background(), ref)
	if err != nil {
		return "", err
	}
	defer o.Close()
	b, err := os.ReadFile(filepath.Join(o.Dir, "checkpoint.img"))
	return string(b), err
}

// TestTagAndForkOfSuspended: a tag of a SUSPENDED actor and a fork of the
// tag each own a copy of its snapshot; the source's deletion, garbage
// collection and the tag's deletion leave every remaining copy whole.
func TestTagAndForkOfSuspended(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	a := e.get(t)
	a.Snapshot = e.commitSnapshot(t, "a-uid", "count=5")
	_, err := e.st.UpdateActor(ctx, a)
	must(t, err)

	tag, err := e.m.Tag(ctx, key("a"), &store.Tag{Atespace: "default", Name: "five", UID: "tag-uid", CreateTime: time.Now()})
	must(t, err)
	if !strings.HasPrefix(tag.Snapshot, "tag-uid/") || tag.Template != "tpl" || tag.ActorUID != "a-uid" {
		t.Fatalf("tag %+v", tag)
	}
	_, err = e.m.Tag(ctx, key("a"), &store.Tag{Atespace: "default", Name: "five", UID: "tag-2"})
	if !errors.Is(err, store.ErrAlreadyExists) {
		t.Fatalf("second tag five = %v, want ErrAlreadyExists", err)
	}

	fork, err := e.m.Fork(ctx, &store.Actor{Atespace: "default", Name: "f", UID: "f-uid"}, ForkSource{Tag: "five"})
	must(t, err)
	if fork.State != store.Suspended || fork.Template != "tpl" || !strings.HasPrefix(fork.Snapshot, "f-uid/") || fork.Message != "forked from tag five" {
		t.Fatalf("fork %+v", fork)
	}
	fromActor, err := e.m.Fork(ctx, &store.Actor{Atespace: "default", Name: "g", UID: "g-uid"}, ForkSource{Actor: "a"})
	must(t, err)

	must(t, e.m.Delete(ctx, key("a"), false))
	must(t, e.m.CollectGarbage(ctx))
	for _, ref := range []string{tag.Snapshot, fork.Snapshot, fromActor.Snapshot} {
		if got, err := e.readSnapshot(t, ref); err != nil || got != "count=5" {
			t.Fatalf("snapshot %s after the source's deletion and a GC: %q, %v", ref, got, err)
		}
	}
	must(t, e.m.DeleteTag(ctx, "default", "five"))
	if _, err := e.readSnapshot(t, tag.Snapshot); !errors.Is(err, snapshot.ErrNotFound) {
		t.Fatalf("deleted tag's snapshot: %v, want ErrNotFound", err)
	}
	if got, err := e.readSnapshot(t, fork.Snapshot); err != nil || got != "count=5" {
		t.Fatalf("fork's snapshot after the tag's deletion: %q, %v", got, err)
	}
}

// TestTagRunningLeavesItRunning: a RUNNING actor's tag is a checkpoint
// asked to leave it running, into the tag's own snapshot; the actor
// keeps its worker and state.
func TestTagRunningLeavesItRunning(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.resume(t)
	before := e.get(t)
	tag, err := e.m.Tag(ctx, key("a"), &store.Tag{Atespace: "default", Name: "live", UID: "tag-uid"})
	must(t, err)
	e.node.mu.Lock()
	opts := e.node.lastCheckpoint
	e.node.mu.Unlock()
	if !opts.LeaveRunning || opts.Owner != "tag-uid" || opts.Paused {
		t.Fatalf("checkpoint options %+v, want LeaveRunning into owner tag-uid", opts)
	}
	after := e.get(t)
	if after.State != store.Running || after.Worker != before.Worker || after.Snapshot != before.Snapshot {
		t.Fatalf("tagged actor: %s on %q snapshot %q; was %s on %q snapshot %q",
			after.State, after.Worker, after.Snapshot, before.State, before.Worker, before.Snapshot)
	}
	if !strings.HasPrefix(tag.Snapshot, "tag-uid/") {
		t.Fatalf("tag snapshot %q", tag.Snapshot)
	}
}

// TestForkRefusals: what a tag or fork refuses, with the errors the API
// maps to its codes.
func TestForkRefusals(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		run  func() error
		want error
	}{
		{"tag of a never-suspended actor", func() error {
			_, err := e.m.Tag(ctx, key("a"), &store.Tag{Atespace: "default", Name: "t", UID: "t-uid"})
			return err
		}, ErrFailedPrecondition},
		{"tag of a missing actor", func() error {
			_, err := e.m.Tag(ctx, key("nobody"), &store.Tag{Atespace: "default", Name: "t", UID: "t-uid"})
			return err
		}, store.ErrNotFound},
		{"fork of a missing tag", func() error {
			_, err := e.m.Fork(ctx, &store.Actor{Atespace: "default", Name: "f", UID: "f-uid"}, ForkSource{Tag: "nope"})
			return err
		}, store.ErrNotFound},
		{"fork under another template", func() error {
			_, err := e.m.Fork(ctx, &store.Actor{Atespace: "default", Name: "f", UID: "f-uid", Template: "other"}, ForkSource{Actor: "a"})
			return err
		}, ErrFailedPrecondition},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.run(); !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}
