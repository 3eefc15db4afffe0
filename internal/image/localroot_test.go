package image

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// An editor names the image path of a template; the API server and the
// nodes open it as root. Outside the operator's image roots nothing is
// opened, and the answer is the same whether the path exists or not;
// inside them, a symlink out of the root leads nowhere.
func TestLocalRootsRefuseOutside(t *testing.T) {
	tmp := t.TempDir()
	root, outside := filepath.Join(tmp, "images"), filepath.Join(tmp, "outside")
	img := layered(t, []tarEntry{{name: "f", body: "x"}})
	writeLayout(t, filepath.Join(root, "ok"), img, "")
	tarDir(t, filepath.Join(root, "ok"), filepath.Join(root, "ok.tar"))
	writeLayout(t, filepath.Join(outside, "secret"), img, "")
	tarDir(t, filepath.Join(outside, "secret"), filepath.Join(outside, "secret.tar"))
	if err := os.Symlink(filepath.Join(outside, "secret"), filepath.Join(root, "escape")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "secret.tar"), filepath.Join(root, "escape.tar")); err != nil {
		t.Fatal(err)
	}
	c := NewCache(filepath.Join(tmp, "cache"), nil, LocalRoots([]string{root}))
	ctx := context.Background()

	for _, ref := range []string{"oci:" + filepath.Join(root, "ok"), "oci-archive:" + filepath.Join(root, "ok.tar")} {
		if _, err := c.Inspect(ctx, "", ref); err != nil {
			t.Errorf("Inspect(%s) under the root: %v", ref, err)
		}
	}

	// Existing and missing paths outside the roots, written every way.
	outsideRefs := map[string]string{
		"oci:/etc":                                       "/etc",
		"oci:/etc/nonexistent-ate":                       "/etc/nonexistent-ate",
		"oci-archive:/etc/passwd":                        "/etc/passwd",
		"oci-archive:/etc/no-such":                       "/etc/no-such",
		"oci:" + outside + "/secret":                     outside + "/secret",
		"oci:" + root + "/../outside/secret":             root + "/../outside/secret",
		"oci-archive:" + root + "/../outside/secret.tar": root + "/../outside/secret.tar",
		"oci:" + root + "x":                              root + "x", // a sibling sharing the root's prefix
	}
	var texts []string
	for ref, p := range outsideRefs {
		_, err := c.Inspect(ctx, "", ref)
		if !errors.Is(err, ErrPathNotAllowed) {
			t.Errorf("Inspect(%s) = %v, want ErrPathNotAllowed", ref, err)
			continue
		}
		texts = append(texts, strings.Replace(err.Error(), p, "PATH", 1))
	}
	for _, s := range texts[1:] {
		if s != texts[0] {
			t.Errorf("errors outside the roots differ, which tells what exists:\n%s\n%s", s, texts[0])
		}
	}

	// Symlinks inside the root that lead out of it are not followed.
	for _, ref := range []string{"oci:" + filepath.Join(root, "escape"), "oci-archive:" + filepath.Join(root, "escape.tar")} {
		if _, err := c.Ensure(ctx, ref); err == nil {
			t.Errorf("Ensure(%s) read an image outside the root through a symlink", ref)
		}
	}
	noStrayTemps(t, c.dir)

	// No roots: no local image at all.
	none := NewCache(filepath.Join(tmp, "cache2"), nil, LocalRoots(nil))
	if _, err := none.Inspect(ctx, "", "oci:"+filepath.Join(root, "ok")); !errors.Is(err, ErrPathNotAllowed) || !strings.Contains(err.Error(), "allowed: none") {
		t.Errorf("Inspect with no roots = %v, want ErrPathNotAllowed saying none is allowed", err)
	}
}

// A FIFO where a layout or archive is expected would block the open for
// reading until a writer came, forever: the API server's request and a
// goroutine hung. It is refused at once, with or without image roots.
func TestLocalFIFODoesNotHang(t *testing.T) {
	tmp := t.TempDir()
	fifo := filepath.Join(tmp, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	layoutDir := filepath.Join(tmp, "layout")
	if err := os.MkdirAll(layoutDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(layoutDir, "index.json"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{"oci-archive:" + fifo, "oci:" + fifo, "oci:" + layoutDir} {
		done := make(chan error, 1)
		go func() {
			_, err := NewCache(filepath.Join(tmp, "cache"), nil).Inspect(context.Background(), "", ref)
			done <- err
		}()
		select {
		case err := <-done:
			if !errors.Is(err, ErrNotFound) {
				t.Errorf("Inspect(%s) = %v, want ErrNotFound", ref, err)
			}
		case <-time.After(10 * time.Second):
			// Unblock the hung open so the test can end.
			p := strings.TrimPrefix(strings.TrimPrefix(ref, "oci-archive:"), "oci:")
			if fi, err := os.Stat(p); err == nil && fi.IsDir() {
				p = filepath.Join(p, "index.json")
			}
			if w, err := os.OpenFile(p, os.O_WRONLY, 0); err == nil {
				_ = w.Close()
			}
			<-done
			t.Errorf("Inspect(%s) hung on a FIFO", ref)
		}
	}
}
