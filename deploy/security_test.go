package deploy

import (
	"bytes"
	"cmp"
	"context"
	"net"
	"net/url"
	"os/exec"
	"path"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"substrate.dev/ate/internal/auth"
	"substrate.dev/ate/internal/k8s/controller"
	"substrate.dev/ate/internal/k8s/k8stest"
	atek8s "substrate.dev/ate/pkg/apis/ate/v1alpha1"
)

// tlsMode is how a rendering gives components their certificates: as the
// Helm value tls.mode names them.
type tlsMode string

const (
	modeCertManager tlsMode = "certManager"
	modeSecret      tlsMode = "secret"
	modeNone        tlsMode = "none"
)

// tlsModes is what each component rendering promises (docs/kubernetes.md,
// Security): the base and the chart by default mount existing Secrets,
// production and the chart's certManager mode have cert-manager make
// them, dev runs plaintext. Worker Pods' node certificates: bootstrap is
// the controller's --worker-tls-bootstrap (each Pod asks the API server,
// which then signs with --node-signer-dir); else workerIssuer is the
// controller's --worker-cert-issuer (empty: --worker-insecure), the
// cert-manager issuer whose csi-driver gives each worker Pod its own node
// certificate, and issuerRendered says whether the rendering defines it (a
// ClusterIssuer the values name is the user's).
var tlsModes = map[string]struct {
	mode           tlsMode
	trustDomain    string
	bootstrap      bool
	workerIssuer   string
	issuerRendered bool
}{
	base.name:              {modeSecret, auth.DefaultTrustDomain, true, "", false},
	production.name:        {modeCertManager, auth.DefaultTrustDomain, true, "", false},
	dev.name:               {modeNone, "", false, "", false},
	helmChart.name:         {modeSecret, auth.DefaultTrustDomain, true, "", false},
	helmCustom.name:        {modeSecret, auth.DefaultTrustDomain, true, "", false},
	helmMinimal.name:       {modeSecret, auth.DefaultTrustDomain, true, "", false},
	helmSecret.name:        {modeSecret, "prod.example", true, "", false},
	helmInsecure.name:      {modeNone, "", false, "", false},
	helmCertManager.name:   {modeCertManager, auth.DefaultTrustDomain, true, "", false},
	helmClusterIssuer.name: {modeCertManager, auth.DefaultTrustDomain, false, "ClusterIssuer/corp-ca", false},
}

// argValue returns the value of --name=value in args, and whether a
// --name or --name=… is there at all.
func argValue(args []string, name string) (string, bool) {
	for _, a := range args {
		if a == "--"+name {
			return "", true
		}
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
	}
	return "", false
}

// mountedFile resolves file, a path the container c is given, to the Pod
// volume it comes from and the key of that volume's Secret or ConfigMap
// that becomes the file. The mount must be read-only and whole (a
// subPath mount never sees updates, so a renewed certificate or an edited
// policy would not reach the process).
func mountedFile(t testing.TB, spec corev1.PodSpec, c corev1.Container, file string) (corev1.Volume, string) {
	t.Helper()
	for _, m := range c.VolumeMounts {
		rel, ok := strings.CutPrefix(file, strings.TrimSuffix(m.MountPath, "/")+"/")
		if !ok {
			continue
		}
		if !m.ReadOnly || m.SubPath != "" || m.SubPathExpr != "" {
			t.Errorf("%s: mount %s of %s is not read-only and whole: %+v", c.Name, m.MountPath, file, m)
		}
		for _, v := range spec.Volumes {
			if v.Name != m.Name {
				continue
			}
			var items []corev1.KeyToPath
			switch {
			case v.Secret != nil:
				items = v.Secret.Items
			case v.ConfigMap != nil:
				items = v.ConfigMap.Items
			default:
				t.Fatalf("%s: %s is on volume %s, neither a Secret nor a ConfigMap", c.Name, file, v.Name)
			}
			if len(items) == 0 {
				return v, rel
			}
			for _, it := range items {
				if it.Path == rel {
					return v, it.Key
				}
			}
			t.Fatalf("%s: volume %s projects no %s (items %+v)", c.Name, v.Name, rel, items)
		}
		t.Fatalf("%s: mount %s names no volume %s", c.Name, m.MountPath, m.Name)
	}
	t.Fatalf("%s: %s is on no volume mount", c.Name, file)
	return corev1.Volume{}, ""
}

// tlsComponents are the Deployments with TLS flags, by the Secret
// suffix and SPIFFE component of their certificate.
var tlsComponents = []struct {
	deployment, secret string
	component          auth.Component
}{
	{"ate-apiserver", "ate-apiserver-tls", auth.ComponentAPIServer},
	{"ate-router", "ate-router-tls", auth.ComponentRouter},
	{"ate-controller", "ate-controller-tls", auth.ComponentController},
}

// TestTLS: every component gets --tls-dir with ca.crt, tls.crt and
// tls.key from its own Secret, mounted read-only and whole where its
// non-root user can read them, and the rendering's trust domain; worker
// Pods get the same through the controller's --worker-* flags; plaintext
// (--insecure, --worker-insecure) only where the rendering says so.
func TestTLS(t *testing.T) {
	for _, r := range componentRenderings {
		t.Run(r.name, func(t *testing.T) {
			want, ok := tlsModes[r.name]
			if !ok {
				t.Fatalf("no TLS mode declared for rendering %s", r.name)
			}
			objs := r.render(t)
			for _, tc := range tlsComponents {
				d := deployment(t, objs, tc.deployment)
				spec := d.Spec.Template.Spec
				c := spec.Containers[0]
				_, insecure := argValue(c.Args, "insecure")
				dirArg, hasDir := argValue(c.Args, "tls-dir")
				if want.mode == modeNone {
					if !insecure || hasDir {
						t.Errorf("%s: plaintext rendering, args %q: want --insecure and no --tls-dir", tc.deployment, c.Args)
					}
					for _, v := range spec.Volumes {
						if v.Secret != nil && strings.HasSuffix(v.Secret.SecretName, "-tls") {
							t.Errorf("%s: plaintext, yet mounts Secret %s", tc.deployment, v.Secret.SecretName)
						}
					}
					continue
				}
				if insecure || !hasDir {
					t.Errorf("%s: args %q: want --tls-dir and no --insecure", tc.deployment, c.Args)
					continue
				}
				if td, _ := argValue(c.Args, "trust-domain"); td != want.trustDomain {
					t.Errorf("%s: --trust-domain=%q, want %q", tc.deployment, td, want.trustDomain)
				}
				for _, f := range []string{"ca.crt", "tls.crt", "tls.key"} {
					v, key := mountedFile(t, spec, c, path.Join(dirArg, f))
					if v.Secret == nil || v.Secret.SecretName != tc.secret || key != f {
						t.Errorf("%s: %s from volume %+v key %s, want key %s of Secret %s", tc.deployment, f, v.VolumeSource, key, f, tc.secret)
						continue
					}
					if v.Secret.Optional != nil && *v.Secret.Optional {
						t.Errorf("%s: Secret %s optional: a missing certificate must keep the Pod from starting", tc.deployment, tc.secret)
					}
					// The key is for the Pod's non-root user alone: through
					// fsGroup, never world-readable.
					mode := int32(0o644)
					if v.Secret.DefaultMode != nil {
						mode = *v.Secret.DefaultMode
					}
					sc := spec.SecurityContext
					if sc == nil || sc.FSGroup == nil || mode&0o040 == 0 || mode&0o007 != 0 {
						t.Errorf("%s: Secret %s mode %o, pod securityContext %+v: want group-readable by fsGroup, not by others", tc.deployment, tc.secret, mode, sc)
					}
				}
			}
			ctl := deployment(t, objs, "ate-controller").Spec.Template.Spec.Containers[0]
			w := workerSettings(ctl.Args)
			if _, ok := argValue(ctl.Args, "worker-tls-secret"); ok {
				t.Errorf("controller args %q: --worker-tls-secret is gone (one Secret cannot name every worker Pod's node)", ctl.Args)
			}
			switch {
			case want.mode == modeNone && (!w.Insecure || w.CertIssuer != "" || w.TLSBootstrap):
				t.Errorf("controller args %q: plaintext rendering, want --worker-insecure only", ctl.Args)
			case want.mode != modeNone && (w.Insecure || w.CertIssuer != want.workerIssuer || w.TLSBootstrap != want.bootstrap || w.TrustDomain != want.trustDomain):
				t.Errorf("controller args %q: worker settings %+v, want --worker-tls-bootstrap %v, --worker-cert-issuer=%s in trust domain %s and no --worker-insecure",
					ctl.Args, w, want.bootstrap, want.workerIssuer, want.trustDomain)
			}
			checkNodeSigner(t, objs, w, want.bootstrap)
			checkCertManager(t, r, want.mode, want.trustDomain, objs)
			checkWorkerIssuer(t, want.workerIssuer, want.issuerRendered, objs)
		})
	}
}

// checkNodeSigner: when worker Pods ask the API server for their
// certificates (bootstrap), the API server signs with the CA's Secret —
// the one cert-manager's CA Certificate or `ate certs secrets` makes,
// whose tls.crt and tls.key become --node-signer-dir's ca.crt and ca.key,
// mounted read-only for its non-root user only — reviews tokens with a
// token of its own, and expects the audience the controller gives worker
// Pods. Otherwise it signs nothing and carries no Kubernetes token.
func checkNodeSigner(t *testing.T, objs []*unstructured.Unstructured, w controller.WorkerSettings, bootstrap bool) {
	t.Helper()
	d := deployment(t, objs, "ate-apiserver")
	spec := d.Spec.Template.Spec
	c := spec.Containers[0]
	dirArg, signs := argValue(c.Args, "node-signer-dir")
	automount := spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken
	if !bootstrap {
		if signs || automount {
			t.Errorf("ate-apiserver: worker Pods do not ask it, yet --node-signer-dir %v, token mounted %v", signs, automount)
		}
		return
	}
	if !signs || !automount {
		t.Fatalf("ate-apiserver: worker Pods ask it for certificates, yet --node-signer-dir %v (args %q), token mounted %v", signs, c.Args, automount)
	}
	aud, _ := argValue(c.Args, "node-token-audience")
	if cmp.Or(aud, controller.DefaultTokenAudience) != cmp.Or(w.TokenAudience, controller.DefaultTokenAudience) {
		t.Errorf("the API server reviews tokens for audience %q, worker Pods carry %q", aud, w.TokenAudience)
	}
	for file, key := range map[string]string{"ca.crt": "tls.crt", "ca.key": "tls.key"} {
		v, got := mountedFile(t, spec, c, path.Join(dirArg, file))
		if v.Secret == nil || v.Secret.SecretName != "ate-ca" || got != key {
			t.Errorf("ate-apiserver: %s from %+v key %s, want key %s of Secret ate-ca", file, v.VolumeSource, got, key)
			continue
		}
		if mode := ptr.Deref(v.Secret.DefaultMode, 0o644); mode&0o007 != 0 {
			t.Errorf("ate-apiserver: the CA's key is readable by others (mode %o)", mode)
		}
	}
	if ca := find(objs, "Certificate", "ate-ca"); ca != nil {
		if name, _, _ := unstructured.NestedString(ca.Object, "spec", "secretName"); name != "ate-ca" {
			t.Errorf("cert-manager's CA goes to Secret %q, the API server signs with ate-ca", name)
		}
	}
}

// checkCertManager: with cert-manager, each component's Secret is a
// Certificate's (worker Pods' certificates are none: checkWorkerIssuer), whose one URI SAN
// is that component's SPIFFE ID in the trust domain (parsed by the code
// that reads it, auth.ParseIdentityURI); leaves are client and server
// certificates, short-lived and renewed with a new key; the API server's
// names cover what clients dial; every issuerRef resolves. Without
// cert-manager nothing of cert-manager.io is rendered (it may not be
// installed); with Secrets of the user's, at most the worker Pods' CA
// Issuer.
func checkCertManager(t *testing.T, r rendering, mode tlsMode, trustDomain string, objs []*unstructured.Unstructured) {
	t.Helper()
	var cm []*unstructured.Unstructured
	for _, o := range objs {
		if strings.HasPrefix(o.GetAPIVersion(), "cert-manager.io/") {
			if o.GetAPIVersion() != "cert-manager.io/v1" {
				t.Errorf("%s %s: %s, want cert-manager.io/v1", o.GetKind(), o.GetName(), o.GetAPIVersion())
			}
			cm = append(cm, o)
		}
	}
	switch mode {
	case modeNone:
		for _, o := range cm {
			t.Errorf("tls mode %s, yet renders %s %s", mode, o.GetKind(), o.GetName())
		}
		return
	case modeSecret:
		// The components' Secrets are the user's: no Certificate, no CA
		// made by cert-manager; at most the CA Issuer over the user's CA
		// that signs worker Pods' certificates (checkWorkerIssuer).
		for _, o := range cm {
			if ca, _, _ := unstructured.NestedString(o.Object, "spec", "ca", "secretName"); o.GetKind() != "Issuer" || ca == "" {
				t.Errorf("tls mode %s, yet renders %s %s (only a CA Issuer for worker Pods belongs)", mode, o.GetKind(), o.GetName())
			}
		}
		return
	}
	type cert struct {
		Spec struct {
			SecretName  string   `json:"secretName"`
			IsCA        bool     `json:"isCA"`
			Duration    string   `json:"duration"`
			RenewBefore string   `json:"renewBefore"`
			URIs        []string `json:"uris"`
			DNSNames    []string `json:"dnsNames"`
			Usages      []string `json:"usages"`
			PrivateKey  struct {
				RotationPolicy string `json:"rotationPolicy"`
			} `json:"privateKey"`
			IssuerRef struct {
				Group string `json:"group"`
				Kind  string `json:"kind"`
				Name  string `json:"name"`
			} `json:"issuerRef"`
		} `json:"spec"`
	}
	certs := map[string]cert{} // by secretName
	for _, o := range ofKind(cm, "Certificate") {
		// Field names and types are the API server's to check (the
		// cert-manager fixture, TestAgainstAPIServer).
		var c cert
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &c); err != nil {
			t.Fatalf("Certificate %s: %v", o.GetName(), err)
		}
		if o.GetNamespace() != namespace {
			t.Errorf("Certificate %s in namespace %q, want %s (next to the Pods mounting its Secret)", o.GetName(), o.GetNamespace(), namespace)
		}
		certs[c.Spec.SecretName] = c
		// Its issuer is rendered, or, for a ClusterIssuer the chart was
		// told to use, named as told.
		ref := c.Spec.IssuerRef
		if ref.Group != "cert-manager.io" {
			t.Errorf("Certificate %s: issuerRef group %q", o.GetName(), ref.Group)
		}
		if r.name == helmClusterIssuer.name && !c.Spec.IsCA {
			if ref.Kind != "ClusterIssuer" || ref.Name != "corp-ca" {
				t.Errorf("Certificate %s: issuerRef %+v, want the ClusterIssuer corp-ca of the values", o.GetName(), ref)
			}
		} else if iss := find(cm, ref.Kind, ref.Name); iss == nil || ref.Kind != "Issuer" {
			t.Errorf("Certificate %s: issuerRef %+v is not rendered", o.GetName(), ref)
		} else if ca, _, _ := unstructured.NestedString(iss.Object, "spec", "ca", "secretName"); ca != "" {
			// A CA Issuer signs with a Secret some rendered CA Certificate
			// fills (self-signed bootstrap), or that the user creates.
			if c, ok := certs[ca]; ok && !c.Spec.IsCA {
				t.Errorf("Issuer %s signs with %s, a leaf's Secret", iss.GetName(), ca)
			}
		}
	}
	if r.name == helmClusterIssuer.name {
		if len(ofKind(cm, "Issuer")) > 0 {
			t.Errorf("renders an Issuer, though told to use ClusterIssuer corp-ca")
		}
	}
	if c, ok := certs["ate-worker-tls"]; ok {
		t.Errorf("a Certificate makes Secret ate-worker-tls (%v): worker Pods' certificates are the csi-driver's, one per Pod", c.Spec.URIs)
	}
	for _, l := range tlsComponents {
		c, ok := certs[l.secret]
		if !ok {
			t.Errorf("%s: no Certificate makes Secret %s", l.deployment, l.secret)
			continue
		}
		if len(c.Spec.URIs) != 1 {
			t.Errorf("Certificate of %s has URIs %q, want its one SPIFFE ID", l.secret, c.Spec.URIs)
			continue
		}
		u, err := url.Parse(c.Spec.URIs[0])
		if err != nil {
			t.Errorf("Certificate of %s: URI %q: %v", l.secret, c.Spec.URIs[0], err)
			continue
		}
		id, err := auth.ParseIdentityURI(u, trustDomain)
		if err != nil || id.Component != l.component || id.Name == "" {
			t.Errorf("Certificate of %s: %q is %+v (%v), want a %s identity in %s", l.secret, u, id, err, l.component, trustDomain)
		}
		for _, use := range []string{"server auth", "client auth"} {
			if !slices.Contains(c.Spec.Usages, use) {
				t.Errorf("Certificate of %s: usages %q lack %q", l.secret, c.Spec.Usages, use)
			}
		}
		if c.Spec.IsCA || c.Spec.Duration == "" || c.Spec.RenewBefore == "" || c.Spec.PrivateKey.RotationPolicy != "Always" {
			t.Errorf("Certificate of %s: isCA %v duration %q renewBefore %q rotation %q: want a short-lived leaf renewed with a new key",
				l.secret, c.Spec.IsCA, c.Spec.Duration, c.Spec.RenewBefore, c.Spec.PrivateKey.RotationPolicy)
		}
		if l.component == auth.ComponentAPIServer {
			// k8s:///ate-apiserver.<ns>:grpc makes ate-apiserver.<ns> the
			// TLS server name; the rest are the Service's other names.
			wantDNS := []string{"ate-apiserver", "ate-apiserver." + namespace, "ate-apiserver." + namespace + ".svc"}
			for _, n := range wantDNS {
				if !slices.Contains(c.Spec.DNSNames, n) {
					t.Errorf("API server certificate names %q, lacks %s", c.Spec.DNSNames, n)
				}
			}
			domain := "cluster.local"
			if r.name == helmClusterIssuer.name {
				domain = "corp.internal"
			}
			if n := "ate-apiserver." + namespace + ".svc." + domain; !slices.Contains(c.Spec.DNSNames, n) {
				t.Errorf("API server certificate names %q, lacks %s", c.Spec.DNSNames, n)
			}
		}
	}
}

// workerSettings are the worker Pods' settings that the controller's
// args give, by the flags of `ate controller` (cmd/ate's
// TestManifestArgsParse parses them with the real flag set); the worker
// trust domain defaults to the controller's --trust-domain, as `ate
// controller` does, and matters only with TLS.
func workerSettings(args []string) controller.WorkerSettings {
	var w controller.WorkerSettings
	w.API, _ = argValue(args, "worker-api")
	w.Image, _ = argValue(args, "worker-image")
	w.Snapshots, _ = argValue(args, "worker-snapshots")
	w.EnvSecret, _ = argValue(args, "worker-env-secret")
	sa, _ := argValue(args, "worker-service-account")
	w.ServiceAccount = cmp.Or(sa, controller.DefaultWorkerServiceAccount)
	w.CertIssuer, _ = argValue(args, "worker-cert-issuer")
	_, w.Insecure = argValue(args, "worker-insecure")
	_, w.TLSBootstrap = argValue(args, "worker-tls-bootstrap")
	w.TokenAudience, _ = argValue(args, "worker-token-audience")
	if w.TLSBootstrap {
		w.CACert = []byte("the controller's ca.crt") // read at start from its --tls-dir
	}
	if !w.Insecure {
		td, _ := argValue(args, "worker-trust-domain")
		ctl, _ := argValue(args, "trust-domain")
		w.TrustDomain = cmp.Or(td, ctl, auth.DefaultTrustDomain)
	}
	return w
}

// checkWorkerIssuer: the issuer the controller names for worker Pods'
// certificates (want, "Kind/name"; "" for plaintext) is rendered when the
// rendering promises it, as a CA issuer that also signs every component
// Certificate (one CA, so nodes and components trust each other) and, as
// an Issuer, in the namespace of every rendered WorkerPool (an Issuer
// signs only for its own namespace's Pods); else it is the user's and not
// rendered.
func checkWorkerIssuer(t *testing.T, want string, rendered bool, objs []*unstructured.Unstructured) {
	t.Helper()
	if want == "" {
		return
	}
	kind, name, _ := strings.Cut(want, "/")
	iss := find(objs, kind, name)
	if !rendered {
		if iss != nil {
			t.Errorf("worker issuer %s rendered, though it is the user's", want)
		}
		return
	}
	if iss == nil || iss.GetAPIVersion() != "cert-manager.io/v1" {
		t.Fatalf("the controller's --worker-cert-issuer=%s is not rendered", want)
	}
	if ca, _, _ := unstructured.NestedString(iss.Object, "spec", "ca", "secretName"); ca == "" {
		t.Errorf("worker issuer %s is no CA issuer: %v", want, iss.Object["spec"])
	}
	if kind == "Issuer" {
		for _, p := range ofKind(objs, "WorkerPool") {
			if p.GetNamespace() != iss.GetNamespace() {
				t.Errorf("WorkerPool %s/%s: its Pods' Issuer %s is in namespace %s", p.GetNamespace(), p.GetName(), name, iss.GetNamespace())
			}
		}
	}
	for _, c := range ofKind(objs, "Certificate") {
		if isCA, _, _ := unstructured.NestedBool(c.Object, "spec", "isCA"); isCA {
			continue
		}
		k, _, _ := unstructured.NestedString(c.Object, "spec", "issuerRef", "kind")
		n, _, _ := unstructured.NestedString(c.Object, "spec", "issuerRef", "name")
		if k+"/"+n != want {
			t.Errorf("Certificate %s issued by %s/%s, worker Pods' by %s: two CAs", c.GetName(), k, n, want)
		}
	}
}

// testWorkerDeployments applies (server-side, dry-run) the Deployment the
// controller makes for each rendering's example WorkerPool, with the
// worker settings of the rendering's controller args: the worker Pods'
// TLS (cert-manager's csi-driver volume, or plaintext) as rendered is
// what the kube-apiserver accepts.
func testWorkerDeployments(t *testing.T, c client.Client) {
	for _, r := range componentRenderings {
		objs := r.render(t)
		pools := ofKind(objs, "WorkerPool")
		if len(pools) == 0 {
			continue // workerPool.enabled=false: nothing the controller renders
		}
		t.Run(r.name, func(t *testing.T) {
			ctl := deployment(t, objs, "ate-controller").Spec.Template.Spec.Containers[0]
			w := workerSettings(ctl.Args)
			// Without --worker-image the controller runs its own.
			w.Image = cmp.Or(w.Image, ctl.Image)
			var sc *atek8s.SandboxConfig
			if o := ofKind(objs, "SandboxConfig"); len(o) > 0 {
				sc = typed[atek8s.SandboxConfig](t, o[0])
			}
			for _, p := range pools {
				pool := typed[atek8s.WorkerPool](t, p)
				pool.UID = "3f1c2a5e-0000-4000-8000-000000000001" // owner references need one
				d := controller.WorkerDeployment(pool, w, sc)
				var csi []string
				for _, v := range d.Spec.Template.Spec.Volumes {
					if v.CSI != nil {
						csi = append(csi, v.CSI.Driver+" "+v.CSI.VolumeAttributes["csi.cert-manager.io/issuer-kind"]+"/"+v.CSI.VolumeAttributes["csi.cert-manager.io/issuer-name"])
					}
				}
				if want := "csi.cert-manager.io " + w.CertIssuer; w.CertIssuer != "" && !reflect.DeepEqual(csi, []string{want}) || w.CertIssuer == "" && len(csi) > 0 {
					t.Errorf("worker Pods of %s: csi volumes %q with --worker-cert-issuer=%q", pool.Name, csi, w.CertIssuer)
				}
				u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(d)
				if err != nil {
					t.Fatal(err)
				}
				err = c.Apply(t.Context(), client.ApplyConfigurationFromUnstructured(&unstructured.Unstructured{Object: u}),
					client.DryRunAll, client.ForceOwnership, client.FieldOwner(controller.FieldManager))
				if err != nil {
					t.Errorf("worker Deployment of pool %s/%s refused: %v", pool.Namespace, pool.Name, err)
				}
			}
		})
	}
}

// policyBinding is a binding of --authorization-policy-file as
// docs/security.md writes it; unknown fields are refused.
type policyBinding struct {
	Name     string   `json:"name"`
	Atespace string   `json:"atespace,omitempty"`
	Role     string   `json:"role"`
	Users    []string `json:"users,omitempty"`
	Groups   []string `json:"groups,omitempty"`
}

// TestAuth: each authentication and authorisation flag of the API server
// names a file its Pod really has — the token CSV from a Secret, the
// policy from a rendered ConfigMap that parses as bindings, the OIDC CA
// from a ConfigMap — and the OIDC and identity settings are complete.
func TestAuth(t *testing.T) {
	type want struct {
		tokens, policy, oidcCA bool
		oidcIssuer             string
		issuer                 string
		bindings               int
	}
	for _, tc := range []struct {
		r rendering
		want
	}{
		{base, want{tokens: true, policy: true}},
		// Plaintext components carry no identity, which an API server
		// with authentication would refuse: the dev overlay has none.
		{dev, want{}},
		{production, want{tokens: true, policy: true, oidcCA: true, oidcIssuer: "https://kubernetes.default.svc.cluster.local"}},
		// The chart's default: static tokens from Secret ate-tokens.
		{helmChart, want{tokens: true}},
		{helmInsecure, want{}},
		{helmSecret, want{tokens: true, policy: true, oidcCA: true, oidcIssuer: "https://kubernetes.default.svc.cluster.local",
			issuer: "https://ate.example.com", bindings: 2}},
	} {
		t.Run(tc.r.name, func(t *testing.T) {
			objs := tc.r.render(t)
			d := deployment(t, objs, "ate-apiserver")
			spec := d.Spec.Template.Spec
			c := spec.Containers[0]

			file, ok := argValue(c.Args, "token-auth-file")
			if ok != tc.tokens {
				t.Errorf("--token-auth-file given %v, want %v", ok, tc.tokens)
			} else if ok {
				if v, _ := mountedFile(t, spec, c, file); v.Secret == nil || v.Secret.SecretName != "ate-tokens" {
					t.Errorf("token file from %+v, want Secret ate-tokens (tokens are secrets)", v.VolumeSource)
				}
			}

			file, ok = argValue(c.Args, "authorization-policy-file")
			if ok != tc.policy {
				t.Errorf("--authorization-policy-file given %v, want %v", ok, tc.policy)
			} else if ok {
				v, key := mountedFile(t, spec, c, file)
				var cmName string
				if v.ConfigMap != nil {
					cmName = v.ConfigMap.Name
				}
				cm := find(objs, "ConfigMap", cmName)
				if cm == nil {
					t.Fatalf("policy from %+v: no such ConfigMap rendered", v.VolumeSource)
				}
				text, _, _ := unstructured.NestedString(cm.Object, "data", key)
				var list []policyBinding
				if err := yaml.UnmarshalStrict([]byte(text), &list); err != nil {
					t.Fatalf("ConfigMap %s key %s is no binding list: %v\n%s", cmName, key, err, text)
				}
				if len(list) != tc.bindings {
					t.Errorf("%d bindings, want %d: %+v", len(list), tc.bindings, list)
				}
				for _, b := range list {
					if b.Name == "" || !slices.Contains([]string{"admin", "editor", "viewer"}, b.Role) || len(b.Users)+len(b.Groups) == 0 {
						t.Errorf("binding %+v: want a name, a role admin|editor|viewer and subjects", b)
					}
				}
			}

			issuer, ok := argValue(c.Args, "oidc-issuer-url")
			if issuer != tc.oidcIssuer {
				t.Errorf("--oidc-issuer-url=%q, want %q", issuer, tc.oidcIssuer)
			}
			if ok {
				if id, _ := argValue(c.Args, "oidc-client-id"); id == "" {
					t.Error("--oidc-issuer-url without --oidc-client-id (the audience)")
				}
				// The cluster's ServiceAccount tokens: sub is already
				// system:serviceaccount:<ns>:<name>, the RBAC subject.
				if p, _ := argValue(c.Args, "oidc-username-prefix"); p != "-" {
					t.Errorf("--oidc-username-prefix=%q, want - for ServiceAccount subjects", p)
				}
			}
			file, ok = argValue(c.Args, "oidc-ca-file")
			if ok != tc.oidcCA {
				t.Errorf("--oidc-ca-file given %v, want %v", ok, tc.oidcCA)
			} else if ok {
				if v, key := mountedFile(t, spec, c, file); v.ConfigMap == nil || v.ConfigMap.Name != "kube-root-ca.crt" || key != "ca.crt" {
					t.Errorf("OIDC CA from %+v key %s, want ConfigMap kube-root-ca.crt key ca.crt", v.VolumeSource, key)
				}
			}

			got, ok := argValue(c.Args, "issuer-url")
			if got != tc.issuer {
				t.Errorf("--issuer-url=%q, want %q", got, tc.issuer)
			}
			if ok {
				addr, _ := argValue(c.Args, "http-addr")
				port := addrPort(t, addr)
				var served bool
				for _, p := range c.Ports {
					served = served || p.Name == "http" && p.ContainerPort == port
				}
				svc := find(objs, "Service", "ate-apiserver")
				ports, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
				var exposed bool
				for _, p := range ports {
					exposed = exposed || p.(map[string]any)["targetPort"] == "http"
				}
				if !served || !exposed {
					t.Errorf("--issuer-url without port http (%d) in the container (%v) and Service ate-apiserver (%v)", port, served, exposed)
				}
			}
		})
	}
}

// TestHelmTLSModes: an unknown tls.mode, an issuer kind cert-manager's
// csi-driver cannot be asked for (the controller would refuse it too), or
// user authentication over plaintext components, fails rendering with a
// message naming the choices.
func TestHelmTLSModes(t *testing.T) {
	helm := tool(t, "helm")
	for _, tc := range []struct{ set, want string }{
		{"tls.mode=tls", `tls.mode "tls": want certManager, secret or none`},
		{"tls.workerCertificates=certManager,tls.certManager.issuer.kind=Certificate", `tls.certManager.issuer.kind "Certificate": want Issuer or ClusterIssuer`},
		{"tls.mode=secret,tls.workerCertificates=certManager,tls.certManager.issuer.name=", "tls.certManager.issuer.name is required"},
		// Found on a real cluster: plaintext components carry no identity,
		// so an API server with user authentication refuses them all.
		{"tls.mode=none,auth.tokenSecret=ate-tokens", "tls.mode none with auth.tokenSecret"},
		// The default tokenSecret too: plaintext must say it has none.
		{"tls.mode=none", "--set auth.tokenSecret="},
		{"tls.workerCertificates=csi", `tls.workerCertificates "csi": want apiserver or certManager`},
		{"tls.mode=none,auth.oidc.issuerURL=https://issuer.example,auth.oidc.clientID=ate", "tls.mode none with auth.tokenSecret or auth.oidc.issuerURL"},
	} {
		var stderr bytes.Buffer
		cmd := exec.Command(helm, "template", "substrate", filepath.Join(dir(), "helm", "substrate"), "--namespace", namespace, "--set", tc.set)
		cmd.Stderr = &stderr
		if err := cmd.Run(); err == nil || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%s: %v, stderr %q; want a refusal with %q", tc.set, err, stderr.String(), tc.want)
		}
	}
}

// testNotes: the chart's NOTES say what each TLS mode needs, and the
// plaintext mode's warn loudly. helm renders NOTES only for an install,
// which needs a cluster to talk to, even with --dry-run=client.
func testNotes(t *testing.T, kubeconfig string) {
	helm := tool(t, "helm")
	for _, tc := range []struct {
		mode string
		want []string
	}{
		{"none", []string{"WARNING: tls.mode=none", "PLAINTEXT and UNAUTHENTICATED"}},
		{"secret", []string{"ate certs secrets --ca-dir ca | kubectl -n ate-system apply -f -", "ate-apiserver-tls ate-router-tls ate-controller-tls",
			"ate-ca (tls.crt, tls.key: the CA)", "from\nthe API server for its ServiceAccount token", "create secret generic ate-tokens", "ate config set-context"}},
		{"certManager", []string{"kubectl -n ate-system get certificates", "the API server for its ServiceAccount token"}},
		{"certManager,tls.workerCertificates=certManager", []string{"kubectl -n ate-system get certificates", "csi.cert-manager.io", "Issuer ate-ca",
			"needs Issuer ate-ca there too"}},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			set := "tls.mode=" + tc.mode
			if tc.mode == "none" {
				set += ",auth.tokenSecret="
			}
			out := string(run(t, helm, "install", "substrate", filepath.Join(dir(), "helm", "substrate"), "--kubeconfig", kubeconfig,
				"--namespace", namespace, "--dry-run=client", "--set", set))
			i := strings.LastIndex(out, "NOTES:")
			if i < 0 {
				t.Fatalf("no NOTES in:\n%s", out)
			}
			notes := out[i:]
			for _, w := range tc.want {
				if !strings.Contains(notes, w) {
					t.Errorf("NOTES lack %q:\n%s", w, notes)
				}
			}
			if !strings.HasPrefix(tc.mode, "none") && strings.Contains(notes, "WARNING") {
				t.Errorf("NOTES warn of plaintext in mode %s:\n%s", tc.mode, notes)
			}
			// Worker Pods' certificates are per Pod: no shared Secret.
			if strings.Contains(notes, "ate-worker-tls") || tc.mode == "none" && strings.Contains(notes, "csi.cert-manager.io") {
				t.Errorf("NOTES of mode %s:\n%s", tc.mode, notes)
			}
		})
	}
}

// testIssuerDiscovery creates production's and the chart's
// ClusterRoleBinding for ServiceAccount issuer discovery for real and
// asks the API server whether an anonymous caller — the API server's
// OIDC verifier, which sends no credentials — may now read the discovery
// document and the keys, and nothing else.
func testIssuerDiscovery(t *testing.T, env *k8stest.Env) {
	ctx := t.Context()
	for _, r := range []rendering{production, helmSecret} {
		crb := find(r.render(t), "ClusterRoleBinding", "ate-service-account-issuer-discovery")
		if crb == nil {
			t.Fatalf("%s renders no ClusterRoleBinding ate-service-account-issuer-discovery", r.name)
		}
		if err := env.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(crb.DeepCopy()),
			client.ForceOwnership, client.FieldOwner("deploy-test")); err != nil {
			t.Fatalf("%s: %v", r.name, err)
		}
	}
	allowed := func(ctx context.Context, path string) (bool, error) {
		sar := &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
			User: "system:anonymous", Groups: []string{"system:unauthenticated"},
			NonResourceAttributes: &authzv1.NonResourceAttributes{Verb: "get", Path: path},
		}}
		res, err := env.Clientset.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
		if err != nil {
			return false, err
		}
		return res.Status.Allowed, nil
	}
	// The RBAC authorizer reads through an informer: wait for the grant.
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		return allowed(ctx, "/.well-known/openid-configuration")
	})
	if err != nil {
		t.Errorf("anonymous get /.well-known/openid-configuration never allowed: %v", err)
	}
	for path, want := range map[string]bool{
		"/.well-known/openid-configuration": true,
		"/openid/v1/jwks":                   true,
		"/api":                              false,
		"/apis/apps/v1":                     false,
	} {
		ok, err := allowed(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		if ok != want {
			t.Errorf("anonymous get %s allowed %v, want %v", path, ok, want)
		}
	}
}

// TestSecretsOffCommandLines: no rendering puts the record store's URL
// (password included) on a command line — ps and the Pod spec show
// those — but in the API server's environment from the Secret; none
// publishes a management port (metrics, and pprof before it was taken
// off) on a Service, which any Pod or sandbox reaching Service
// addresses could ask; and none serves pprof off loopback.
func TestSecretsOffCommandLines(t *testing.T) {
	for _, r := range componentRenderings {
		t.Run(r.name, func(t *testing.T) {
			objs := r.render(t)
			mgmtPorts := map[string]map[int32]bool{} // by the Pods' component label
			for _, o := range ofKind(objs, "Deployment") {
				d := typed[appsv1.Deployment](t, o)
				ports := map[int32]bool{}
				for _, c := range d.Spec.Template.Spec.Containers {
					for _, a := range c.Args {
						if strings.HasPrefix(a, "--store=") || strings.Contains(a, "$(ATE_STORE)") {
							t.Errorf("%s: %s puts the store URL on its command line: %q", d.Name, c.Name, a)
						}
						if v, ok := strings.CutPrefix(a, "--pprof-addr="); ok {
							if host, _, _ := net.SplitHostPort(v); host != "127.0.0.1" && host != "::1" && host != "localhost" {
								t.Errorf("%s: %s serves pprof on %q, off loopback", d.Name, c.Name, v)
							}
						}
						if v, ok := strings.CutPrefix(a, "--management-addr="); ok {
							ports[addrPort(t, v)] = true
						}
					}
					if d.Name == "ate-apiserver" {
						if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
							return e.Name == "ATE_STORE" && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil
						}) {
							t.Errorf("%s: no $ATE_STORE from a Secret", d.Name)
						}
					}
				}
				mgmtPorts[d.Spec.Template.Labels["app.kubernetes.io/component"]] = ports
			}
			for _, o := range ofKind(objs, "Service") {
				svc := typed[corev1.Service](t, o)
				mgmt := mgmtPorts[svc.Spec.Selector["app.kubernetes.io/component"]]
				for _, p := range svc.Spec.Ports {
					if p.TargetPort.StrVal == "management" || mgmt[p.TargetPort.IntVal] || (p.TargetPort.StrVal == "" && p.TargetPort.IntVal == 0 && mgmt[p.Port]) {
						t.Errorf("Service %s publishes the management port (%s %d → %s)", svc.Name, p.Name, p.Port, p.TargetPort.String())
					}
				}
			}
		})
	}
}
