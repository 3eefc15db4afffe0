package cli

import (
	"bytes"
	"context"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/ateconfig"
	"substrate.dev/ate/internal/k8s/k8stest"
)

// publishAPIServer makes the API server's Service (KubeService, port
// KubePortName 7070 → the fake's port) and an EndpointSlice pointing at
// addr in namespace ns, the way deploy/ and the EndpointSlice controller
// would. The slice is of type FQDN: the API server refuses loopback
// addresses in IPv4 slices, and "127.0.0.2" is a valid name.
func publishAPIServer(t *testing.T, env *k8stest.Env, ns, addr string) {
	t.Helper()
	ctx := t.Context()
	host, portStr, _ := net.SplitHostPort(addr)
	port, _ := strconv.Atoi(portStr)
	cs := env.Clientset
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: KubeService},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{
			Name: KubePortName, Port: 7070, TargetPort: intstr.FromInt32(int32(port)), Protocol: corev1.ProtocolTCP,
		}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.DiscoveryV1().EndpointSlices(ns).Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: KubeService + "-x", Labels: map[string]string{discoveryv1.LabelServiceName: KubeService}},
		AddressType: discoveryv1.AddressTypeFQDN,
		Ports:       []discoveryv1.EndpointPort{{Name: new(KubePortName), Port: new(int32(port))}},
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{host}, Conditions: discoveryv1.EndpointConditions{Ready: new(true)}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestKubernetesMode: the CLI invoked as kubectl-ate, or given
// --kubeconfig or --context, finds the API server as Service
// ate-apiserver's port grpc in --ate-namespace (default ate-system)
// through a real kube-apiserver, and lists what that server returns;
// --server still wins, and plain `ate` ignores $KUBECONFIG.
func TestKubernetesMode(t *testing.T) {
	env := k8stest.Start(t)
	inSystem := newFake() // its actors: counter-0, counter-1
	publishAPIServer(t, env, DefaultKubeNamespace, serveOn(t, inSystem, "127.0.0.2"))
	inTeam := newFake()
	inTeam.addActor(&atev1.Actor{Atespace: "default", Name: "only-in-team", Template: "counter", CreateTime: ago(time.Minute)})
	publishAPIServer(t, env, "team-ate", serveOn(t, inTeam, "127.0.0.3"))
	direct := newFake()
	direct.addActor(&atev1.Actor{Atespace: "default", Name: "only-direct", Template: "counter", CreateTime: ago(time.Minute)})
	directAddr := serveOn(t, direct, "127.0.0.4")
	t.Setenv("KUBECONFIG", env.Kubeconfig) // client-go reads the real environment

	noConfig := t.TempDir() + "/absent.yaml"
	for _, tc := range []struct {
		name    string
		program string
		args    []string
		want    string // in stdout, or in stderr when fails
		fails   bool
	}{
		{name: "kubectl-ate through $KUBECONFIG", program: KubectlPluginName, want: "counter-1"},
		{name: "kubectl-ate --kubeconfig", program: KubectlPluginName, args: []string{"--kubeconfig", env.Kubeconfig}, want: "counter-1"},
		{name: "ate --kubeconfig", program: "ate", args: []string{"--kubeconfig", env.Kubeconfig}, want: "counter-1"},
		{name: "ate --context", program: "ate", args: []string{"--context", "envtest"}, want: "counter-1"},
		{name: "kubectl-ate --ate-namespace", program: KubectlPluginName, args: []string{"--ate-namespace", "team-ate"}, want: "only-in-team"},
		{name: "kubectl-ate --server wins", program: KubectlPluginName, args: []string{"--server", directAddr}, want: "only-direct"},
		{name: "plain ate ignores $KUBECONFIG", program: "ate", fails: true, want: "no client config"},
		{name: "kubectl-ate, no such context", program: KubectlPluginName, args: []string{"--context", "nope"}, fails: true, want: "nope"},
		{name: "kubectl-ate, bad namespace", program: KubectlPluginName, args: []string{"--ate-namespace", "Not_A_Namespace"}, fails: true, want: "--ate-namespace"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := NewRootCommand(WithProgramName(tc.program), WithGetenv(func(string) string { return "" }), WithNow(func() time.Time { return testNow }))
			var stdout, stderr bytes.Buffer
			root.SetOut(&stdout)
			root.SetErr(&stderr)
			root.SetArgs(append(append([]string{"--config", noConfig}, tc.args...), "get", "actors"))
			ctx, cancel := context.WithTimeout(t.Context(), 40*time.Second)
			defer cancel()
			code := Main(ctx, root)
			if tc.fails {
				if code == 0 || !strings.Contains(stderr.String(), tc.want) {
					t.Fatalf("exit %d, stderr %q; want a failure naming %q", code, stderr.String(), tc.want)
				}
				return
			}
			if code != 0 || !strings.Contains(stdout.String(), tc.want) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want %q listed", code, stdout.String(), stderr.String(), tc.want)
			}
		})
	}

	// A local `ate up` wrote $HOME/.ate/config.yaml (its server, CA and
	// admin token), and its user made a context of it current; kubectl
	// ate talks to the cluster and must not use any of it — it once sent
	// the local token and CA to the cluster's API.
	home := t.TempDir()
	path := filepath.Join(home, ".ate", "config.yaml")
	local := ateconfig.Config{Server: closedAddr(t), Token: "local-admin-token", CertificateAuthority: filepath.Join(home, "no-such-ca.crt")}
	localFile := &ateconfig.File{Config: local, CurrentContext: "local", Contexts: []ateconfig.Context{{Name: "local", Config: local}}}
	t.Run("kubectl-ate ignores the local ate up's config", func(t *testing.T) {
		if err := ateconfig.WriteFile(path, localFile); err != nil {
			t.Fatal(err)
		}
		if res := runKubectlAte(t, home, "get", "actors"); res.code != 0 || !strings.Contains(res.stdout, "counter-1") {
			t.Fatalf("%+v; want the cluster's actors", res)
		}
	})

	// A cluster installation with TLS and tokens, beside the local one
	// in the same file: kubectl ate reaches it with the ate context named
	// like the kubeconfig context ("envtest"), and without one uses
	// nothing of the file, and says so.
	secure, caFile := serveTLS(t, newFake(), "127.0.0.5", "cluster-token")
	publishAPIServer(t, env, "tls-ate", secure)
	t.Run("kubectl-ate uses the ate context named like the kube context", func(t *testing.T) {
		f := *localFile
		f.Contexts = append(slices.Clone(f.Contexts), ateconfig.Context{Name: "envtest", Config: ateconfig.Config{CertificateAuthority: caFile, Token: "cluster-token"}})
		if err := ateconfig.WriteFile(path, &f); err != nil {
			t.Fatal(err)
		}
		if res := runKubectlAte(t, home, "--ate-namespace", "tls-ate", "get", "actors"); res.code != 0 || !strings.Contains(res.stdout, "counter-1") {
			t.Fatalf("%+v; want the TLS cluster's actors", res)
		}
	})
	t.Run("kubectl-ate without such a context: no CA, no token, and says so", func(t *testing.T) {
		if err := ateconfig.WriteFile(path, localFile); err != nil {
			t.Fatal(err)
		}
		res := runKubectlAte(t, home, "--ate-namespace", "tls-ate", "get", "actors")
		for _, want := range []string{"did not answer in plaintext: if it speaks TLS, pass --certificate-authority CA.crt or store it in the ate context named like the kubeconfig context, `ate config set-context envtest --certificate-authority CA.crt --token TOKEN`", `(no client config: Kubernetes mode, no ate context named "envtest" in ` + path + ")"} {
			if res.code == 0 || !strings.Contains(res.stderr, want) {
				t.Errorf("%+v; want a failure saying %q", res, want)
			}
		}
	})
}

// runKubectlAte runs `kubectl ate args...` with $HOME home (the default
// client config under it) and the kubeconfig of the real environment.
func runKubectlAte(t *testing.T, home string, args ...string) result {
	t.Helper()
	root := NewRootCommand(WithProgramName(KubectlPluginName), WithGetenv(func(k string) string {
		return map[string]string{"HOME": home}[k]
	}), WithNow(func() time.Time { return testNow }))
	var stdout, stderr bytes.Buffer
	root.SetOut(&stdout)
	root.SetErr(&stderr)
	root.SetArgs(args)
	ctx, cancel := context.WithTimeout(t.Context(), 40*time.Second)
	defer cancel()
	code := Main(ctx, root)
	return result{stdout: stdout.String(), stderr: stderr.String(), code: code}
}
