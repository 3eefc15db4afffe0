package image

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestInspect: Inspect reads an image's configuration without unpacking
// it, and a reference to a layout or archive that does not exist fails
// with ErrNotFound naming the path.
func TestInspect(t *testing.T) {
	tmp := t.TempDir()
	src, out := filepath.Join(tmp, "src"), filepath.Join(tmp, "img")
	writeFiles(t, src)
	if err := Pack(context.Background(), PackOptions{Out: out, Sources: []PackSource{{Src: src}}, ExposedPorts: []int{9090, 8080}}); err != nil {
		t.Fatal(err)
	}
	cache := NewCache(filepath.Join(tmp, "cache"), nil)
	cfg, err := cache.Inspect(context.Background(), "", "oci:"+out)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cfg.ExposedPorts, []int{8080, 9090}) {
		t.Errorf("exposed ports %v, want [8080 9090]", cfg.ExposedPorts)
	}
	if n := cache.unpacks.Load(); n != 0 {
		t.Errorf("Inspect unpacked %d times, want 0", n)
	}
	if _, err := os.Stat(filepath.Join(tmp, "cache")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Inspect wrote into the cache dir: %v", err)
	}
	for _, ref := range []string{"oci:" + filepath.Join(tmp, "nope"), "oci-archive:" + filepath.Join(tmp, "nope.tar"), "oci:" + src} {
		_, err := cache.Inspect(context.Background(), "", ref)
		if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), tmp) {
			t.Errorf("Inspect(%s) = %v, want ErrNotFound naming the path", ref, err)
		}
	}
}
