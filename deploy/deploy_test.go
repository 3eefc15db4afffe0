// Package deploy holds the Kubernetes manifests (kustomize base and
// overlays, Helm charts) and, here, their tests: the charts lint, every
// rendering is accepted by a real kube-apiserver (server-side apply,
// dry-run), the CRD chart is deploy/crds, CEL validation reaches users,
// RBAC grants each component what it needs and no more, and the router's
// and API server's Deployments keep the promises docs/kubernetes.md makes.
//
// helm and kustomize come from hack/install-kube.sh (k8stest.BinDir); a
// missing one fails the test.
package deploy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"substrate.dev/ate/internal/k8s/controller"
	"substrate.dev/ate/internal/k8s/k8stest"
)

const namespace = "ate-system"

// apiTarget is how every component dials the API server.
const apiTarget = "k8s:///ate-apiserver.ate-system:grpc"

// dir is this package's directory, deploy/.
func dir() string { return filepath.Join(k8stest.RepoRoot(), "deploy") }

// tool is the path of a binary hack/install-kube.sh builds; a missing one
// fails the test.
func tool(t testing.TB, name string) string {
	t.Helper()
	p := filepath.Join(k8stest.BinDir(), name)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s not installed (%v): run hack/install-kube.sh", name, err)
	}
	return p
}

// run runs a tool and returns its standard output; a failure fails t
// with its standard error.
func run(t testing.TB, bin string, args ...string) []byte {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s%s", filepath.Base(bin), strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.Bytes()
}

// A rendering of the manifests, as an installation would apply them.
type rendering struct {
	name string
	// kustomize: the directory under deploy/ to build; else a Helm chart
	// under deploy/ with helm template arguments.
	kustomize string
	chart     string
	helmArgs  []string
}

// rendered caches each rendering's output by name: the tools run once per
// test binary, and every caller decodes its own objects.
var rendered sync.Map

func (r rendering) render(t testing.TB) []*unstructured.Unstructured {
	t.Helper()
	if out, ok := rendered.Load(r.name); ok {
		return decode(t, out.([]byte))
	}
	var out []byte
	if r.kustomize != "" {
		out = run(t, tool(t, "kustomize"), "build", filepath.Join(dir(), r.kustomize))
	} else {
		args := append([]string{"template", "substrate", filepath.Join(dir(), r.chart), "--namespace", namespace}, r.helmArgs...)
		out = run(t, tool(t, "helm"), args...)
	}
	rendered.Store(r.name, out)
	return decode(t, out)
}

// customDrain is the router drain of helmCustom: its grace must follow.
const customDrainDelay, customDrainTimeout, customMargin = 20, 100, 7

var (
	base       = rendering{name: "kustomize/base", kustomize: "base"}
	dev        = rendering{name: "kustomize/dev", kustomize: "overlays/dev"}
	production = rendering{name: "kustomize/production", kustomize: "overlays/production"}
	helmChart  = rendering{name: "helm/substrate", chart: "helm/substrate"}
	helmCustom = rendering{name: "helm/substrate custom", chart: "helm/substrate", helmArgs: []string{"--set", fmt.Sprintf(
		"router.drainDelaySeconds=%d,router.drainTimeoutSeconds=%d,router.terminationMarginSeconds=%d,apiserver.replicas=3,"+
			"postgres.url=postgres://ate:secret@db:5432/ate,controller.watchNamespace=team-a,image.tag=1.2.3,"+
			"router.service.type=LoadBalancer,sandboxConfig.enabled=true,registryCredentials.secret=ate-registry-credentials", customDrainDelay, customDrainTimeout, customMargin)}}
	helmMinimal = rendering{name: "helm/substrate minimal", chart: "helm/substrate", helmArgs: []string{"--set",
		"apiserver.replicas=1,router.replicas=1,controller.replicas=1,workerPool.enabled=false"}}
	helmCRDs = rendering{name: "helm/substrate-crds", chart: "helm/substrate-crds"}
	// TLS from existing Secrets, every authentication source, a policy
	// and the identity issuer.
	helmSecret = rendering{name: "helm/substrate tls secret, auth", chart: "helm/substrate", helmArgs: []string{
		"--set", "tls.mode=secret,tls.trustDomain=prod.example,auth.tokenSecret=ate-tokens," +
			"auth.oidc.issuerURL=https://kubernetes.default.svc.cluster.local,auth.oidc.clientID=ate,auth.oidc.usernamePrefix=-," +
			"auth.oidc.groupsClaim=groups,auth.oidc.caConfigMap=kube-root-ca.crt,auth.oidc.grantAnonymousDiscovery=true," +
			"identity.issuerURL=https://ate.example.com",
		"--set-json", `auth.policy=[{"name":"web-editors","atespace":"web","role":"editor","users":["alice"],"groups":["devs"]},` +
			`{"name":"ci","atespace":"web","role":"viewer","users":["system:serviceaccount:ci:deployer"]}]`}}
	// Plaintext: no user authentication either (the chart refuses it).
	helmInsecure = rendering{name: "helm/substrate tls none", chart: "helm/substrate", helmArgs: []string{"--set", "tls.mode=none,auth.tokenSecret="}}
	// cert-manager makes the components' Secrets; worker Pods' come from
	// the API server, as by default.
	helmCertManager = rendering{name: "helm/substrate cert-manager", chart: "helm/substrate", helmArgs: []string{"--set", "tls.mode=certManager"}}
	// cert-manager with the cluster's own ClusterIssuer, for worker Pods'
	// certificates too (its csi-driver): no CA, no Issuer.
	helmClusterIssuer = rendering{name: "helm/substrate cluster issuer", chart: "helm/substrate", helmArgs: []string{"--set",
		"tls.mode=certManager,tls.workerCertificates=certManager," +
			"tls.certManager.selfSignedCA=false,tls.certManager.issuer.create=false,tls.certManager.issuer.kind=ClusterIssuer," +
			"tls.certManager.issuer.name=corp-ca,tls.clusterDomain=corp.internal"}}

	// Every rendering of the components (all but the CRD chart).
	componentRenderings = []rendering{base, dev, production, helmChart, helmCustom, helmMinimal, helmSecret, helmInsecure, helmCertManager, helmClusterIssuer}
)

func decode(t testing.TB, data []byte) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	d := k8syaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var m map[string]any
		if err := d.Decode(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decode rendered manifests: %v", err)
		}
		if len(m) == 0 {
			continue // an empty document (a disabled template)
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
	if len(objs) == 0 {
		t.Fatal("rendering has no objects")
	}
	return objs
}

// find returns the rendered object of kind and name, or nil.
func find(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

func ofKind(objs []*unstructured.Unstructured, kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

// typed converts a rendered object into a typed one.
func typed[T any](t testing.TB, o *unstructured.Unstructured) *T {
	t.Helper()
	var v T
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(o.Object, &v, true); err != nil {
		t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
	}
	return &v
}

func deployment(t testing.TB, objs []*unstructured.Unstructured, name string) *appsv1.Deployment {
	t.Helper()
	o := find(objs, "Deployment", name)
	if o == nil {
		t.Fatalf("no Deployment %s", name)
	}
	return typed[appsv1.Deployment](t, o)
}

// flag returns the value of --name=value in args.
func flag(t testing.TB, args []string, name string) string {
	t.Helper()
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
	}
	t.Fatalf("no --%s in %q", name, args)
	return ""
}

func TestHelmLint(t *testing.T) {
	helm := tool(t, "helm")
	for _, chart := range []string{"substrate", "substrate-crds"} {
		t.Run(chart, func(t *testing.T) {
			run(t, helm, "lint", "--strict", filepath.Join(dir(), "helm", chart))
		})
	}
}

// TestCRDChartIsDeployCRDs: the CRD chart's templates are byte-identical
// copies of deploy/crds (hack/generate.sh copies them), none missing and
// none extra, and helm renders them unchanged.
func TestCRDChartIsDeployCRDs(t *testing.T) {
	want, err := filepath.Glob(filepath.Join(dir(), "crds", "ate.substrate.dev_*.yaml"))
	if err != nil || len(want) == 0 {
		t.Fatalf("no CRDs in deploy/crds (%v): run make generate", err)
	}
	// Helm installs a chart's crds/ once and never upgrades it.
	if _, err := os.Stat(filepath.Join(dir(), "helm", "substrate-crds", "crds")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("substrate-crds has a crds/ directory (%v): helm upgrade would never upgrade what is in it", err)
	}
	for _, r := range componentRenderings {
		if crds := ofKind(r.render(t), "CustomResourceDefinition"); r.chart != "" && len(crds) > 0 {
			t.Errorf("%s renders CRD %s: the CRDs belong to substrate-crds alone", r.name, crds[0].GetName())
		}
	}
	tmplDir := filepath.Join(dir(), "helm", "substrate-crds", "templates")
	got, err := filepath.Glob(filepath.Join(tmplDir, "*"))
	if err != nil {
		t.Fatal(err)
	}
	base := func(paths []string) []string {
		var out []string
		for _, p := range paths {
			out = append(out, filepath.Base(p))
		}
		return out
	}
	if !slices.Equal(base(want), base(got)) {
		t.Fatalf("substrate-crds/templates holds %q, deploy/crds %q: run make generate", base(got), base(want))
	}
	wantObjs := map[string]*unstructured.Unstructured{}
	for _, p := range want {
		t.Run(filepath.Base(p), func(t *testing.T) {
			w, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			g, err := os.ReadFile(filepath.Join(tmplDir, filepath.Base(p)))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(w, g) {
				t.Errorf("templates/%s differs from deploy/crds: run make generate", filepath.Base(p))
			}
			for _, o := range decode(t, w) {
				wantObjs[o.GetName()] = o
			}
		})
	}
	crds := helmCRDs.render(t)
	if len(crds) != len(wantObjs) {
		t.Errorf("substrate-crds renders %d objects, deploy/crds has %d", len(crds), len(wantObjs))
	}
	for _, o := range crds {
		if w := wantObjs[o.GetName()]; w == nil || !reflect.DeepEqual(o.Object, w.Object) {
			t.Errorf("rendered %s %s is not deploy/crds' (template syntax in a description?)", o.GetKind(), o.GetName())
		}
	}
}

// portNumber resolves a probe's port on container c.
func portNumber(t testing.TB, c corev1.Container, p intstr.IntOrString) int32 {
	t.Helper()
	if p.Type == intstr.Int {
		return p.IntVal
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return cp.ContainerPort
		}
	}
	t.Fatalf("container %s has no port named %q", c.Name, p.StrVal)
	return 0
}

// addrPort is the port of a listen address such as :9090.
func addrPort(t testing.TB, addr string) int32 {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("listen address %q: %v", addr, err)
	}
	var n int32
	if _, err := fmt.Sscan(port, &n); err != nil {
		t.Fatalf("listen address %q: %v", addr, err)
	}
	return n
}

// checkProbes: readiness on /readyz and liveness on /healthz, both on the
// port of --management-addr.
func checkProbes(t *testing.T, c corev1.Container) {
	t.Helper()
	mgmt := addrPort(t, flag(t, c.Args, "management-addr"))
	for _, p := range []struct {
		kind  string
		probe *corev1.Probe
		path  string
	}{{"readiness", c.ReadinessProbe, "/readyz"}, {"liveness", c.LivenessProbe, "/healthz"}} {
		if p.probe == nil || p.probe.HTTPGet == nil {
			t.Errorf("%s: no HTTP %s probe", c.Name, p.kind)
			continue
		}
		if p.probe.HTTPGet.Path != p.path {
			t.Errorf("%s: %s probe on %s, want %s", c.Name, p.kind, p.probe.HTTPGet.Path, p.path)
		}
		if got := portNumber(t, c, p.probe.HTTPGet.Port); got != mgmt {
			t.Errorf("%s: %s probe on port %d, management port is %d", c.Name, p.kind, got, mgmt)
		}
	}
}

// TestRouterTermination: the router's grace outlasts its drain, read from
// its own arguments, with no preStop hook delaying SIGTERM, and its
// probes are on the management port.
func TestRouterTermination(t *testing.T) {
	for _, r := range componentRenderings {
		t.Run(r.name, func(t *testing.T) {
			d := deployment(t, r.render(t), "ate-router")
			spec := d.Spec.Template.Spec
			if len(spec.Containers) != 1 {
				t.Fatalf("router Pod has %d containers, want 1", len(spec.Containers))
			}
			c := spec.Containers[0]
			if c.Args[0] != "router" {
				t.Fatalf("router container runs %q", c.Args)
			}
			if got := flag(t, c.Args, "api"); got != apiTarget {
				t.Errorf("--api=%s, want %s", got, apiTarget)
			}
			var drain time.Duration
			for _, f := range []string{"drain-delay", "drain-timeout"} {
				v, err := time.ParseDuration(flag(t, c.Args, f))
				if err != nil {
					t.Fatalf("--%s: %v", f, err)
				}
				drain += v
			}
			if spec.TerminationGracePeriodSeconds == nil {
				t.Fatal("no terminationGracePeriodSeconds: the default 30 s is shorter than the default drain")
			}
			grace := time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second
			if grace <= drain {
				t.Errorf("terminationGracePeriodSeconds %v does not outlast drain-delay + drain-timeout %v", grace, drain)
			}
			if r.name == helmCustom.name {
				if want := time.Duration(customDrainDelay+customDrainTimeout+customMargin) * time.Second; grace != want {
					t.Errorf("grace %v, want %v computed from the values", grace, want)
				}
			}
			if c.Lifecycle != nil && c.Lifecycle.PreStop != nil {
				t.Errorf("router has a preStop hook %+v: it delays SIGTERM, and the router waits out --drain-delay itself", c.Lifecycle.PreStop)
			}
			checkProbes(t, c)
		})
	}
}

// TestComponents: every component dials the API server through the
// EndpointSlice resolver under its own ServiceAccount, and has its probes
// on its management port.
func TestComponents(t *testing.T) {
	for _, r := range componentRenderings {
		t.Run(r.name, func(t *testing.T) {
			objs := r.render(t)
			for _, tc := range []struct {
				deployment string
				apiFlags   []string
			}{
				{"ate-apiserver", nil},
				{"ate-controller", []string{"api", "worker-api"}},
				{"ate-router", []string{"api"}},
			} {
				d := deployment(t, objs, tc.deployment)
				spec := d.Spec.Template.Spec
				if spec.ServiceAccountName != tc.deployment {
					t.Errorf("%s runs as ServiceAccount %q", tc.deployment, spec.ServiceAccountName)
				}
				if find(objs, "ServiceAccount", spec.ServiceAccountName) == nil {
					t.Errorf("%s: ServiceAccount %s not rendered", tc.deployment, spec.ServiceAccountName)
				}
				c := spec.Containers[0]
				for _, f := range tc.apiFlags {
					if got := flag(t, c.Args, f); got != apiTarget {
						t.Errorf("%s --%s=%s, want %s", tc.deployment, f, got, apiTarget)
					}
				}
				checkProbes(t, c)
				if sc := c.SecurityContext; sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
					sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
					t.Errorf("%s: container may escalate privileges or write its root filesystem", tc.deployment)
				}
			}
		})
	}
}

// TestRegistryCredentials: registry pulls are anonymous unless the
// operator names a Secret of per-atespace credentials; then the API
// server (which inspects templates' images) and the worker Pods (which
// pull them) both read it, as a read-only directory.
func TestRegistryCredentials(t *testing.T) {
	for _, r := range componentRenderings {
		t.Run(r.name, func(t *testing.T) {
			objs := r.render(t)
			api := deployment(t, objs, "ate-apiserver").Spec.Template.Spec
			ctl := deployment(t, objs, "ate-controller").Spec.Template.Spec.Containers[0]
			has := func(args []string, prefix string) bool {
				return slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, prefix) })
			}
			if r.name != helmCustom.name {
				if has(api.Containers[0].Args, "--registry-credentials") || has(ctl.Args, "--worker-registry-credentials-secret") {
					t.Errorf("registry credentials configured without a Secret: %q %q", api.Containers[0].Args, ctl.Args)
				}
				return
			}
			if got := flag(t, ctl.Args, "worker-registry-credentials-secret"); got != "ate-registry-credentials" {
				t.Errorf("controller --worker-registry-credentials-secret=%s", got)
			}
			dir := flag(t, api.Containers[0].Args, "registry-credentials")
			i := slices.IndexFunc(api.Volumes, func(v corev1.Volume) bool {
				return v.Secret != nil && v.Secret.SecretName == "ate-registry-credentials"
			})
			if i < 0 {
				t.Fatalf("API server has no volume of Secret ate-registry-credentials: %+v", api.Volumes)
			}
			if !slices.ContainsFunc(api.Containers[0].VolumeMounts, func(m corev1.VolumeMount) bool {
				return m.Name == api.Volumes[i].Name && m.MountPath == dir && m.ReadOnly
			}) {
				t.Errorf("API server mounts %+v, want %s read-only at %s", api.Containers[0].VolumeMounts, api.Volumes[i].Name, dir)
			}
		})
	}
}

// TestAPIServerAvailability: two replicas behind a PodDisruptionBudget
// that selects them, except in the one-replica installations, which must
// have none (minAvailable 1 over one Pod blocks every node drain).
func TestAPIServerAvailability(t *testing.T) {
	for _, tc := range []struct {
		r        rendering
		replicas int32
		pdb      bool
	}{
		{base, 2, true},
		{production, 2, true},
		{helmChart, 2, true},
		{helmCustom, 3, true},
		{dev, 1, false},
		{helmMinimal, 1, false},
	} {
		t.Run(tc.r.name, func(t *testing.T) {
			objs := tc.r.render(t)
			d := deployment(t, objs, "ate-apiserver")
			if d.Spec.Replicas == nil || *d.Spec.Replicas != tc.replicas {
				t.Errorf("ate-apiserver replicas %v, want %d", d.Spec.Replicas, tc.replicas)
			}
			podLabels := labels.Set(d.Spec.Template.Labels)
			var covering []*policyv1.PodDisruptionBudget
			for _, o := range ofKind(objs, "PodDisruptionBudget") {
				pdb := typed[policyv1.PodDisruptionBudget](t, o)
				sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
				if err != nil {
					t.Fatalf("PDB %s: %v", pdb.Name, err)
				}
				if sel.Matches(podLabels) {
					covering = append(covering, pdb)
				}
			}
			switch {
			case !tc.pdb && len(covering) > 0:
				t.Errorf("one replica, yet PDB %s covers it", covering[0].Name)
			case tc.pdb && len(covering) != 1:
				t.Errorf("%d PDBs cover the API server, want 1", len(covering))
			case tc.pdb:
				if m := covering[0].Spec.MinAvailable; m == nil || m.IntValue() != 1 {
					t.Errorf("PDB minAvailable %v, want 1", m)
				}
			}
		})
	}
}

// rbac is a rendering's RBAC objects by kind/name, reduced to what grants:
// rules, roleRef and subjects.
func rbac(t testing.TB, objs []*unstructured.Unstructured) map[string]any {
	t.Helper()
	out := map[string]any{}
	for _, o := range objs {
		key := o.GetKind() + "/" + o.GetNamespace() + "/" + o.GetName()
		switch o.GetKind() {
		case "Role", "ClusterRole":
			out[key] = typed[rbacv1.ClusterRole](t, o).Rules
		case "RoleBinding", "ClusterRoleBinding":
			b := typed[rbacv1.ClusterRoleBinding](t, o)
			out[key] = []any{b.RoleRef, b.Subjects}
		case "ServiceAccount":
			out[key] = true
		}
	}
	return out
}

// TestHelmGrantsWhatKustomizeGrants: the chart and the base grant the
// same permissions to the same ServiceAccounts, so the RBAC checks
// against the base (TestAgainstAPIServer) hold for both.
func TestHelmGrantsWhatKustomizeGrants(t *testing.T) {
	want := rbac(t, base.render(t))
	for _, r := range []rendering{helmChart, helmMinimal} {
		t.Run(r.name, func(t *testing.T) {
			got := rbac(t, r.render(t))
			for k, w := range want {
				if g, ok := got[k]; !ok {
					t.Errorf("%s missing", k)
				} else if !reflect.DeepEqual(g, w) {
					t.Errorf("%s:\n got %+v\nwant %+v", k, g, w)
				}
			}
			for k := range got {
				if _, ok := want[k]; !ok {
					t.Errorf("%s only in the chart", k)
				}
			}
		})
	}
}

// TestAgainstAPIServer applies every rendering to a real kube-apiserver
// (server-side apply, dry-run, strict field validation), then checks CEL
// validation and RBAC there.
func TestAgainstAPIServer(t *testing.T) {
	env := k8stest.Start(t)
	ctx := t.Context()
	c := client.WithFieldValidation(env.Client, metav1.FieldValidationStrict)
	baseObjs := base.render(t)

	// The namespace exists for real, as the base defines it: namespaced
	// objects cannot even be dry-run into a missing one.
	ns := find(baseObjs, "Namespace", namespace)
	if ns == nil {
		t.Fatalf("base renders no Namespace %s", namespace)
	}
	if got := ns.GetLabels()["pod-security.kubernetes.io/enforce"]; got != "privileged" {
		t.Errorf("namespace %s enforces Pod Security %q; the example pool's worker Pods are privileged", namespace, got)
	}
	if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(ns.DeepCopy()), client.FieldOwner("deploy-test"), client.ForceOwnership); err != nil {
		t.Fatalf("create namespace: %v", err)
	}

	// cert-manager is not installed there: a small copy of its CRDs (a
	// test fixture) lets the Certificates and Issuers be validated too.
	if _, err := envtest.InstallCRDs(env.Config, envtest.CRDInstallOptions{
		Paths: []string{filepath.Join(dir(), "testdata", "cert-manager")}, ErrorIfPathMissing: true,
	}); err != nil {
		t.Fatalf("install the cert-manager CRD fixture: %v", err)
	}

	for _, r := range append(slices.Clone(componentRenderings), helmCRDs) {
		t.Run("apply/"+r.name, func(t *testing.T) {
			for _, o := range r.render(t) {
				err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(o),
					client.DryRunAll, client.ForceOwnership, client.FieldOwner("deploy-test"))
				if err != nil {
					t.Errorf("%s %s/%s refused: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
				}
			}
		})
	}

	t.Run("workers", func(t *testing.T) { testWorkerDeployments(t, c) })
	t.Run("notes", func(t *testing.T) { testNotes(t, env.Kubeconfig) })
	t.Run("oidc-discovery", func(t *testing.T) { testIssuerDiscovery(t, env) })
	t.Run("cel", func(t *testing.T) { testValidation(t, c, baseObjs) })
	t.Run("rbac", func(t *testing.T) { testRBAC(t, env, baseObjs) })
}

// testValidation: the base's example WorkerPool and SandboxConfig are
// accepted, and each invalid variant is refused at admission with the
// message its type declares.
func testValidation(t *testing.T, c client.Client, objs []*unstructured.Unstructured) {
	ctx := t.Context()
	pool := find(objs, "WorkerPool", "example")
	sbc := find(objs, "SandboxConfig", "gvisor")
	if pool == nil || sbc == nil {
		t.Fatal("base renders no WorkerPool example or SandboxConfig gvisor")
	}
	set := func(o *unstructured.Unstructured, value any, path ...string) func() *unstructured.Unstructured {
		return func() *unstructured.Unstructured {
			o := o.DeepCopy()
			if err := unstructured.SetNestedField(o.Object, value, path...); err != nil {
				t.Fatal(err)
			}
			return o
		}
	}
	asset := func(sha string) []any {
		return []any{map[string]any{"name": "runsc", "architecture": "amd64", "url": "https://example.com/runsc", "sha256": sha}}
	}
	for _, tc := range []struct {
		name string
		obj  func() *unstructured.Unstructured
		want string // "" means accepted; else a part of the refusal
	}{
		{"workerpool example", set(pool, int64(2), "spec", "replicas"), ""},
		{"workerpool label key with a space", set(pool, map[string]any{"bad key": "x"}, "spec", "labels"),
			"label keys must be Kubernetes label keys"},
		{"workerpool label value too long", set(pool, map[string]any{"tier": strings.Repeat("a", 64)}, "spec", "labels"),
			"spec.labels.tier: Too long: may not be more than 63 bytes"},
		{"workerpool label value with a space", set(pool, map[string]any{"tier": "a b"}, "spec", "labels"),
			"label values must be at most 63 alphanumerics"},
		{"workerpool sets the pool label", set(pool, map[string]any{"ate.substrate.dev/pool": "other"}, "spec", "labels"),
			"label ate.substrate.dev/pool is set by the controller to the pool's name"},
		{"workerpool workersPerPod 0", set(pool, int64(0), "spec", "workersPerPod"),
			"spec.workersPerPod: Invalid value: 0: spec.workersPerPod in body should be greater than or equal to 1"},
		{"workerpool empty sandboxConfigName", set(pool, "", "spec", "sandboxConfigName"),
			"sandboxConfigName must not be empty when set"},
		{"sandboxconfig default", set(sbc, asset(strings.Repeat("ab", 32)), "spec", "assets"), ""},
		{"sandboxconfig sha256 xyz", set(sbc, asset("xyz"), "spec", "assets"),
			"spec.assets[0].sha256: Invalid value: \"xyz\": spec.assets[0].sha256 in body should match '^[a-f0-9]{64}$'"},
		{"sandboxconfig uppercase sha256", set(sbc, asset(strings.Repeat("AB", 32)), "spec", "assets"),
			"spec.assets[0].sha256 in body should match"},
		{"sandboxconfig no assets", set(sbc, []any{}, "spec", "assets"),
			"spec.assets: Invalid value: 0: spec.assets in body should have at least 1 items"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := c.Create(ctx, tc.obj(), client.DryRunAll)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want == "":
			case err == nil:
				t.Errorf("accepted, want refusal %q", tc.want)
			case !apierrors.IsInvalid(err):
				t.Errorf("refused with %v, want Invalid", err)
			case !strings.Contains(err.Error(), tc.want):
				t.Errorf("refusal %q does not say %q", err, tc.want)
			}
		})
	}
}

// testRBAC creates the base's ServiceAccounts and RBAC for real and asks
// the API server (SubjectAccessReview) what each component may do.
func testRBAC(t *testing.T, env *k8stest.Env, objs []*unstructured.Unstructured) {
	ctx := t.Context()
	for _, o := range objs {
		switch o.GetKind() {
		case "ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding":
			if err := env.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(o.DeepCopy()),
				client.ForceOwnership, client.FieldOwner("deploy-test")); err != nil {
				t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
			}
		}
	}
	type access struct {
		sa                             string
		verb, group, resource, sub, ns string
		name                           string
		allowed                        bool
	}
	var cases []access
	// The resolver's permissions, every component's that dials the API
	// server (the API server itself dials none): exactly these.
	cases = append(cases,
		access{"ate-apiserver", "get", "", "services", "", namespace, "ate-apiserver", false},
		access{"ate-apiserver", "list", "discovery.k8s.io", "endpointslices", "", namespace, "", false})
	// The API server signs worker Pods' node certificates: it reviews
	// their tokens and reads the Pod and Namespace each names, and the
	// Pod's ReplicaSet and Deployment, in any
	// namespace a pool may be in, and nothing more.
	cases = append(cases,
		access{"ate-apiserver", "create", "authentication.k8s.io", "tokenreviews", "", "", "", true},
		access{"ate-apiserver", "get", "", "pods", "", "team-a", "w", true},
		access{"ate-apiserver", "get", "", "namespaces", "", "", "team-a", true},
		access{"ate-apiserver", "get", "apps", "replicasets", "", "team-a", "w", true},
		access{"ate-apiserver", "get", "apps", "deployments", "", "team-a", "w", true},
		access{"ate-apiserver", "list", "apps", "deployments", "", "team-a", "", false},
		access{"ate-apiserver", "update", "apps", "deployments", "", "team-a", "w", false},
		access{"ate-apiserver", "list", "", "pods", "", "team-a", "", false},
		access{"ate-apiserver", "watch", "", "pods", "", "team-a", "", false},
		access{"ate-apiserver", "create", "", "serviceaccounts/token", "", "team-a", "ate-worker", false},
		access{"ate-apiserver", "get", "", "secrets", "", namespace, "ate-ca", false},
		access{"ate-apiserver", "create", "certificates.k8s.io", "certificatesigningrequests", "", "", "", false})
	for _, sa := range []string{"ate-controller", "ate-router", "ate-worker"} {
		cases = append(cases,
			access{sa, "get", "", "services", "", namespace, "ate-apiserver", true},
			access{sa, "list", "discovery.k8s.io", "endpointslices", "", namespace, "", true},
			access{sa, "watch", "discovery.k8s.io", "endpointslices", "", namespace, "", true},
			access{sa, "get", "", "services", "", namespace, "kubernetes", false},
			access{sa, "list", "", "services", "", namespace, "", false},
			access{sa, "list", "discovery.k8s.io", "endpointslices", "", "default", "", false},
			access{sa, "create", "discovery.k8s.io", "endpointslices", "", namespace, "", false},
			access{sa, "get", "", "secrets", "", namespace, "ate-postgres", false},
			access{sa, "list", "", "configmaps", "", namespace, "", false},
		)
	}
	for _, sa := range []string{"ate-apiserver", "ate-router", "ate-worker"} {
		cases = append(cases,
			access{sa, "list", "ate.substrate.dev", "workerpools", "", "", "", false},
			access{sa, "get", "coordination.k8s.io", "leases", "", namespace, "", false},
			access{sa, "list", "", "pods", "", namespace, "", false},
		)
	}
	const ctl = "ate-controller"
	// Everything the controller needs (its least-privilege test runs it
	// with exactly controller.RBACRules()) is granted: leases in
	// ate-system, the rest in any namespace…
	for _, r := range controller.RBACRules() {
		for _, res := range r.Resources {
			resource, sub, _ := strings.Cut(res, "/")
			ns := "team-a"
			if resource == "leases" {
				ns = namespace
			}
			if resource == "sandboxconfigs" || resource == "namespaces" {
				ns = ""
			}
			for _, g := range r.APIGroups {
				for _, v := range r.Verbs {
					cases = append(cases, access{ctl, v, g, resource, sub, ns, "x", true})
				}
			}
		}
	}
	// …and nothing more.
	cases = append(cases,
		access{ctl, "create", "ate.substrate.dev", "workerpools", "", "team-a", "", false},
		access{ctl, "update", "ate.substrate.dev", "workerpools", "", "team-a", "p", false},
		access{ctl, "delete", "ate.substrate.dev", "workerpools", "", "team-a", "p", false},
		access{ctl, "update", "ate.substrate.dev", "sandboxconfigs", "", "", "gvisor", false},
		access{ctl, "delete", "apps", "deployments", "", "team-a", "d", false},
		access{ctl, "create", "apps", "replicasets", "", "team-a", "", false},
		access{ctl, "create", "", "pods", "", "team-a", "", false},
		access{ctl, "delete", "", "pods", "", "team-a", "w", false},
		access{ctl, "create", "coordination.k8s.io", "leases", "", "default", "", false},
		access{ctl, "get", "", "secrets", "", "team-a", "ate-s3-credentials", false},
		access{ctl, "create", "", "serviceaccounts", "", "team-a", "", false},
	)
	allowed := func(ctx context.Context, a access) (bool, error) {
		sar := &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
			User:   "system:serviceaccount:" + namespace + ":" + a.sa,
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
			ResourceAttributes: &authzv1.ResourceAttributes{
				Verb: a.verb, Group: a.group, Resource: a.resource, Subresource: a.sub, Namespace: a.ns, Name: a.name,
			},
		}}
		res, err := env.Clientset.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
		if err != nil {
			return false, err
		}
		return res.Status.Allowed, nil
	}
	// The RBAC authorizer reads through an informer: wait until every
	// grant is visible before believing a denial.
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		for _, a := range cases {
			if a.allowed {
				if ok, err := allowed(ctx, a); err != nil || !ok {
					return false, err
				}
			}
		}
		return true, nil
	})
	if err != nil {
		t.Logf("grants never all visible: %v (the cases below say which)", err)
	}
	for _, a := range cases {
		t.Run(fmt.Sprintf("%s %s %s/%s %s in %q %s", a.sa, a.verb, a.group, a.resource, a.sub, a.ns, a.name), func(t *testing.T) {
			ok, err := allowed(ctx, a)
			if err != nil {
				t.Fatal(err)
			}
			if ok != a.allowed {
				t.Errorf("allowed %v, want %v", ok, a.allowed)
			}
		})
	}
}
