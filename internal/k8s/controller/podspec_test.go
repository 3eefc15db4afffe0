package controller

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	atek8s "substrate.dev/ate/pkg/apis/ate/v1alpha1"
)

// TestWorkerDeployment renders pools and checks the parts of the spec
// the design fixes (docs/design/controller.md).
func TestWorkerDeployment(t *testing.T) {
	settings := WorkerSettings{API: "dns:///ate-api.ate.svc:7070", Image: "ate:default", Snapshots: "s3://b/p", EnvSecret: "ate-s3"}
	base := func() *atek8s.WorkerPool {
		return &atek8s.WorkerPool{
			ObjectMeta: metav1.ObjectMeta{Name: "gpu", Namespace: "team", UID: "uid-1"},
			Spec:       atek8s.WorkerPoolSpec{Replicas: ptr.To[int32](3), WorkersPerPod: 4, SandboxClass: "gvisor"},
		}
	}
	runsc := []string{"--runsc-asset=amd64=" + sha('a') + "@https://x/runsc"}
	tests := []struct {
		name  string
		pool  func() *atek8s.WorkerPool
		runsc []string
		check func(t *testing.T, d *appsv1.Deployment)
	}{
		{
			name: "defaults", pool: base, runsc: runsc,
			check: func(t *testing.T, d *appsv1.Deployment) {
				if d.Name != "gpu-workers" || d.Namespace != "team" || *d.Spec.Replicas != 3 {
					t.Errorf("name %s/%s replicas %d", d.Namespace, d.Name, *d.Spec.Replicas)
				}
				wantSel := map[string]string{atek8s.PoolLabel: "gpu", nameLabel: workerName}
				if !reflect.DeepEqual(d.Spec.Selector.MatchLabels, wantSel) {
					t.Errorf("selector %v", d.Spec.Selector.MatchLabels)
				}
				wantPod := map[string]string{atek8s.PoolLabel: "gpu", nameLabel: workerName, managedByLabel: FieldManager}
				if !reflect.DeepEqual(d.Spec.Template.Labels, wantPod) {
					t.Errorf("pod labels %v", d.Spec.Template.Labels)
				}
				or := d.OwnerReferences
				if len(or) != 1 || or[0].Kind != "WorkerPool" || or[0].UID != "uid-1" || !*or[0].Controller {
					t.Errorf("owner references %+v", or)
				}
				p := d.Spec.Template.Spec
				if *p.TerminationGracePeriodSeconds != 60 || len(p.Containers) != 1 {
					t.Fatalf("grace %d, %d containers", *p.TerminationGracePeriodSeconds, len(p.Containers))
				}
				c := p.Containers[0]
				wantArgs := []string{
					"node", "--api=dns:///ate-api.ate.svc:7070", "--name=$(POD_NAME)", "--advertise=$(POD_IP)",
					"--workers=4", "--labels=ate.substrate.dev/pool=gpu,ate.substrate.dev/namespace=team",
					"--sandbox-class=gvisor", "--agent-port=7072", "--tunnel-port=7071",
					"--management-addr=:9090", "--data-dir=/var/lib/ate", "--drain-timeout=55s", "--snapshots=s3://b/p", runsc[0], "--insecure",
				}
				if c.Name != "node" || c.Image != "ate:default" || c.Command != nil {
					t.Errorf("container %s image %s command %v", c.Name, c.Image, c.Command)
				}
				if !reflect.DeepEqual(c.Args, wantArgs) {
					t.Errorf("args\n got %q\nwant %q", c.Args, wantArgs)
				}
				if !*c.SecurityContext.Privileged {
					t.Error("not privileged")
				}
				if c.ReadinessProbe.HTTPGet.Path != "/readyz" || c.LivenessProbe.HTTPGet.Path != "/healthz" || c.ReadinessProbe.HTTPGet.Port.IntVal != 9090 {
					t.Errorf("probes %+v %+v", c.ReadinessProbe.HTTPGet, c.LivenessProbe.HTTPGet)
				}
				if c.Lifecycle != nil {
					t.Error("a lifecycle hook (ate node drains on SIGTERM itself)")
				}
				if len(c.Env) != 2 || c.Env[0].ValueFrom.FieldRef.FieldPath != "metadata.name" || c.Env[1].ValueFrom.FieldRef.FieldPath != "status.podIP" {
					t.Errorf("env %+v", c.Env)
				}
				if len(c.EnvFrom) != 1 || c.EnvFrom[0].SecretRef.Name != "ate-s3" || !*c.EnvFrom[0].SecretRef.Optional {
					t.Errorf("envFrom %+v", c.EnvFrom)
				}
				if len(p.Volumes) != 1 || p.Volumes[0].EmptyDir == nil || c.VolumeMounts[0].MountPath != "/var/lib/ate" {
					t.Errorf("volumes %+v mounts %+v", p.Volumes, c.VolumeMounts)
				}
			},
		},
		{
			name: "template and labels",
			pool: func() *atek8s.WorkerPool {
				p := base()
				p.Spec.Image = "ate:pool"
				p.Spec.Labels = map[string]atek8s.LabelValue{"zone": "b", "gpu": "a100"}
				p.Spec.Template = atek8s.WorkerPodTemplate{
					Labels:                        map[string]string{"team": "x", atek8s.PoolLabel: "spoofed"},
					Annotations:                   map[string]string{"a": "b"},
					NodeSelector:                  map[string]string{"pool": "sandbox"},
					Tolerations:                   []corev1.Toleration{{Key: "sandbox", Operator: corev1.TolerationOpExists}},
					PriorityClassName:             "high",
					ServiceAccountName:            "worker",
					ImagePullSecrets:              []corev1.LocalObjectReference{{Name: "registry-key"}},
					TerminationGracePeriodSeconds: ptr.To[int64](120),
					Resources:                     corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("4Gi")}},
				}
				return p
			},
			check: func(t *testing.T, d *appsv1.Deployment) {
				p := d.Spec.Template
				c := p.Spec.Containers[0]
				if p.Labels[atek8s.PoolLabel] != "gpu" || p.Labels["team"] != "x" || p.Annotations["a"] != "b" {
					t.Errorf("pod metadata %v %v", p.Labels, p.Annotations)
				}
				if p.Spec.NodeSelector["pool"] != "sandbox" || len(p.Spec.Tolerations) != 1 || p.Spec.PriorityClassName != "high" || p.Spec.ServiceAccountName != "worker" ||
					len(p.Spec.ImagePullSecrets) != 1 || p.Spec.ImagePullSecrets[0].Name != "registry-key" {
					t.Errorf("pod spec %+v", p.Spec)
				}
				if c.Image != "ate:pool" || c.Resources.Limits.Memory().String() != "4Gi" {
					t.Errorf("image %s resources %v", c.Image, c.Resources)
				}
				if !slices.Contains(c.Args, "--labels=ate.substrate.dev/pool=gpu,ate.substrate.dev/namespace=team,gpu=a100,zone=b") ||
					!slices.Contains(c.Args, "--drain-timeout=115s") || currentRunscArgs(d) != nil {
					t.Errorf("args %q", c.Args)
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := workerDeployment(tc.pool(), settings, tc.runsc)
			tc.check(t, d)
			if got := currentRunscArgs(d); !reflect.DeepEqual(got, tc.runsc) {
				t.Errorf("currentRunscArgs %q, want %q", got, tc.runsc)
			}
		})
	}
}

func TestRunscAssetArgs(t *testing.T) {
	sc := &atek8s.SandboxConfig{Spec: atek8s.SandboxConfigSpec{Assets: []atek8s.RuntimeAsset{
		{Name: "runsc", Architecture: "arm64", URL: "https://x/arm", SHA256: sha('b')},
		{Name: "runsc", Architecture: "amd64", URL: "file:///opt/runsc", SHA256: sha('a')},
	}}}
	want := []string{"--runsc-asset=amd64=" + sha('a') + "@file:///opt/runsc", "--runsc-asset=arm64=" + sha('b') + "@https://x/arm"}
	if got := runscAssetArgs(sc); !reflect.DeepEqual(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

// sha is a 64-hex-digit digest made of c.
func sha(c byte) string {
	b := make([]byte, 64)
	for i := range b {
		b[i] = c
	}
	return string(b)
}

func TestNodeSelectorArch(t *testing.T) {
	amd := "--runsc-asset=amd64=" + strings.Repeat("a", 64) + "@https://x/runsc"
	arm := "--runsc-asset=arm64=" + strings.Repeat("b", 64) + "@https://x/runsc-arm"
	tests := []struct {
		name  string
		pool  map[string]string
		runsc []string
		want  map[string]string
	}{
		{"no assets: the image's runsc, any arch", nil, nil, nil},
		{"one arch: pinned", nil, []string{amd}, map[string]string{archLabel: "amd64"}},
		{"both archs: any", nil, []string{amd, arm}, nil},
		{"kept with the pool's", map[string]string{"pool": "gpu"}, []string{arm}, map[string]string{"pool": "gpu", archLabel: "arm64"}},
		{"the pool's choice wins", map[string]string{archLabel: "arm64"}, []string{amd}, map[string]string{archLabel: "arm64"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := nodeSelector(tc.pool, tc.runsc); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("nodeSelector = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestWorkerTLS: the controller refuses worker settings with neither or
// both of an issuer and plaintext, or an issuer cert-manager cannot
// resolve, naming the flags to pass; with --worker-insecure worker Pods
// run ate node --insecure and mount nothing; with an issuer, cert-manager's
// csi-driver mounts each Pod its own node certificate, whose URI SAN names
// the Pod (its node name, which the API server binds the certificate to),
// read-only at ate node's --tls-dir, in the trust domain given (default
// auth.DefaultTrustDomain).
func TestWorkerTLS(t *testing.T) {
	tests := []struct {
		name    string
		w       WorkerSettings
		wantErr string // in validateTLS's error; "" for valid
		// Valid settings: ate node's TLS flags, and the csi volume's
		// issuer kind, name and URI SAN ("" kind: no volume).
		args                 []string
		kind, issuer, uriSAN string
	}{
		{name: "neither", w: WorkerSettings{}, wantErr: "pass --worker-tls-bootstrap"},
		{name: "neither, trust domain only", w: WorkerSettings{TrustDomain: "prod.example"}, wantErr: "or --worker-insecure for plaintext"},
		{name: "both", w: WorkerSettings{CertIssuer: "Issuer/ate-ca", Insecure: true}, wantErr: "exclude each other"},
		{name: "bootstrap and insecure", w: WorkerSettings{TLSBootstrap: true, CACert: []byte("ca"), Insecure: true}, wantErr: "exclude each other"},
		{name: "bootstrap and issuer", w: WorkerSettings{TLSBootstrap: true, CACert: []byte("ca"), CertIssuer: "Issuer/ate-ca"}, wantErr: "exclude each other"},
		{name: "bootstrap without a CA", w: WorkerSettings{TLSBootstrap: true}, wantErr: "run the controller with --tls-dir"},
		{name: "unknown kind", w: WorkerSettings{CertIssuer: "Certificate/ate-ca"}, wantErr: `--worker-cert-issuer "Certificate/ate-ca": want Issuer/NAME or ClusterIssuer/NAME`},
		{name: "kind in lower case", w: WorkerSettings{CertIssuer: "clusterissuer/ate-ca"}, wantErr: "want Issuer/NAME or ClusterIssuer/NAME"},
		{name: "no name", w: WorkerSettings{CertIssuer: "ClusterIssuer/"}, wantErr: "want Issuer/NAME or ClusterIssuer/NAME"},
		{name: "two slashes", w: WorkerSettings{CertIssuer: "Issuer/ns/ate-ca"}, wantErr: "want Issuer/NAME or ClusterIssuer/NAME"},
		{name: "insecure", w: WorkerSettings{Insecure: true}, args: []string{"--insecure"}},
		{name: "insecure ignores the trust domain", w: WorkerSettings{Insecure: true, TrustDomain: "prod.example"}, args: []string{"--insecure"}},
		{
			name: "cluster issuer", w: WorkerSettings{CertIssuer: "ClusterIssuer/ate-ca", TrustDomain: "prod.example"},
			args: []string{"--tls-dir=/etc/ate/tls", "--trust-domain=prod.example"},
			kind: "ClusterIssuer", issuer: "ate-ca", uriSAN: "spiffe://prod.example/ate/node/${POD_NAME}",
		},
		{
			name: "issuer, default trust domain", w: WorkerSettings{CertIssuer: "Issuer/ate-ca"},
			args: []string{"--tls-dir=/etc/ate/tls", "--trust-domain=ate.local"},
			kind: "Issuer", issuer: "ate-ca", uriSAN: "spiffe://ate.local/ate/node/${POD_NAME}",
		},
		{
			name: "bare name is an Issuer", w: WorkerSettings{CertIssuer: "ate-ca", TrustDomain: "ate.local"},
			args: []string{"--tls-dir=/etc/ate/tls", "--trust-domain=ate.local"},
			kind: "Issuer", issuer: "ate-ca", uriSAN: "spiffe://ate.local/ate/node/${POD_NAME}",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.w.validateTLS()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("validateTLS = %v, want an error with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("validateTLS = %v", err)
			}
			// As the controller renders it: in the Deployment's node
			// container and Pod volumes.
			w := tc.w
			w.API, w.Image = "a:1", "ate"
			d := workerDeployment(&atek8s.WorkerPool{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "n"}}, w, nil)
			p := d.Spec.Template.Spec
			c := p.Containers[0]
			var got []string
			for _, a := range c.Args {
				if a == "--insecure" || strings.HasPrefix(a, "--tls-dir") || strings.HasPrefix(a, "--trust-domain") {
					got = append(got, a)
				}
			}
			if !reflect.DeepEqual(got, tc.args) {
				t.Errorf("TLS args %q, want %q", got, tc.args)
			}
			var vol *corev1.Volume
			for i := range p.Volumes {
				if p.Volumes[i].CSI != nil {
					vol = &p.Volumes[i]
				}
			}
			var mount *corev1.VolumeMount
			for i := range c.VolumeMounts {
				if vol != nil && c.VolumeMounts[i].Name == vol.Name {
					mount = &c.VolumeMounts[i]
				}
			}
			if tc.kind == "" {
				if vol != nil || len(p.Volumes) != 1 {
					t.Errorf("plaintext, yet volumes %+v", p.Volumes)
				}
				return
			}
			if vol == nil || mount == nil {
				t.Fatalf("no csi volume mounted: volumes %+v mounts %+v", p.Volumes, c.VolumeMounts)
			}
			if mount.MountPath != "/etc/ate/tls" || !mount.ReadOnly || mount.SubPath != "" {
				t.Errorf("mount %+v: want /etc/ate/tls, read-only, whole (ate node's --tls-dir)", mount)
			}
			a := vol.CSI.VolumeAttributes
			if vol.CSI.Driver != "csi.cert-manager.io" || !ptr.Deref(vol.CSI.ReadOnly, false) {
				t.Errorf("volume %+v: want read-only csi.cert-manager.io", vol.CSI)
			}
			want := map[string]string{
				"csi.cert-manager.io/issuer-kind": tc.kind,
				"csi.cert-manager.io/issuer-name": tc.issuer,
				"csi.cert-manager.io/uri-sans":    tc.uriSAN,
			}
			for k, v := range want {
				if a[k] != v {
					t.Errorf("attribute %s = %q, want %q", k, a[k], v)
				}
			}
			// A node is a server (agent, tunnel) and a client (of the API
			// server), like every component.
			for _, use := range []string{"server auth", "client auth"} {
				if !strings.Contains(a["csi.cert-manager.io/key-usages"], use) {
					t.Errorf("key usages %q lack %q", a["csi.cert-manager.io/key-usages"], use)
				}
			}
			// $(POD_NAME) in the args and ${POD_NAME} in the SAN are the
			// same name: the node's --name is its certificate's.
			if !slices.Contains(c.Args, "--name=$(POD_NAME)") {
				t.Errorf("args %q: the node is not named after its Pod", c.Args)
			}
		})
	}
}

// TestWorkerDeploymentRegistryCredentials: with the operator's Secret of
// per-atespace registry credentials the node gets them as a read-only
// directory for --registry-credentials; without, no flag (anonymous
// pulls) and no volume.
func TestWorkerDeploymentRegistryCredentials(t *testing.T) {
	pool := &atek8s.WorkerPool{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "team", UID: "u"}}
	w := WorkerSettings{API: "api:7070", Image: "ate:default", Insecure: true}
	c := workerDeployment(pool, w, nil).Spec.Template.Spec.Containers[0]
	if slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--registry-credentials") }) {
		t.Errorf("no Secret, yet args %q", c.Args)
	}
	w.RegistryCredentialsSecret = "ate-registry-credentials"
	p := workerDeployment(pool, w, nil).Spec.Template.Spec
	c = p.Containers[0]
	if !slices.Contains(c.Args, "--registry-credentials=/etc/ate/registry-credentials") {
		t.Errorf("args %q lack --registry-credentials", c.Args)
	}
	i := slices.IndexFunc(p.Volumes, func(v corev1.Volume) bool { return v.Secret != nil })
	if i < 0 || p.Volumes[i].Secret.SecretName != "ate-registry-credentials" || !*p.Volumes[i].Secret.Optional || *p.Volumes[i].Secret.DefaultMode != 0o400 {
		t.Fatalf("volumes %+v", p.Volumes)
	}
	if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
		return m.Name == p.Volumes[i].Name && m.MountPath == "/etc/ate/registry-credentials" && m.ReadOnly
	}) {
		t.Errorf("mounts %+v", c.VolumeMounts)
	}
}

// TestWorkerTLSBootstrap: with --worker-tls-bootstrap, each worker Pod
// gets a projected volume at ate node's --tls-bootstrap-dir holding a
// ServiceAccount token of the configured audience (bound to the Pod by
// the kubelet) and the CA from the pool's ConfigMap, which the controller
// applies beside the Deployment, owned by the pool; nothing of
// cert-manager.
func TestWorkerTLSBootstrap(t *testing.T) {
	w := WorkerSettings{API: "a:1", Image: "ate", TLSBootstrap: true, TokenAudience: "ate-node-prod", CACert: []byte("-----BEGIN CERTIFICATE-----\n"), TrustDomain: "prod.example"}
	if err := w.validateTLS(); err != nil {
		t.Fatal(err)
	}
	pool := &atek8s.WorkerPool{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "n", UID: "uid-1"}}
	d := workerDeployment(pool, w, nil)
	p := d.Spec.Template.Spec
	c := p.Containers[0]
	if !slices.Contains(c.Args, "--tls-bootstrap-dir=/var/run/ate/identity") || !slices.Contains(c.Args, "--trust-domain=prod.example") ||
		slices.ContainsFunc(c.Args, func(a string) bool { return a == "--insecure" || strings.HasPrefix(a, "--tls-dir") }) {
		t.Errorf("args %q", c.Args)
	}
	var vol *corev1.Volume
	for i := range p.Volumes {
		if p.Volumes[i].CSI != nil {
			t.Errorf("a csi volume: %+v", p.Volumes[i])
		}
		if p.Volumes[i].Projected != nil {
			vol = &p.Volumes[i]
		}
	}
	if vol == nil {
		t.Fatalf("no projected volume: %+v", p.Volumes)
	}
	src := vol.Projected.Sources
	if len(src) != 2 || src[0].ServiceAccountToken == nil || src[1].ConfigMap == nil {
		t.Fatalf("projected sources %+v: want a token and the CA", src)
	}
	if tok := src[0].ServiceAccountToken; tok.Audience != "ate-node-prod" || tok.Path != "token" || ptr.Deref(tok.ExpirationSeconds, 0) != 3600 {
		t.Errorf("token projection %+v", tok)
	}
	if cm := src[1].ConfigMap; cm.Name != "p-workers-ca" || len(cm.Items) != 1 || cm.Items[0].Path != "ca.crt" {
		t.Errorf("CA projection %+v", cm)
	}
	mounted := slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
		return m.Name == vol.Name && m.MountPath == "/var/run/ate/identity" && m.ReadOnly
	})
	if !mounted {
		t.Errorf("mounts %+v: want %s read-only at /var/run/ate/identity", c.VolumeMounts, vol.Name)
	}
	cm := workerCAConfigMap(pool, w)
	if cm == nil || cm.Name != "p-workers-ca" || cm.Namespace != "n" || cm.Data["ca.crt"] != string(w.CACert) ||
		len(cm.OwnerReferences) != 1 || cm.OwnerReferences[0].UID != "uid-1" || !ptr.Deref(cm.OwnerReferences[0].Controller, false) {
		t.Errorf("CA ConfigMap %+v", cm)
	}
	w.TLSBootstrap = false
	if workerCAConfigMap(pool, w) != nil {
		t.Error("a CA ConfigMap without --worker-tls-bootstrap")
	}
}
