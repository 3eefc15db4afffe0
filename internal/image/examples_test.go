package image

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestExampleImages unpacks the images hack/build-examples.sh writes and,
// as root, runs the Python one in a chroot. It needs the built images, so
// it runs only when asked:
//
//	hack/build-examples.sh && ATE_EXAMPLE_IMAGES=1 go test ./internal/image -run ExampleImages -v
func TestExampleImages(t *testing.T) {
	if os.Getenv("ATE_EXAMPLE_IMAGES") == "" {
		t.Skip("set ATE_EXAMPLE_IMAGES=1 after hack/build-examples.sh")
	}
	images, err := filepath.Abs("../../build/images")
	if err != nil {
		t.Fatal(err)
	}
	c := NewCache(t.TempDir(), nil)
	ctx := context.Background()

	t.Run("counter", func(t *testing.T) {
		img, err := c.Ensure(ctx, "oci:"+filepath.Join(images, "counter"))
		if err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(filepath.Join(img.RootFS, "counter"))
		if err != nil || fi.Mode().Perm()&0o111 == 0 {
			t.Fatalf("/counter: %v, %v; want an executable", fi, err)
		}
		if len(img.Config.Entrypoint) != 1 || img.Config.Entrypoint[0] != "/counter" || len(img.Config.ExposedPorts) != 1 || img.Config.ExposedPorts[0] != 8080 {
			t.Errorf("config %+v", img.Config)
		}
	})

	t.Run("python-notes", func(t *testing.T) {
		start := time.Now()
		img, err := c.Ensure(ctx, "oci:"+filepath.Join(images, "python-notes"))
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("unpacked %s in %v", img.Digest, time.Since(start).Round(time.Millisecond))
		start = time.Now()
		if _, err := c.Ensure(ctx, "oci:"+filepath.Join(images, "python-notes")); err != nil {
			t.Fatal(err)
		}
		t.Logf("cached Ensure in %v", time.Since(start).Round(time.Microsecond))
		if os.Geteuid() != 0 {
			t.Skip("chroot needs root")
		}
		out, err := exec.Command("chroot", img.RootFS, "/usr/bin/python3", "-c", "import http.server; print('ok')").CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "ok" {
			t.Fatalf("import http.server in the rootfs: %v: %s", err, out)
		}
		// The image keeps the rootfs's mtimes so the stdlib's .pyc files,
		// validated against their sources' mtimes, are used as they are.
		out, err = exec.Command("chroot", img.RootFS, "/usr/bin/python3", "-v", "-c", "import http.server").CombinedOutput()
		if err != nil || strings.Contains(string(out), "bytecode is stale") || !strings.Contains(string(out), "http/__pycache__/server.cpython") {
			t.Errorf("stdlib .pyc files not used: %v\n%s", err, grepLines(string(out), "stale"))
		}
		serveNotes(t, img)
	})
}

// serveNotes runs notes.py from img in a chroot and talks to it.
func serveNotes(t *testing.T, img *Image) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	args := append([]string{img.RootFS}, img.Config.Cmd...)
	cmd := exec.Command("chroot", args...)
	cmd.Env = append(img.Config.Env, fmt.Sprintf("PORT=%d", port))
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
	})
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(base + "/healthz")
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("notes.py did not answer: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	resp, err := http.Post(base+"/notes", "text/plain", strings.NewReader("remember"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || strings.TrimSpace(string(body)) != `{"id": 1, "text": "remember"}` {
		t.Errorf("POST /notes = %d %s", resp.StatusCode, body)
	}
	resp, err = http.Get(base + "/notes")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.TrimSpace(string(body)) != `[{"id": 1, "text": "remember"}]` {
		t.Errorf("GET /notes = %s", body)
	}
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
