package image

import (
	"context"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// TestEnsureRegistry pushes a packed image to an in-process OCI
// distribution server on 127.0.0.1 (plain HTTP, as go-containerregistry
// uses for loopback registries) and unpacks it by tag and by digest.
func TestEnsureRegistry(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(func() {
		srv.Close()
		// remote keeps idle keep-alive connections; goleak would see
		// their goroutines.
		remote.DefaultTransport.(*http.Transport).CloseIdleConnections()
	})
	host := strings.TrimPrefix(srv.URL, "http://")

	src, out := packed(t, CompressionGzip)
	img, _ := onlyImage(t, out)
	tag, err := name.NewTag(host + "/counter:latest")
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(tag, img); err != nil {
		t.Fatal(err)
	}

	c := NewCache(t.TempDir(), nil)
	ctx := context.Background()
	got, err := c.Ensure(ctx, host+"/counter:latest")
	if err != nil {
		t.Fatal(err)
	}
	if want := layoutDigest(t, out); got.Digest != want {
		t.Errorf("digest %s, pushed %s", got.Digest, want)
	}
	compareTrees(t, expectedTree(t, src, "/"), snapshot(t, got.RootFS))

	byDigest, err := c.Ensure(ctx, "docker://"+host+"/counter@"+got.Digest)
	if err != nil {
		t.Fatal(err)
	}
	if byDigest.RootFS != got.RootFS || c.unpacks.Load() != 1 {
		t.Errorf("by digest: %s after %d unpacks, want the cached %s", byDigest.RootFS, c.unpacks.Load(), got.RootFS)
	}

	if _, err := c.Ensure(ctx, host+"/missing:latest"); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("unknown repository: %v, want an error naming it", err)
	}
}
