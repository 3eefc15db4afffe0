package s3test

import (
	"context"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7"
)

// TestServer: the server stores and lists objects, and Corrupt changes
// what a read returns.
func TestServer(t *testing.T) {
	s := New(t)
	t.Logf("weed started in %s", s.StartupTime)
	ctx := context.Background()
	if err := s.Rewrite(ctx, "p/a", func([]byte) []byte { return []byte("hello") }); err == nil {
		t.Fatal("Rewrite of a missing object succeeded")
	}
	if _, err := s.Client.PutObject(ctx, s.Bucket, "p/a", strings.NewReader("hello"), 5, minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Corrupt(ctx, "p/a"); err != nil {
		t.Fatal(err)
	}
	keys, err := s.Keys(ctx, "p/")
	if err != nil || len(keys) != 1 || keys[0] != "p/a" {
		t.Fatalf("Keys = %v, %v", keys, err)
	}
	if u := s.URL("/x/y/", "compression=none"); !strings.HasPrefix(u, "s3://snapshots/x/y?") || !strings.Contains(u, "compression=none") {
		t.Fatalf("URL = %s", u)
	}
}

// TestMissingBinaryFails: without weed, Start fails naming the path and
// the script that builds it (tests fail, never skip).
func TestMissingBinaryFails(t *testing.T) {
	t.Setenv("ATE_CACHE", t.TempDir())
	_, err := Start(context.Background(), t.TempDir())
	if err == nil || !strings.Contains(err.Error(), Binary()) || !strings.Contains(err.Error(), "hack/install-seaweedfs.sh") {
		t.Fatalf("Start without weed = %v", err)
	}
}
