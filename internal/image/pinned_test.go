package image

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

func packFile(t *testing.T, out, content string) {
	t.Helper()
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "hello"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	err := Pack(context.Background(), PackOptions{Out: out, Sources: []PackSource{{Src: src, Dest: "/"}}, Entrypoint: []string{"/hello"}})
	if err != nil {
		t.Fatal(err)
	}
}

func TestEnsurePinned(t *testing.T) {
	ctx := context.Background()
	layout := filepath.Join(t.TempDir(), "layout")
	packFile(t, layout, "v1")
	c := NewCache(t.TempDir(), nil)
	img, err := c.EnsurePinned(ctx, "", "oci:"+layout, "")
	if err != nil {
		t.Fatal(err)
	}
	// The source layout is gone: the pinned digest is served from cache.
	if err := os.RemoveAll(layout); err != nil {
		t.Fatal(err)
	}
	// The same cache answers from memory; another one on the same
	// directory (another process) from the recorded config.
	for name, c := range map[string]*Cache{"same cache": c, "new cache": NewCache(c.dir, nil)} {
		got, err := c.EnsurePinned(ctx, "", "oci:"+layout, img.Digest)
		if err != nil || got.RootFS != img.RootFS || got.Config.Entrypoint[0] != "/hello" {
			t.Fatalf("%s: pinned image after its layout was removed: %+v, %v", name, got, err)
		}
	}
	// The layout is rebuilt with other content: a cache that does not hold
	// the pinned digest refuses instead of using the new content.
	packFile(t, layout, "v2")
	fresh := NewCache(t.TempDir(), nil)
	if _, err := fresh.EnsurePinned(ctx, "", "oci:"+layout, img.Digest); !errors.Is(err, ErrDigestMismatch) {
		t.Fatalf("EnsurePinned of a changed image = %v, want ErrDigestMismatch", err)
	}
}

// TestEnsurePinnedConcurrently: a cold start and a golden build may ask for
// the same image at once; both get it (they once raced on one temporary
// file for the recorded config).
func TestEnsurePinnedConcurrently(t *testing.T) {
	layout := filepath.Join(t.TempDir(), "layout")
	packFile(t, layout, "v1")
	c := NewCache(t.TempDir(), nil)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			_, err := c.EnsurePinned(context.Background(), "", "oci:"+layout, "")
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent EnsurePinned: %v", err)
		}
	}
}
