package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/crypto/bcrypt"

	"substrate.dev/ate/internal/k8s/k8stest"
)

// registryPort is the registry's port on the host's address, chosen by
// chooseLayout.
var registryPort int

// registryUser is the one account of the registry: it may push and pull
// (distribution's htpasswd authentication has no per-repository rights).
const registryUser = "ate-ci"

// registry is the OCI registry the cluster pulls every image of ours
// from: CNCF distribution's `registry` server (hack/install-registry.sh),
// as an operator's private registry would be: outside the cluster, on
// the host's address (Pods reach it through the CNI bridge's
// masquerade), TLS with a certificate from the cluster's CA (which
// containerd trusts through its hosts directory and our components
// through the registry credentials' ca.crt), and htpasswd authentication,
// so an anonymous pull is refused.
type registry struct {
	addr     string // host:port
	password string
	// dockerConfig is a directory holding config.json with the account's
	// key ($DOCKER_CONFIG for pushes); caFile the CA that signed its
	// certificate.
	dockerConfig, caFile string
}

// startRegistry writes the registry's certificate, password file and
// configuration, starts it as one of the cluster's processes (its log in
// logs/registry.log) and points containerd at it.
func (k *kubeCluster) startRegistry(ctx context.Context) (*registry, error) {
	bin := filepath.Join(cacheDir(), "bin", "registry")
	if err := missing(bin); err != nil {
		return nil, fmt.Errorf("%w (hack/install-registry.sh builds it)", err)
	}
	r := &registry{addr: net.JoinHostPort(k.hostIP.String(), strconv.Itoa(registryPort)), password: randomToken(),
		dockerConfig: k.path("docker"), caFile: k.path("pki", "ca.crt")}
	for _, d := range []string{"registry/storage", "docker", "registry-hosts/" + r.addr} {
		if err := os.MkdirAll(k.path(d), 0o755); err != nil {
			return nil, err
		}
	}
	hash, err := bcrypt.GenerateFromPassword([]byte(r.password), bcrypt.DefaultCost)
	if err != nil {
		return nil, err
	}
	auth := base64.StdEncoding.EncodeToString([]byte(registryUser + ":" + r.password))
	dockerConfig, err := json.Marshal(map[string]any{"auths": map[string]any{r.addr: map[string]string{"auth": auth}}})
	if err != nil {
		return nil, err
	}
	files := map[string]string{
		"registry/htpasswd": registryUser + ":" + string(hash) + "\n",
		"registry/config.yml": fmt.Sprintf(`version: 0.1
log: {level: info, formatter: text}
storage:
  filesystem: {rootdirectory: %q}
  delete: {enabled: true}
http:
  addr: %q
  secret: %q
  tls: {certificate: %q, key: %q}
auth:
  htpasswd: {realm: ate-test-registry, path: %q}
`, k.path("registry", "storage"), r.addr, randomToken(), k.path("pki", "registry.crt"), k.path("pki", "registry.key"), k.path("registry", "htpasswd")),
		"docker/config.json": string(dockerConfig),
		// containerd reads its hosts directory at every pull: this
		// registry is reached over HTTPS, trusting the cluster's CA.
		"registry-hosts/" + r.addr + "/hosts.toml": fmt.Sprintf(`server = "https://%[1]s"
[host."https://%[1]s"]
  capabilities = ["pull", "resolve"]
  ca = %[2]q
`, r.addr, r.caFile),
	}
	for name, content := range files {
		if err := os.WriteFile(k.path(name), []byte(content), 0o600); err != nil {
			return nil, err
		}
	}
	if err := k.start("registry", bin, "serve", k.path("registry", "config.yml")); err != nil {
		return nil, err
	}
	// Ready when it answers /v2/ over TLS, refusing the anonymous caller.
	pool := x509.NewCertPool()
	ca, err := os.ReadFile(r.caFile)
	if err != nil || !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("the cluster's CA %s: %v", r.caFile, err)
	}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer client.CloseIdleConnections()
	err = k.waitFor("registry ready", 30*time.Second, func() error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+r.addr+"/v2/", nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			return fmt.Errorf("GET /v2/ anonymously: %s, want 401", resp.Status)
		}
		return nil
	})
	return r, err
}

// pushedImages are the images `make image-push` pushes.
var pushedImages = []string{"ate", "counter", "python-notes"}

// push pushes our images to r under tag with `make image-push`, as the
// README says, with the registry's account ($DOCKER_CONFIG) and trusting
// its CA ($SSL_CERT_FILE), and returns each image's reference by digest
// (build/images/pushed/<name>.ref).
func (r *registry) push(ctx context.Context, tag string) (map[string]string, error) {
	root := k8stest.RepoRoot()
	cmd := exec.CommandContext(ctx, "make", "--no-print-directory", "image-push", "REGISTRY="+r.addr, "TAG="+tag)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "DOCKER_CONFIG="+r.dockerConfig, "SSL_CERT_FILE="+r.caFile)
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("make image-push: %w: %s", err, out)
	}
	refs := map[string]string{}
	for _, name := range pushedImages {
		b, err := os.ReadFile(filepath.Join(root, "build", "images", "pushed", name+".ref"))
		if err != nil {
			return nil, err
		}
		ref := strings.TrimSpace(string(b))
		if !strings.HasPrefix(ref, r.addr+"/ate/"+name+"@sha256:") {
			return nil, fmt.Errorf("make image-push recorded %q for %s, want %s/ate/%s@sha256:…", ref, name, r.addr, name)
		}
		refs[name] = ref
	}
	return refs, nil
}
