package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"substrate.dev/ate/internal/k8s/k8stest"
)

// counterTemplateYAML is a template of the counter example named name,
// idle after idleAfter, plus extra top-level YAML; its image is the
// counter example in the registry, by digest, which the API server and
// the worker Pods pull with the default atespace's key.
func counterTemplateYAML(name, idleAfter, extra string) string {
	return fmt.Sprintf(`name: %s
containers:
- name: counter
  image: %s
  ports: [8080]
wakeupProbe:
  httpGet: {path: /healthz, port: 8080}
newActors: golden
idle: {after: %s, action: suspend}
%s`, name, kc.images["counter"], idleAfter, extra)
}

// TestSubstrate installs Substrate with the two Helm commands of the
// README and then runs the stories of issue 17 in order, each on what the
// previous left.
func TestSubstrate(t *testing.T) {
	evidence(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	dir := t.TempDir()
	host, err := startHostServices(ctx, dir, kc.hostIP)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(host.stop)
	in := &install{host: host, kubectlAte: filepath.Join(dir, "bin"), counts: map[string]int{}}
	build := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(in.kubectlAte, "kubectl-ate"), "./cmd/ate")
	build.Dir = k8stest.RepoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v: %s", err, out)
	}
	// The same images under a second tag, for the upgrade.
	if _, err := kc.reg.push(ctx, "test2"); err != nil {
		t.Fatal(err)
	}

	t.Run("install", func(t *testing.T) { testInstall(t, ctx, in, dir) })
	if t.Failed() {
		return
	}
	for _, story := range []struct {
		name string
		run  func(*testing.T, context.Context, *install)
	}{
		{"worker identity", func(t *testing.T, ctx context.Context, in *install) { testWorkerIdentity(t, ctx, in, dir) }},
		{"python example", func(t *testing.T, ctx context.Context, in *install) { testPython(t, ctx, in, dir) }},
		{"upgrade keeps actors", func(t *testing.T, ctx context.Context, in *install) { testUpgradeImage(t, ctx, in, dir) }},
		{"worker Pod deleted", testWorkerPodDeleted},
		{"drain", testDrain},
		{"router Pod replaced", func(t *testing.T, ctx context.Context, in *install) { testRouterPodReplaced(t, ctx, in, dir) }},
		{"API scale out", testAPIScaleOut},
		{"API rolling restart", func(t *testing.T, ctx context.Context, in *install) { testAPIRollingRestart(t, ctx, in, dir) }},
		{"evidence", testEvidence},
		{"controller flap and CRD and RBAC upgrade", func(t *testing.T, ctx context.Context, in *install) { testFlapAndUpgrade(t, ctx, in, dir) }},
		{"plaintext variant", testPlaintext},
	} {
		if !t.Run(story.name, func(t *testing.T) { story.run(t, ctx, in) }) {
			return
		}
	}
}

func testInstall(t *testing.T, ctx context.Context, in *install, dir string) {
	in.valuesFile = filepath.Join(dir, "values.yaml")
	if err := os.WriteFile(in.valuesFile, []byte(in.values("test")), 0o600); err != nil {
		t.Fatal(err)
	}
	// What the README says to make before helm install: the namespace,
	// the S3 credentials, the CA and the components' Secrets (`ate certs
	// init`, `ate certs secrets`), and the API's admin token.
	token := randomToken()
	for _, args := range [][]string{
		{"create", "namespace", ns},
		{"label", "namespace", ns, "pod-security.kubernetes.io/enforce=privileged", "ate.substrate.dev/worker-pools=allowed"},
		{"-n", ns, "create", "secret", "generic", "ate-s3-credentials",
			"--from-literal=AWS_ACCESS_KEY_ID=" + in.host.accessKey, "--from-literal=AWS_SECRET_ACCESS_KEY=" + in.host.secretKey},
		{"-n", ns, "create", "secret", "generic", "ate-tokens", "--from-literal=tokens.csv=" + token + `,admin,admin,"ate:admins"`},
		// The kubelet's key for the ate image (imagePullSecrets), and the
		// default atespace's for template images, with the registry's CA.
		{"-n", ns, "create", "secret", "docker-registry", "ate-pull", "--docker-server=" + kc.reg.addr,
			"--docker-username=" + registryUser, "--docker-password=" + kc.reg.password},
		{"-n", ns, "create", "secret", "generic", "ate-registry-credentials",
			"--from-file=default.json=" + filepath.Join(kc.reg.dockerConfig, "config.json"), "--from-file=ca.crt=" + kc.reg.caFile},
	} {
		if _, err := kc.kubectl(ctx, args...); err != nil {
			t.Fatal(err)
		}
	}
	in.caDir = filepath.Join(dir, "ca")
	if _, err := in.ateBin(ctx, "certs", "init", "--dir", in.caDir); err != nil {
		t.Fatal(err)
	}
	secrets, err := in.ateBin(ctx, "certs", "secrets", "--ca-dir", in.caDir, "--namespace", ns)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kc.apply(ctx, secrets, "-n", ns); err != nil {
		t.Fatal(err)
	}
	// kubectl ate's CA and token: the client config's context named like
	// the kubeconfig's (a file of the test's own, $ATE_CONFIG, rather
	// than the machine's ~/.ate/config.yaml).
	in.clientConfig = filepath.Join(dir, "ate-config.yaml")
	if err := in.setContext(ctx, in.clientConfig, "--certificate-authority", filepath.Join(in.caDir, "ca.crt"), "--token", token); err != nil {
		t.Fatal(err)
	}
	if _, err := helm(ctx, "install", "substrate-crds", "deploy/helm/substrate-crds", "--wait"); err != nil {
		t.Fatal(err)
	}
	if _, err := helm(ctx, "install", "substrate", "deploy/helm/substrate", "-n", ns, "-f", in.valuesFile); err != nil {
		t.Fatal(err)
	}
	waitRollout(t, ctx, "ate-apiserver", "ate-router", "ate-controller")
	waitPool(t, ctx, 3)
	if err := writeAndCreateTemplate(ctx, in, dir, "counter", counterTemplateYAML("counter", "10m", "")); err != nil {
		t.Fatal(err)
	}
	if _, err := in.ate(ctx, "create", "actor", "counter-1", "--template", "counter"); err != nil {
		t.Fatal(err)
	}
	in.hit(t, ctx, "default/counter-1")
	in.hit(t, ctx, "default/counter-1")
	if _, err := in.ate(ctx, "suspend", "actor", "counter-1"); err != nil {
		t.Fatal(err)
	}
	out, err := in.ate(ctx, "get", "actors")
	if err != nil || !strings.Contains(out, "SUSPENDED") {
		t.Fatalf("kubectl ate get actors after suspend: %q %v", out, err)
	}
	// Resumed by the request, with its memory.
	in.hit(t, ctx, "default/counter-1")

	testBeforeGoldenIsReady(t, ctx, in, dir)

	// A tenant of an atespace with no key for the registry: its template
	// naming the same private image is refused when it is created, with
	// the registry's refusal, not when an actor first starts.
	if _, err := in.ate(ctx, "create", "atespace", "keyless"); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(dir, "keyless.yaml")
	if err := os.WriteFile(f, []byte(counterTemplateYAML("counter", "10m", "")), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := in.ate(ctx, "-n", "keyless", "create", "template", "-f", f); err == nil || !strings.Contains(out, "registry refused the pull") {
		t.Fatalf("a template of an atespace without registry credentials: %v %q, want it refused with the registry's refusal", err, out)
	}
}

// testBeforeGoldenIsReady: an actor created and requested at once after
// its template, without waiting for the template's golden snapshot (as
// a user who skips --wait does), counts in order, is suspended and
// resumes with its memory. Once, in about ten runs, such an actor turned
// CRASHED after answering two requests: a replica that had not yet heard
// the nodes took their workers for lost (fixed since; this is the path
// the cluster suite had avoided).
func testBeforeGoldenIsReady(t *testing.T, ctx context.Context, in *install, dir string) {
	f := filepath.Join(dir, "counter-cold.yaml")
	if err := os.WriteFile(f, []byte(counterTemplateYAML("counter-cold", "10m", "")), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := in.ate(ctx, "create", "template", "-f", f); err != nil {
		t.Fatal(err)
	}
	if _, err := in.ate(ctx, "create", "actor", "cold-1", "--template", "counter-cold"); err != nil {
		t.Fatal(err)
	}
	if out, err := in.ate(ctx, "get", "template", "counter-cold", "-o", "json"); err == nil {
		t.Logf("counter-cold when cold-1 is first requested: %s", out)
	}
	in.hit(t, ctx, "default/cold-1")
	in.hit(t, ctx, "default/cold-1")
	if _, err := in.ate(ctx, "suspend", "actor", "cold-1"); err != nil {
		t.Fatal(err)
	}
	if st, err := in.actorState(ctx, "default/cold-1"); err != nil || st != "SUSPENDED" {
		t.Fatalf("cold-1 after its suspend: %q %v, want SUSPENDED", st, err)
	}
	in.hit(t, ctx, "default/cold-1")
	// Its worker back for the stories that follow, which count on them.
	if _, err := in.ate(ctx, "suspend", "actor", "cold-1"); err != nil {
		t.Fatal(err)
	}
}

// writeAndCreateTemplate creates template name from its YAML with
// kubectl ate create template -f --wait (until its golden snapshot is
// ready), as a user would (testBeforeGoldenIsReady takes the other path).
func writeAndCreateTemplate(ctx context.Context, in *install, dir, name, yaml string) error {
	f := filepath.Join(dir, name+".yaml")
	if err := os.WriteFile(f, []byte(yaml), 0o644); err != nil {
		return err
	}
	_, err := in.ate(ctx, "create", "template", "-f", f, "--wait")
	return err
}

// waitPool waits until the example WorkerPool reports ready worker Pods.
func waitPool(t *testing.T, ctx context.Context, ready int) {
	t.Helper()
	if _, err := kc.kubectl(ctx, "-n", ns, "wait", "workerpool/example",
		"--for=jsonpath={.status.readyReplicas}="+itoa(ready), "--timeout=240s"); err != nil {
		t.Fatal(err)
	}
}

func testUpgradeImage(t *testing.T, ctx context.Context, in *install, dir string) {
	if err := os.WriteFile(in.valuesFile, []byte(in.values("test2")), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := helm(ctx, "upgrade", "substrate", "deploy/helm/substrate", "-n", ns, "-f", in.valuesFile); err != nil {
		t.Fatal(err)
	}
	// The controller gives worker Pods its own image: the worker
	// Deployment changes once the new controller runs, so wait for every
	// Pod, not for one rollout.
	image := kc.reg.addr + "/ate/ate:test2"
	if err := kc.waitFor("every ate-system Pod on "+image, 4*time.Minute, func() error {
		out, err := kc.kubectl(ctx, "-n", ns, "get", "pods", "-o",
			`jsonpath={range .items[*]}{.metadata.name} {.spec.containers[0].image} {.metadata.deletionTimestamp}{"\n"}{end}`)
		if err != nil {
			return err
		}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if f := strings.Fields(line); len(f) != 2 || f[1] != image {
				return fmt.Errorf("pod %q", line)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	waitRollout(t, ctx, "ate-apiserver", "ate-router", "ate-controller", "example-workers")
	waitPool(t, ctx, 3)
	in.hit(t, ctx, "default/counter-1")
}

// testPlaintext: the plaintext variant (tls.mode none, no API
// authentication) still runs: the installation upgraded to it serves its
// actors with their memory, and kubectl ate reaches the API with no CA
// and no token.
func testPlaintext(t *testing.T, ctx context.Context, in *install) {
	// Switching modes is not a live transition: the TLS nodes cannot
	// reach the plaintext API servers to drain, so they end LOST and
	// what their actors did since their last snapshot is lost with them
	// (seen: a count one short). Suspend first, as docs/kubernetes.md says.
	for _, actor := range []string{"counter-1", "rotation-1"} {
		if _, err := in.ate(ctx, "suspend", "actor", actor); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := helm(ctx, "upgrade", "substrate", "deploy/helm/substrate", "-n", ns, "-f", in.valuesFile,
		"--set", "tls.mode=none", "--set", "auth.tokenSecret="); err != nil {
		t.Fatal(err)
	}
	waitRollout(t, ctx, "ate-apiserver", "ate-router", "ate-controller")
	// The controller gives worker Pods --insecure: a new worker rollout.
	if err := kc.waitFor("worker Pods running ate node --insecure", 4*time.Minute, func() error {
		out, err := kc.kubectl(ctx, "-n", ns, "get", "deployment", "example-workers", "-o", "jsonpath={.spec.template.spec.containers[0].args}")
		if err != nil {
			return err
		}
		if !strings.Contains(out, "--insecure") {
			return fmt.Errorf("args %s", out)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	waitRollout(t, ctx, "example-workers")
	waitPool(t, ctx, 3)
	// A client config with no context for this cluster: no CA, no token.
	in.clientConfig = filepath.Join(t.TempDir(), "none.yaml")
	// The TLS worker Pods are gone from the cluster and from the API's
	// nodes (a rollout counts them done while they still drain): the mode
	// switch is not a live transition, whose mixed minutes fail requests.
	if err := kc.waitFor("only plaintext nodes", 4*time.Minute, func() error {
		out, err := kc.kubectl(ctx, "-n", ns, "get", "pods", "-l", "app.kubernetes.io/name=ate-worker", "-o",
			`jsonpath={range .items[*]}{.metadata.name} {.metadata.deletionTimestamp}{"\n"}{end}`)
		if err != nil {
			return err
		}
		pods := map[string]bool{}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if f := strings.Fields(line); len(f) != 1 {
				return fmt.Errorf("worker Pods %q: one is terminating", out)
			} else {
				pods[f[0]] = true
			}
		}
		nodes, err := in.ate(ctx, "get", "nodes")
		if err != nil {
			return err
		}
		// The TLS nodes could not say goodbye to the plaintext API
		// servers: they are LOST, with no workers, and listed a while.
		ready := 0
		for _, line := range strings.Split(strings.TrimSpace(nodes), "\n")[1:] {
			f := strings.Fields(line)
			switch {
			case len(f) < 2:
				return fmt.Errorf("nodes %q", nodes)
			case pods[f[0]] && f[1] == "READY":
				ready++
			case !pods[f[0]] && f[1] == "LOST":
			default: // an old node still draining, a new one not ready
				return fmt.Errorf("nodes %q, worker Pods %v", nodes, pods)
			}
		}
		if ready != len(pods) {
			return fmt.Errorf("nodes %q, worker Pods %v", nodes, pods)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if out, err := in.ate(ctx, "get", "actors"); err != nil || !strings.Contains(out, "counter-1") {
		t.Fatalf("kubectl ate get actors over plaintext: %q %v", out, err)
	}
	in.hit(t, ctx, "default/counter-1")
	in.activations(t, ctx, "tls.mode none (plaintext, no tokens)", "default/rotation-1", "/", 40)
}
