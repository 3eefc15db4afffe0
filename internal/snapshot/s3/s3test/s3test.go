// Package s3test runs a real SeaweedFS S3 gateway for tests: one `weed
// server` process (master, volume, filer, S3) on free loopback ports, in a
// directory of the caller's, with one access key and one bucket. The
// binary comes from hack/install-seaweedfs.sh; without it Start fails
// (tests fail, never skip).
//
// weed takes a few seconds to start on a 2-core VM (BENCHMARKS.md, "S3
// snapshot store"), so start one Server per test binary (Start in
// TestMain) and give each test its own key prefix.
package s3test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"substrate.dev/ate/internal/testport"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// Credentials and bucket of every Server; fixed, since the server is a
// throwaway on loopback.
const (
	AccessKey = "ate-test-access"
	SecretKey = "ate-test-secret-key-0123456789"
	Bucket    = "snapshots"
)

// StartTimeout bounds Start's wait for the gateway to store an object.
const StartTimeout = 90 * time.Second

// Server is a running weed server with its S3 gateway.
type Server struct {
	// Endpoint is "127.0.0.1:<port>" of the S3 API (plain http).
	Endpoint             string
	AccessKey, SecretKey string
	Bucket               string
	// Client is a minio-go client with the server's credentials.
	Client *minio.Client
	// StartupTime is how long Start took from exec to the first stored
	// object.
	StartupTime time.Duration

	dir       string
	grpcPorts map[string]int
	cmd       *exec.Cmd
	done      chan struct{} // closed when the process has exited
	err       error         // the process's exit status, set before done closes
}

// Binary is where hack/install-seaweedfs.sh installs weed.
func Binary() string {
	cache := os.Getenv("ATE_CACHE")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache", "ate")
	}
	return filepath.Join(cache, "bin", "weed")
}

// New starts a Server for one test (in t.TempDir()) and stops it on
// cleanup; any failure is fatal.
func New(tb testing.TB) *Server {
	tb.Helper()
	s, err := Start(context.Background(), tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := s.Close(); err != nil {
			tb.Error(err)
		}
	})
	return s
}

// Start runs weed with its data, config and log in dir (which must
// exist), waits until its S3 gateway stores an object, and creates Bucket.
// On error the process is stopped. The caller must Close the Server.
func Start(ctx context.Context, dir string) (*Server, error) {
	bin := Binary()
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("s3test: SeaweedFS binary %s: %w (build it with hack/install-seaweedfs.sh)", bin, err)
	}
	// A port picked free can still be taken before weed binds it (another
	// test binary's weed starting alongside); then weed exits at once, and
	// a new set of ports is tried.
	var err error
	for attempt := 1; attempt <= 3; attempt++ {
		sub := filepath.Join(dir, "weed-"+strconv.Itoa(attempt))
		if err = os.Mkdir(sub, 0o700); err != nil {
			return nil, err
		}
		var s *Server
		if s, err = start(ctx, bin, sub); !errors.Is(err, errPortTaken) {
			return s, err
		}
	}
	return nil, err
}

// errPortTaken: weed exited because a port was taken.
var errPortTaken = errors.New("s3test: a port weed was given is taken")

func start(ctx context.Context, bin, dir string) (*Server, error) {
	ports, err := testport.Free(8)
	if err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "s3.json")
	identities := fmt.Sprintf(`{"identities":[{"name":"ate","credentials":[{"accessKey":%q,"secretKey":%q}],"actions":["Admin","Read","Write","List","Tagging"]}]}`, AccessKey, SecretKey)
	if err := os.WriteFile(conf, []byte(identities), 0o600); err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(data, 0o700); err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, "weed.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child has its own descriptor
	p := func(i int) string { return strconv.Itoa(ports[i]) }
	// Every port is set, gRPC ones included (weed defaults them to
	// port+10000, which may be taken), and the extra listeners (Iceberg,
	// Lance, telemetry) are off so nothing binds a fixed port.
	cmd := exec.Command(bin, "server",
		"-dir="+data, "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
		"-master.port="+p(0), "-master.port.grpc="+p(1),
		"-master.telemetry=false", "-master.volumeSizeLimitMB=256",
		"-volume.port="+p(2), "-volume.port.grpc="+p(3), "-volume.max=32",
		"-filer", "-filer.port="+p(4), "-filer.port.grpc="+p(5),
		"-filer.localSocket="+filepath.Join(dir, "filer.sock"),
		"-s3", "-s3.port="+p(6), "-s3.port.grpc="+p(7),
		"-s3.port.iceberg=0", "-s3.port.lance=0",
		"-s3.config="+conf, "-s3.localSocket="+filepath.Join(dir, "s3.sock"),
	)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group, so a test's terminal ^C reaches the test
	// binary first and Close still runs.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("s3test: start %s: %w", bin, err)
	}
	s := &Server{
		Endpoint:  "127.0.0.1:" + p(6),
		AccessKey: AccessKey, SecretKey: SecretKey, Bucket: Bucket,
		dir: dir, cmd: cmd, done: make(chan struct{}),
		grpcPorts: map[string]int{"master": ports[1], "volume": ports[3], "filer": ports[5], "s3": ports[7]},
	}
	go func() { s.err = cmd.Wait(); close(s.done) }()
	s.Client, err = minio.New(s.Endpoint, &minio.Options{
		Creds:        credentials.NewStaticV4(AccessKey, SecretKey, ""),
		Region:       "us-east-1",
		BucketLookup: minio.BucketLookupPath,
		MaxRetries:   1,
	})
	if err == nil {
		err = s.waitReady(ctx)
	}
	if err != nil {
		_ = s.Close()
		tail := s.logTail()
		if strings.Contains(tail, "address already in use") {
			err = fmt.Errorf("%w: %v", errPortTaken, err)
		}
		return nil, fmt.Errorf("%w\nweed log (%s):\n%s", err, filepath.Join(dir, "weed.log"), tail)
	}
	s.StartupTime = time.Since(start)
	return s, nil
}

// waitReady polls, until StartTimeout or the process exits, for the
// gateway to create the bucket and store an object in it (the volume
// server must have joined the master for that, after S3 already answers).
func (s *Server) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, StartTimeout)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		if last = s.tryReady(ctx); last == nil {
			return nil
		}
		select {
		case <-s.done:
			return fmt.Errorf("s3test: weed exited before its S3 gateway was ready: %v (last probe: %v)", s.err, last)
		case <-ctx.Done():
			return fmt.Errorf("s3test: weed's S3 gateway not ready within %s: %w", StartTimeout, last)
		case <-tick.C:
		}
	}
}

func (s *Server) tryReady(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ok, err := s.Client.BucketExists(pctx, s.Bucket)
	if err != nil {
		return err
	}
	if !ok {
		if err := s.Client.MakeBucket(pctx, s.Bucket, minio.MakeBucketOptions{}); err != nil {
			return err
		}
	}
	const probe = ".s3test-ready"
	if _, err := s.Client.PutObject(pctx, s.Bucket, probe, strings.NewReader("ok"), 2, minio.PutObjectOptions{}); err != nil {
		return err
	}
	return s.Client.RemoveObject(pctx, s.Bucket, probe, minio.RemoveObjectOptions{})
}

func (s *Server) logTail() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "weed.log"))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// Close stops the server with SIGKILL and waits for it to exit: the data
// is throwaway, and weed's graceful shutdown takes ~30 s (its volume
// server alone waits 10 s). It also removes the gRPC sockets weed puts in
// /tmp by port, which a kill leaves behind.
func (s *Server) Close() error {
	_ = s.cmd.Process.Kill()
	<-s.done
	for _, name := range []string{"master", "volume", "filer", "s3"} {
		_ = os.Remove(fmt.Sprintf("/tmp/seaweedfs-%s-grpc-%d.sock", name, s.grpcPorts[name]))
	}
	return nil
}

// URL returns the store URL of prefix on this server:
// s3://<bucket>/<prefix>?endpoint=http://<endpoint>[&<extra>…], each
// extra a "key=value" query parameter.
func (s *Server) URL(prefix string, extra ...string) string {
	q := url.Values{"endpoint": {"http://" + s.Endpoint}}
	for _, kv := range extra {
		k, v, _ := strings.Cut(kv, "=")
		q.Add(k, v)
	}
	return "s3://" + s.Bucket + "/" + strings.Trim(prefix, "/") + "?" + q.Encode()
}

// Creds returns static credentials of the server's access key.
func (s *Server) Creds() *credentials.Credentials {
	return credentials.NewStaticV4(s.AccessKey, s.SecretKey, "")
}

// Keys lists the keys in the bucket under prefix, recursively.
func (s *Server) Keys(ctx context.Context, prefix string) ([]string, error) {
	var keys []string
	for o := range s.Client.ListObjects(ctx, s.Bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if o.Err != nil {
			return nil, o.Err
		}
		keys = append(keys, o.Key)
	}
	return keys, nil
}

// Rewrite replaces object key with edit(its content), through the S3 API.
func (s *Server) Rewrite(ctx context.Context, key string, edit func([]byte) []byte) error {
	data, err := s.get(ctx, key)
	if err != nil {
		return err
	}
	edited := edit(data)
	if err := s.Put(ctx, key, edited); err != nil {
		return err
	}
	return s.readsBack(ctx, key, edited)
}

// readsBack waits until a GET of key returns data, so that a test's next
// read is of its rewrite. TestBadObjects/flipped_byte_zstd failed twice
// in many runs with its reader handed bytes that decoded to the original
// (Open succeeded on the object it had just corrupted): consistent with
// SeaweedFS answering a GET with the content a PUT had just replaced,
// there an object uploaded in parts (unknown size, zstd) replaced by one
// uploaded whole. Snapshots never replace an object (every snapshot has
// keys of its own), so only tests meet this.
func (s *Server) readsBack(ctx context.Context, key string, data []byte) error {
	deadline := time.Now().Add(10 * time.Second)
	for try := 1; ; try++ {
		got, err := s.get(ctx, key)
		if err != nil {
			return err
		}
		if bytes.Equal(got, data) {
			if try > 1 {
				fmt.Fprintf(os.Stderr, "s3test: %s read as rewritten only at try %d\n", key, try)
			}
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("s3test: %s still does not read as rewritten 10 s after the PUT (%d tries)", key, try)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// get reads object key whole.
func (s *Server) get(ctx context.Context, key string) ([]byte, error) {
	obj, err := s.Client.GetObject(ctx, s.Bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, err
	}
	defer obj.Close()
	data, err := io.ReadAll(obj)
	if err != nil {
		return nil, fmt.Errorf("s3test: read %s: %w", key, err)
	}
	return data, nil
}

// Put stores data as object key.
func (s *Server) Put(ctx context.Context, key string, data []byte) error {
	_, err := s.Client.PutObject(ctx, s.Bucket, key, bytes.NewReader(data), int64(len(data)), minio.PutObjectOptions{})
	return err
}

// Corrupt flips every bit of the byte in the middle of object key.
func (s *Server) Corrupt(ctx context.Context, key string) error {
	return s.Rewrite(ctx, key, func(b []byte) []byte {
		if len(b) > 0 {
			b[len(b)/2] ^= 0xff
		}
		return b
	})
}

// Remove deletes object key.
func (s *Server) Remove(ctx context.Context, key string) error {
	return s.Client.RemoveObject(ctx, s.Bucket, key, minio.RemoveObjectOptions{})
}
