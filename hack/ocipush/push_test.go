package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"golang.org/x/crypto/bcrypt"

	"substrate.dev/ate/internal/image"
)

// The test runs ocipush as a separate process, as `make image-push` does
// (its environment is the one under test: DOCKER_CONFIG, SSL_CERT_FILE):
// the test binary itself, with this variable set, is ocipush.
const runMainEnv = "OCIPUSH_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestPushToRealRegistry pushes a two-platform index and a single image
// to the CNCF distribution registry (hack/install-registry.sh) serving
// TLS with a CA made here and htpasswd (bcrypt) authentication, and reads
// them back.
func TestPushToRealRegistry(t *testing.T) {
	reg := startRegistry(t)
	tmp := t.TempDir()
	multi, single := twoPlatformLayout(t, filepath.Join(tmp, "layouts"))
	wantIndex := layoutEntry(t, multi).Digest
	wantSingle := layoutEntry(t, single).Digest

	noConfig := filepath.Join(tmp, "no-docker-config")
	if err := os.MkdirAll(noConfig, 0o755); err != nil {
		t.Fatal(err)
	}
	good := dockerConfig(t, filepath.Join(tmp, "good"), reg.host, reg.user, reg.password)
	bad := dockerConfig(t, filepath.Join(tmp, "bad"), reg.host, reg.user, "not-the-password")
	ref := reg.host + "/ate/ate:test"
	refFile := filepath.Join(tmp, "pushed", "ate.ref")
	args := []string{"--layout", multi, "--ref", ref, "--ref-file", refFile}

	t.Run("anonymous push is refused", func(t *testing.T) {
		out, errOut, code := ocipush(t, map[string]string{"DOCKER_CONFIG": noConfig, "SSL_CERT_FILE": reg.caFile}, args...)
		t.Logf("ocipush said:\n%s", errOut)
		if code != 1 || out != "" {
			t.Fatalf("exit %d, stdout %q: want 1 and nothing; stderr:\n%s", code, out, errOut)
		}
		for _, want := range []string{
			reg.host + " refused an anonymous push", "401 Unauthorized",
			"No credentials for " + reg.host + " in " + filepath.Join(noConfig, "config.json"),
			"docker login " + reg.host, `{"auths": {"` + reg.host + `": {"auth": `,
		} {
			if !strings.Contains(errOut, want) {
				t.Errorf("stderr does not say %q:\n%s", want, errOut)
			}
		}
		if _, err := os.Stat(refFile); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("ref file after a refused push: %v", err)
		}
		_, err := remote.Head(mustRef(t, ref), reg.authed()...)
		var terr *transport.Error
		if !errors.As(err, &terr) || terr.StatusCode != http.StatusNotFound {
			t.Errorf("the tag after a refused push: %v, want 404", err)
		}
	})

	t.Run("wrong password is refused", func(t *testing.T) {
		_, errOut, code := ocipush(t, map[string]string{"DOCKER_CONFIG": bad, "SSL_CERT_FILE": reg.caFile}, args...)
		t.Logf("ocipush said:\n%s", errOut)
		if code != 1 || !strings.Contains(errOut, reg.host+" refused the credentials for it in "+filepath.Join(bad, "config.json")) {
			t.Errorf("exit %d, stderr:\n%s\nwant 1 and the credentials refused", code, errOut)
		}
	})

	t.Run("untrusted certificate", func(t *testing.T) {
		// No SSL_CERT_FILE: the system's roots, which lack the test's CA.
		_, errOut, code := ocipush(t, map[string]string{"DOCKER_CONFIG": good}, args...)
		t.Logf("ocipush said:\n%s", errOut)
		if code != 1 || !strings.Contains(errOut, "x509") || !strings.Contains(errOut, "set SSL_CERT_FILE") {
			t.Errorf("exit %d, stderr:\n%s\nwant 1, the x509 error and what to do", code, errOut)
		}
	})

	t.Run("authenticated push of the index", func(t *testing.T) {
		out, errOut, code := ocipush(t, map[string]string{"DOCKER_CONFIG": good, "SSL_CERT_FILE": reg.caFile}, args...)
		if code != 0 {
			t.Fatalf("exit %d; stderr:\n%s", code, errOut)
		}
		want := reg.host + "/ate/ate@" + wantIndex.String()
		if out != want+"\n" {
			t.Errorf("stdout %q, want %q", out, want)
		}
		if b, err := os.ReadFile(refFile); err != nil || string(b) != want+"\n" {
			t.Errorf("ref file: %q %v, want %q", b, err, want)
		}

		// Pulled back by that digest: the same index, both platforms,
		// each the local image byte for byte.
		idx, err := remote.Index(mustRef(t, want), reg.authed()...)
		if err != nil {
			t.Fatal(err)
		}
		if d, err := idx.Digest(); err != nil || d != wantIndex {
			t.Errorf("pulled index digest %v %v, want the layout's %s", d, err, wantIndex)
		}
		im, err := idx.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		local := localIndex(t, multi)
		var platforms []string
		for i, d := range im.Manifests {
			if d.Platform == nil {
				t.Fatalf("manifest %d has no platform", i)
			}
			platforms = append(platforms, d.Platform.String())
			img, err := remote.Image(mustRef(t, reg.host+"/ate/ate@"+d.Digest.String()), reg.authed()...)
			if err != nil {
				t.Fatalf("%s: %v", d.Platform, err)
			}
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			if cf.OS+"/"+cf.Architecture != d.Platform.String() {
				t.Errorf("%s: image config says %s/%s", d.Platform, cf.OS, cf.Architecture)
			}
			limg, err := local.Image(d.Digest)
			if err != nil {
				t.Fatalf("%s: not in the local layout: %v", d.Digest, err)
			}
			sameLayers(t, d.Platform.String(), limg, img)
		}
		if got := strings.Join(platforms, " "); got != "linux/amd64 linux/arm64" {
			t.Errorf("platforms %q, want linux/amd64 linux/arm64", got)
		}

		// Authentication is not only asked of pushes.
		if _, err := remote.Index(mustRef(t, want), remote.WithTransport(reg.transport())); err == nil {
			t.Error("an anonymous pull succeeded")
		}
	})

	t.Run("single image with --ca-file", func(t *testing.T) {
		out, errOut, code := ocipush(t, map[string]string{"DOCKER_CONFIG": good},
			"--layout", single, "--ref", reg.host+"/ate/single:v1", "--ca-file", reg.caFile)
		if code != 0 {
			t.Fatalf("exit %d; stderr:\n%s", code, errOut)
		}
		if want := reg.host + "/ate/single@" + wantSingle.String() + "\n"; out != want {
			t.Errorf("stdout %q, want %q", out, want)
		}
		img, err := remote.Image(mustRef(t, reg.host+"/ate/single:v1"), reg.authed()...)
		if err != nil {
			t.Fatal(err)
		}
		if d, err := img.Digest(); err != nil || d != wantSingle {
			t.Errorf("pulled %v %v, want %s", d, err, wantSingle)
		}
	})
}

// sameLayers fails unless the pulled image has the local image's
// manifest and layers.
func sameLayers(t *testing.T, what string, local, pulled v1.Image) {
	t.Helper()
	lm, err := local.RawManifest()
	if err != nil {
		t.Fatal(err)
	}
	pm, err := pulled.RawManifest()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(lm, pm) {
		t.Errorf("%s: pulled manifest differs from the local one", what)
	}
	ls, err := pulled.Layers()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range ls {
		rc, err := l.Compressed() // fetched and verified against its digest
		if err != nil {
			t.Fatal(err)
		}
		_, err = bytes.NewBuffer(nil).ReadFrom(rc)
		rc.Close()
		if err != nil {
			t.Errorf("%s: layer: %v", what, err)
		}
	}
}

// twoPlatformLayout packs a small image for linux/amd64 and linux/arm64
// and assembles them, as hack/build-images.sh does for ate; it returns
// the index layout and the amd64 single-image layout.
func twoPlatformLayout(t *testing.T, dir string) (multi, single string) {
	t.Helper()
	ctx := context.Background()
	var layouts []string
	for _, arch := range []string{"amd64", "arm64"} {
		src := filepath.Join(dir, "src-"+arch)
		if err := os.MkdirAll(filepath.Join(src, "usr/local/bin"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(src, "usr/local/bin/tool"), []byte("a binary for "+arch+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(dir, arch)
		err := image.Pack(ctx, image.PackOptions{
			Out: out, Sources: []image.PackSource{{Src: src}}, Architecture: arch,
			Entrypoint: []string{"/usr/local/bin/tool"},
		})
		if err != nil {
			t.Fatal(err)
		}
		layouts = append(layouts, out)
	}
	multi = filepath.Join(dir, "multi")
	if err := image.PackIndex(ctx, image.IndexOptions{Out: multi, Layouts: layouts}); err != nil {
		t.Fatal(err)
	}
	return multi, layouts[0]
}

// layoutEntry returns the only entry of dir's index.json.
func layoutEntry(t *testing.T, dir string) v1.Descriptor {
	t.Helper()
	ii, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	im, err := ii.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 {
		t.Fatalf("%s: %d entries, want 1", dir, len(im.Manifests))
	}
	return im.Manifests[0]
}

// localIndex opens the image index the layout at dir names.
func localIndex(t *testing.T, dir string) v1.ImageIndex {
	t.Helper()
	ii, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := ii.ImageIndex(layoutEntry(t, dir).Digest)
	if err != nil {
		t.Fatal(err)
	}
	return idx
}

// dockerConfig writes DIR/config.json with an auths entry for host and
// returns DIR, a DOCKER_CONFIG.
func dockerConfig(t *testing.T, dir, host, user, password string) string {
	t.Helper()
	cfg := map[string]any{"auths": map[string]any{
		host: map[string]string{"auth": base64.StdEncoding.EncodeToString([]byte(user + ":" + password))},
	}}
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// ocipush runs ocipush with args in an environment holding only PATH, an
// empty HOME (no ~/.docker, no Podman auth.json) and env; it returns
// stdout, stderr and the exit code.
func ocipush(t *testing.T, env map[string]string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	home := t.TempDir()
	cmd.Env = []string{
		runMainEnv + "=1", "PATH=" + os.Getenv("PATH"), "HOME=" + home,
		"XDG_CONFIG_HOME=" + filepath.Join(home, ".config"), "XDG_RUNTIME_DIR=" + filepath.Join(home, "run"),
	}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		code = exit.ExitCode()
	default:
		t.Fatalf("run ocipush: %v", err)
	}
	return o.String(), e.String(), code
}

// testRegistry is a running registry server.
type testRegistry struct {
	host           string // 127.0.0.1:PORT
	caFile         string // the CA its certificate is issued by
	pool           *x509.CertPool
	user, password string
}

// transport trusts the registry's CA.
func (r *testRegistry) transport() http.RoundTripper {
	tr := remote.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: r.pool}
	return tr
}

// authed are the remote options of an authenticated client.
func (r *testRegistry) authed() []remote.Option {
	return []remote.Option{
		remote.WithTransport(r.transport()),
		remote.WithAuth(&authn.Basic{Username: r.user, Password: r.password}),
	}
}

// startRegistry runs $ATE_CACHE/bin/registry on a free loopback port
// with TLS and htpasswd authentication, stopped when the test ends. A
// missing binary fails the test: it is this test's subject.
func startRegistry(t *testing.T) *testRegistry {
	t.Helper()
	cache := os.Getenv("ATE_CACHE")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			t.Fatal(err)
		}
		cache = filepath.Join(home, ".cache", "ate")
	}
	bin := filepath.Join(cache, "bin", "registry")
	if fi, err := os.Stat(bin); err != nil || fi.Mode()&0o111 == 0 {
		t.Fatalf("no registry server at %s (%v): run hack/install-registry.sh (hack/test.sh installs it before this stage)", bin, err)
	}

	dir := t.TempDir()
	reg := &testRegistry{user: "pusher", password: randomHex(t)}
	reg.caFile, reg.pool = writeCerts(t, dir)
	hash, err := bcrypt.GenerateFromPassword([]byte(reg.password), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "htpasswd"), []byte(reg.user+":"+string(hash)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	config := fmt.Sprintf(`version: 0.1
log:
  level: info
  formatter: json
storage:
  filesystem:
    rootdirectory: %[1]s/data
http:
  accesslog:
    disabled: true
  addr: 127.0.0.1:0
  secret: %[2]s
  tls:
    certificate: %[1]s/server.crt
    key: %[1]s/server.key
auth:
  htpasswd:
    realm: ate-test
    path: %[1]s/htpasswd
`, dir, randomHex(t))
	cfgPath := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(cfgPath, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}

	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", cfgPath)
	cmd.Stdout, cmd.Stderr = pw, pw
	// REGISTRY_* variables would override the config file; OpenTelemetry
	// would export traces to whatever listens on localhost:4318.
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "OTEL_SDK_DISABLED=true", "OTEL_TRACES_EXPORTER=none"}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	var (
		mu     sync.Mutex
		logBuf bytes.Buffer
	)
	addr := make(chan string, 1)
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			mu.Lock()
			logBuf.Write(sc.Bytes())
			logBuf.WriteByte('\n')
			mu.Unlock()
			var line struct{ Msg string }
			if json.Unmarshal(sc.Bytes(), &line) == nil && strings.HasPrefix(line.Msg, "listening on ") {
				a := strings.TrimSuffix(strings.TrimPrefix(line.Msg, "listening on "), ", tls")
				select {
				case addr <- a:
				default:
				}
			}
		}
	}()
	registryLog := func() string {
		mu.Lock()
		defer mu.Unlock()
		return logBuf.String()
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		<-exited
		pr.Close()
		if t.Failed() {
			lines := strings.Split(strings.TrimSpace(registryLog()), "\n")
			t.Logf("registry log (last %d lines):\n%s", min(len(lines), 40), strings.Join(lines[max(0, len(lines)-40):], "\n"))
		}
	})

	select {
	case a := <-addr:
		if _, _, err := net.SplitHostPort(a); err != nil {
			t.Fatalf("registry says it listens on %q: %v", a, err)
		}
		reg.host = a
	case <-exited:
		t.Fatalf("registry exited before listening:\n%s", registryLog())
	case <-time.After(time.Minute):
		t.Fatalf("registry did not say where it listens within a minute:\n%s", registryLog())
	}

	// Ready when /v2/ answers, and asks for credentials: 401.
	client := &http.Client{Transport: reg.transport(), Timeout: 5 * time.Second}
	deadline := time.Now().Add(time.Minute)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		resp, err := client.Get("https://" + reg.host + "/v2/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusUnauthorized {
				break
			}
			t.Fatalf("GET /v2/ without credentials: %s, want 401 (is authentication configured?)", resp.Status)
		}
		if time.Now().After(deadline) {
			t.Fatalf("registry at %s not ready within a minute: %v\n%s", reg.host, err, registryLog())
		}
		select {
		case <-tick.C:
		case <-exited:
			t.Fatalf("registry exited:\n%s", registryLog())
		}
	}
	return reg
}

// writeCerts makes a throwaway CA and a server certificate for 127.0.0.1
// in dir (ca.crt, server.crt, server.key); it returns the CA's file and
// a pool holding it.
func writeCerts(t *testing.T, dir string) (string, *x509.CertPool) {
	t.Helper()
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ocipush test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []struct {
		name, typ string
		der       []byte
	}{{"ca.crt", "CERTIFICATE", caDER}, {"server.crt", "CERTIFICATE", der}, {"server.key", "EC PRIVATE KEY", keyDER}} {
		if err := os.WriteFile(filepath.Join(dir, f.name), pem.EncodeToMemory(&pem.Block{Type: f.typ, Bytes: f.der}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return filepath.Join(dir, "ca.crt"), pool
}

func randomHex(t *testing.T) string {
	t.Helper()
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", b)
}

// mustRef parses s as an image reference.
func mustRef(t *testing.T, s string) name.Reference {
	t.Helper()
	r, err := name.ParseReference(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
