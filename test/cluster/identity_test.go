package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// workerPods lists the example pool's running worker Pods: name → IP.
func workerPods(ctx context.Context) (map[string]string, error) {
	out, err := kc.kubectl(ctx, "-n", ns, "get", "pods", "-l", "app.kubernetes.io/name=ate-worker", "-o",
		`jsonpath={range .items[*]}{.metadata.name} {.status.podIP} {.status.phase} {.metadata.deletionTimestamp}{"\n"}{end}`)
	if err != nil {
		return nil, err
	}
	pods := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[2] == "Running" {
			pods[f[0]] = f[1]
		}
	}
	return pods, nil
}

// tunnelLeaf is the certificate a worker Pod's tunnel presents to a
// router (probe, a router certificate of the installation's CA), checked
// against roots.
func tunnelLeaf(ip string, probe tls.Certificate, roots *x509.CertPool) (*x509.Certificate, error) {
	d := &net.Dialer{Timeout: 5 * time.Second}
	conn, err := tls.DialWithDialer(d, "tcp", net.JoinHostPort(ip, "7071"), &tls.Config{
		Certificates: []tls.Certificate{probe}, NextProtos: []string{"http/1.1"},
		InsecureSkipVerify: true, // verified below: identities, not host names
	})
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	leaf := conn.ConnectionState().PeerCertificates[0]
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		return nil, err
	}
	return leaf, nil
}

// testWorkerIdentity: on the chart's defaults, each worker Pod's node
// certificate names exactly its Pod and is renewed while requests flow
// (nodeCertTTL is 90 s in the test's values: a renewal a minute), none
// failing; a caller without an API credential (from the host, and from a
// Pod), or with a ServiceAccount token of the cluster, is Unauthenticated; a Pod of the workers'
// ServiceAccount that is not a worker Pod gets no node certificate for its
// token, nor does a worker Pod's token under another node name. It also
// times 40 activations through the router Service (BENCHMARKS.md), as the
// plaintext story does.
func testWorkerIdentity(t *testing.T, ctx context.Context, in *install, dir string) {
	probeDir := filepath.Join(dir, "probe")
	if _, err := in.ateBin(ctx, "certs", "issue", "--ca-dir", in.caDir, "--component", "router", "--name", "probe", "--out", probeDir); err != nil {
		t.Fatal(err)
	}
	probe, err := tls.LoadX509KeyPair(filepath.Join(probeDir, "tls.crt"), filepath.Join(probeDir, "tls.key"))
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(filepath.Join(in.caDir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	pods, err := workerPods(ctx)
	if err != nil || len(pods) != 3 {
		t.Fatalf("worker Pods %v: %v", pods, err)
	}

	// Renewal under load: an actor of its own, so the stories' counts
	// stay theirs.
	if _, err := in.ate(ctx, "create", "actor", "rotation-1", "--template", "counter"); err != nil {
		t.Fatal(err)
	}
	l, err := startLoad(ctx, 10, []string{"default/rotation-1"})
	if err != nil {
		t.Fatal(err)
	}
	serials := map[string]map[string]bool{}
	deadline := time.Now().Add(100 * time.Second)
	for time.Now().Before(deadline) {
		for name, ip := range pods {
			leaf, err := tunnelLeaf(ip, probe, roots)
			if err != nil {
				t.Errorf("worker Pod %s: %v", name, err)
				continue
			}
			if want := "spiffe://ate.local/ate/node/" + name; len(leaf.URIs) != 1 || leaf.URIs[0].String() != want {
				t.Errorf("worker Pod %s presents %v, want exactly %s", name, leaf.URIs, want)
			}
			if serials[name] == nil {
				serials[name] = map[string]bool{}
			}
			serials[name][leaf.SerialNumber.String()] = true
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(5 * time.Second):
		}
	}
	sent, ok, failures := l.finish()
	t.Logf("rotation under load: %d sent, %d ok; certificates seen per Pod: %v", sent, ok, func() map[string]int {
		n := map[string]int{}
		for p, s := range serials {
			n[p] = len(s)
		}
		return n
	}())
	if len(failures) > 0 || sent == 0 {
		t.Errorf("%d of %d requests failed while node certificates rotated:\n%s", len(failures), sent, summary(failures))
	}
	for name := range pods {
		if len(serials[name]) < 2 {
			t.Errorf("worker Pod %s presented %d certificate(s) in 100 s, want a renewal (90 s leaves)", name, len(serials[name]))
		}
	}

	in.activations(t, ctx, "chart defaults (TLS, API tokens)", "default/rotation-1", "/", 40)

	// No API credential, or the cluster's own ServiceAccount token (not
	// an API credential on the chart's defaults): Unauthenticated.
	noToken := filepath.Join(dir, "no-token.yaml")
	if err := in.setContext(ctx, noToken, "--certificate-authority", filepath.Join(in.caDir, "ca.crt")); err != nil {
		t.Fatal(err)
	}
	saToken, err := kc.kubectl(ctx, "-n", ns, "create", "token", "default")
	if err != nil {
		t.Fatal(err)
	}
	anon := &install{kubectlAte: in.kubectlAte, clientConfig: noToken}
	for name, args := range map[string][]string{
		"no credential":                {"get", "actors"},
		"a ServiceAccount's own token": {"--token", strings.TrimSpace(saToken), "get", "actors"},
	} {
		// The CLI prints UNAUTHENTICATED's message.
		if out, err := anon.ate(ctx, args...); err == nil || !strings.Contains(out, "authentication required") {
			t.Errorf("%s: kubectl ate get actors = %v %q, want Unauthenticated", name, err, out)
		}
	}

	// The same from inside the cluster: a Pod that trusts the
	// installation's CA (the workers' CA ConfigMap) but has no API
	// credential is Unauthenticated on the API server's Pod IP.
	apiIP, err := kc.kubectl(ctx, "-n", ns, "get", "pods", "-l", "app.kubernetes.io/component=apiserver", "-o", "jsonpath={.items[0].status.podIP}")
	if err != nil || strings.TrimSpace(apiIP) == "" {
		t.Fatalf("an API server Pod's IP: %q %v", apiIP, err)
	}
	apiIP = strings.TrimSpace(apiIP)
	if _, err := kc.apply(ctx, `apiVersion: v1
kind: Pod
metadata: {name: no-credentials, namespace: `+ns+`}
spec:
  restartPolicy: Never
  automountServiceAccountToken: false
  imagePullSecrets: [{name: ate-pull}]
  volumes: [{name: ca, configMap: {name: example-workers-ca}}]
  containers:
  - name: c
    image: `+kc.reg.addr+`/ate/ate:test
    args: [get, actors, --server, "`+net.JoinHostPort(apiIP, "7070")+`", --certificate-authority, /ca/ca.crt]
    env: [{name: HOME, value: /tmp}]
    volumeMounts: [{name: ca, mountPath: /ca}]
`); err != nil {
		t.Fatal(err)
	}
	if _, err := kc.kubectl(ctx, "-n", ns, "wait", "pod/no-credentials", "--for=jsonpath={.status.phase}=Failed", "--timeout=90s"); err != nil {
		out, _ := kc.kubectl(ctx, "-n", ns, "describe", "pod", "no-credentials")
		t.Fatalf("a Pod without API credentials calling the API: %v\n%s", err, out)
	}
	if logs, err := kc.kubectl(ctx, "-n", ns, "logs", "no-credentials"); err != nil || !strings.Contains(logs, "authentication required") {
		t.Errorf("a Pod without API credentials: %q %v, want Unauthenticated", logs, err)
	}
	_, _ = kc.kubectl(ctx, "-n", ns, "delete", "pod", "no-credentials", "--wait=false")

	// A Pod of the workers' ServiceAccount that no pool made.
	if _, err := kc.apply(ctx, `apiVersion: v1
kind: Pod
metadata: {name: intruder, namespace: `+ns+`}
spec:
  serviceAccountName: ate-worker
  restartPolicy: Never
  imagePullSecrets: [{name: ate-pull}]
  containers:
  - {name: c, image: `+kc.reg.addr+`/ate/ate:test, command: [ate, --help]}
`); err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = kc.kubectl(context.Background(), "-n", ns, "delete", "pod", "intruder", "--wait=false") }()
	var worker string
	for name := range pods {
		worker = name
	}
	for _, tc := range []struct{ pod, name, want string }{
		{"intruder", "intruder", "may not be a node: it is not a worker Pod of a WorkerPool"},
		{worker, worker + "-twin", "is --name the Pod's name?"},
	} {
		token, err := kc.kubectl(ctx, "-n", ns, "create", "token", "ate-worker", "--audience", "ate-node",
			"--bound-object-kind", "Pod", "--bound-object-name", tc.pod, "--duration", "10m")
		if err != nil {
			t.Fatal(err)
		}
		boot := filepath.Join(dir, "boot-"+tc.name)
		if err := os.MkdirAll(boot, 0o700); err != nil {
			t.Fatal(err)
		}
		for f, b := range map[string][]byte{"token": []byte(strings.TrimSpace(token)), "ca.crt": caPEM} {
			if err := os.WriteFile(filepath.Join(boot, f), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		nctx, cancel := context.WithTimeout(ctx, time.Minute)
		out, err := in.ateBin(nctx, "node", "--api", net.JoinHostPort(apiIP, "7070"), "--name", tc.name,
			"--tls-bootstrap-dir", boot, "--data-dir", filepath.Join(dir, "node-"+tc.name))
		timedOut := nctx.Err() != nil
		cancel()
		if err == nil || timedOut || !strings.Contains(out, tc.want) {
			t.Errorf("ate node --name %s with Pod %s's token: %v, want a refusal saying %q:\n%s", tc.name, tc.pod, err, tc.want, out)
		}
	}
}
