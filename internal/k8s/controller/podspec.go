package controller

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"substrate.dev/ate/internal/auth"
	"substrate.dev/ate/internal/nodeapi"
	atek8s "substrate.dev/ate/pkg/apis/ate/v1alpha1"
)

// Labels every worker Pod carries besides atek8s.PoolLabel.
const (
	nameLabel      = "app.kubernetes.io/name"
	managedByLabel = "app.kubernetes.io/managed-by"
	workerName     = "ate-worker"
	// FieldManager owns what the controller applies (Deployments, pool
	// and SandboxConfig status written by the Deployment path).
	FieldManager = "ate-controller"
)

// Fixed ports and paths inside a worker Pod. Fixed, not picked: the
// Pod's IP is the node's address, and a probe needs a known port.
const (
	agentPort      = 7072
	tunnelPort     = 7071
	managementPort = 9090
	dataDir        = "/var/lib/ate"
	// registryCredentialsDir is where RegistryCredentialsSecret is
	// mounted.
	registryCredentialsDir = "/etc/ate/registry-credentials"
	// drainMargin is taken off the Pod's grace period for ate node's
	// --drain-timeout, so the node reports LOST ("left") and exits before
	// the kubelet's SIGKILL.
	drainMargin         = 5
	defaultGraceSeconds = 60
)

// WorkerSettings are the controller-wide parts of every worker Pod.
type WorkerSettings struct {
	// API is ate node's --api: the API server as seen from a worker Pod
	// (host:port, a list, or dns:///name:port).
	API string
	// Image is the `ate` image of pools that name none.
	Image string
	// AllowedImages are the other images a pool may name
	// (--worker-allowed-image); a pool naming any other runs no Pod.
	AllowedImages []string
	// Snapshots is ate node's --snapshots, the API server's snapshot
	// store URL.
	Snapshots string
	// EnvSecret names an optional Secret in the pool's namespace whose
	// keys become the node container's environment (S3 credentials);
	// empty: none.
	EnvSecret string
	// RegistryCredentialsSecret names an optional Secret in the pool's
	// namespace holding <atespace>.json keys, Docker config.jsons with
	// each atespace's registry credentials, mounted for ate node
	// --registry-credentials; empty: pulls are anonymous.
	RegistryCredentialsSecret string
	// ServiceAccount is the worker Pods' ServiceAccount when the pool's
	// template names none (DefaultWorkerServiceAccount, which the
	// manifests give the k8s:/// resolver's permissions): the
	// namespace's "default" has none, and a node dialling
	// k8s:///… would never become ready.
	ServiceAccount string
	// CertIssuer is the cert-manager issuer ("Issuer/name" or
	// "ClusterIssuer/name") whose csi-driver (csi.cert-manager.io)
	// mounts each worker Pod its own node certificate, URI SAN
	// spiffe://<TrustDomain>/ate/node/<pod name> (the Pod's node name,
	// which the API server binds it to), at tlsDir for ate node
	// --tls-dir. Exactly one of CertIssuer and Insecure is set
	// (validateTLS): a Secret shared by every worker Pod cannot carry
	// per-Pod node names, which the node registry binds calls to.
	CertIssuer string
	// Insecure gives ate node --insecure: plaintext, no identities.
	Insecure bool
	// TLSBootstrap gives ate node --tls-bootstrap-dir: each worker Pod
	// asks the API server (apiserver --node-signer-dir) for its node
	// certificate with a projected ServiceAccount token of audience
	// TokenAudience, and trusts the API server by CACert (PEM, the
	// controller's own ca.crt), which a ConfigMap per pool carries
	// (workerCAConfigMap). No cert-manager.
	TLSBootstrap  bool
	TokenAudience string
	CACert        []byte
	TrustDomain   string
}

// validateTLS says what to pass when w has neither or both of CertIssuer
// and Insecure, or a CertIssuer that is not [Issuer/|ClusterIssuer/]NAME
// (the controller flags' names, as the user sets them). A bad issuer
// caught here is a refusal to start, not worker Pods stuck mounting a
// volume the csi-driver cannot fill.
func (w WorkerSettings) validateTLS() error {
	modes := 0
	for _, set := range []bool{w.CertIssuer != "", w.Insecure, w.TLSBootstrap} {
		if set {
			modes++
		}
	}
	switch {
	case modes > 1:
		return errors.New("controller: --worker-tls-bootstrap, --worker-cert-issuer and --worker-insecure exclude each other: pass one")
	case modes == 0:
		return errors.New("controller: worker Pods need TLS: pass --worker-tls-bootstrap (each Pod asks the API server for its certificate with its ServiceAccount token), " +
			"--worker-cert-issuer Issuer/NAME or ClusterIssuer/NAME (cert-manager's csi-driver mounts each Pod its own node certificate) or --worker-insecure for plaintext")
	case w.TLSBootstrap && len(w.CACert) == 0:
		return errors.New("controller: --worker-tls-bootstrap needs the CA worker Pods trust the API server by: run the controller with --tls-dir")
	case w.CertIssuer != "":
		if kind, name := issuerRef(w.CertIssuer); kind != "Issuer" && kind != "ClusterIssuer" || name == "" || strings.Contains(name, "/") {
			return fmt.Errorf("controller: --worker-cert-issuer %q: want Issuer/NAME or ClusterIssuer/NAME (cert-manager.io issuers)", w.CertIssuer)
		}
	}
	return nil
}

// issuerRef splits CertIssuer into the issuer's kind and name; a bare
// name is an Issuer's (in the worker Pod's namespace).
func issuerRef(s string) (kind, name string) {
	kind, name, ok := strings.Cut(s, "/")
	if !ok {
		return "Issuer", s
	}
	return kind, name
}

// tlsDir is where a worker Pod's certificate is mounted.
const tlsDir = "/etc/ate/tls"

// bootstrapDir is where a worker Pod's token and CA are mounted with
// TLSBootstrap; tokenLife is the token's requested life (the kubelet
// refreshes it at 80%; a node certificate is asked for with the token
// as it is then).
const (
	bootstrapDir = "/var/run/ate/identity"
	tokenLife    = 3600
)

// caConfigMapName is the name of pool's ConfigMap carrying the CA its
// worker Pods trust the API server by (TLSBootstrap).
func caConfigMapName(pool string) string { return DeploymentName(pool) + "-ca" }

// workerCAConfigMap renders the ConfigMap of pool's worker CA
// (TLSBootstrap; nil otherwise), owned by the pool.
func workerCAConfigMap(pool *atek8s.WorkerPool, w WorkerSettings) *corev1.ConfigMap {
	if !w.TLSBootstrap {
		return nil
	}
	return &corev1.ConfigMap{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{
			Name: caConfigMapName(pool.Name), Namespace: pool.Namespace,
			Labels:          map[string]string{atek8s.PoolLabel: pool.Name, nameLabel: workerName, managedByLabel: FieldManager},
			OwnerReferences: poolOwner(pool),
		},
		Data: map[string]string{"ca.crt": string(w.CACert)},
	}
}

// poolOwner is the controller owner reference to pool.
func poolOwner(pool *atek8s.WorkerPool) []metav1.OwnerReference {
	return []metav1.OwnerReference{{
		APIVersion: atek8s.GroupVersion.String(), Kind: "WorkerPool",
		Name: pool.Name, UID: pool.UID,
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
	}}
}

// tlsArgsAndVolume are ate node's TLS flags, and the volume holding its
// certificate or what it asks for one with (nil with --insecure) and
// where it is mounted.
func tlsArgsAndVolume(pool string, w WorkerSettings) ([]string, *corev1.Volume, string) {
	td := cmp.Or(w.TrustDomain, auth.DefaultTrustDomain)
	if w.TLSBootstrap {
		return []string{"--tls-bootstrap-dir=" + bootstrapDir, "--trust-domain=" + td}, &corev1.Volume{Name: "identity", VolumeSource: corev1.VolumeSource{
			Projected: &corev1.ProjectedVolumeSource{DefaultMode: ptr.To[int32](0o400), Sources: []corev1.VolumeProjection{
				{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
					Audience: cmp.Or(w.TokenAudience, DefaultTokenAudience), ExpirationSeconds: ptr.To[int64](tokenLife), Path: "token"}},
				{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: caConfigMapName(pool)},
					Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
			}},
		}}, bootstrapDir
	}
	if w.CertIssuer == "" {
		return []string{"--insecure"}, nil, ""
	}
	kind, name := issuerRef(w.CertIssuer)
	return []string{"--tls-dir=" + tlsDir, "--trust-domain=" + td}, &corev1.Volume{Name: "tls", VolumeSource: corev1.VolumeSource{
		CSI: &corev1.CSIVolumeSource{Driver: "csi.cert-manager.io", ReadOnly: ptr.To(true), VolumeAttributes: map[string]string{
			"csi.cert-manager.io/issuer-kind": kind,
			"csi.cert-manager.io/issuer-name": name,
			// ${POD_NAME} is the csi-driver's own variable.
			"csi.cert-manager.io/uri-sans":   "spiffe://" + td + "/ate/node/${POD_NAME}",
			"csi.cert-manager.io/key-usages": "server auth,client auth,digital signature",
			"csi.cert-manager.io/duration":   "24h",
		}},
	}}, tlsDir
}

// DefaultTokenAudience is the audience of worker Pods' tokens with
// TLSBootstrap: the API server's default --node-token-audience
// (workeridentity.DefaultAudience, which imports this package).
const DefaultTokenAudience = "ate-node"

// DefaultWorkerServiceAccount is the worker Pods' ServiceAccount in the
// manifests (deploy/).
const DefaultWorkerServiceAccount = "ate-worker"

// DeploymentName is the name of the worker Deployment of the WorkerPool
// named pool (the node identity issuer checks worker Pods' owners by it).
func DeploymentName(pool string) string { return pool + "-workers" }

// selectorLabels are the worker Pods' selector: immutable in a
// Deployment, so only what never changes for a pool.
func selectorLabels(pool string) map[string]string {
	return map[string]string{atek8s.PoolLabel: pool, nameLabel: workerName}
}

// poolSelector is status.selector: the /scale subresource's label
// selector of pool's Pods, as a string ("k=v,k=v").
func poolSelector(pool string) string {
	return labels.SelectorFromSet(selectorLabels(pool)).String()
}

// runscAssetArgs are ate node's --runsc-asset flags for sc's runsc
// assets, "<arch>=<sha256>@<url>", sorted by architecture so that the
// rendered spec, and hence the Deployment, does not change by order.
func runscAssetArgs(sc *atek8s.SandboxConfig) []string {
	var args []string
	for _, a := range sc.Spec.Assets {
		if a.Name == "runsc" {
			args = append(args, fmt.Sprintf("--runsc-asset=%s=%s@%s", a.Architecture, a.SHA256, a.URL))
		}
	}
	slices.Sort(args)
	return args
}

// currentRunscArgs are the --runsc-asset flags of d's node container,
// kept when the SandboxConfig cannot be read so an apply does not drop
// them. Nil d or no such container: none.
func currentRunscArgs(d *appsv1.Deployment) []string {
	if d == nil {
		return nil
	}
	var args []string
	for _, c := range d.Spec.Template.Spec.Containers {
		if c.Name != "node" {
			continue
		}
		for _, a := range c.Args {
			if strings.HasPrefix(a, "--runsc-asset=") {
				args = append(args, a)
			}
		}
	}
	return args
}

// workerLabelsArg is ate node's --labels value: the pool and namespace
// first, then spec.labels sorted by key ("k=v,k=v").
func workerLabelsArg(pool *atek8s.WorkerPool) string {
	parts := []string{atek8s.PoolLabel + "=" + pool.Name, atek8s.NamespaceLabel + "=" + pool.Namespace}
	for _, k := range slices.Sorted(maps.Keys(pool.Spec.Labels)) {
		parts = append(parts, k+"="+string(pool.Spec.Labels[k]))
	}
	return strings.Join(parts, ",")
}

// workerDeployment renders pool's Deployment (apiVersion and kind set,
// for server-side apply): one Pod per node, each running `ate node` with
// spec.workersPerPod workers and runscArgs (from runscAssetArgs, or
// currentRunscArgs when the SandboxConfig is unavailable).
// WorkerDeployment is the Deployment the controller applies for pool
// when its SandboxConfig is sc (nil: none, the image's runsc).
func WorkerDeployment(pool *atek8s.WorkerPool, w WorkerSettings, sc *atek8s.SandboxConfig) *appsv1.Deployment {
	var runsc []string
	if sc != nil {
		runsc = runscAssetArgs(sc)
	}
	return workerDeployment(pool, w, runsc)
}

func workerDeployment(pool *atek8s.WorkerPool, w WorkerSettings, runscArgs []string) *appsv1.Deployment {
	t := pool.Spec.Template
	grace := ptr.Deref(t.TerminationGracePeriodSeconds, defaultGraceSeconds)
	podLabels := maps.Clone(t.Labels)
	if podLabels == nil {
		podLabels = map[string]string{}
	}
	maps.Copy(podLabels, WorkerPodLabels(pool.Name))
	image := pool.Spec.Image
	if image == "" {
		image = w.Image
	}
	workers := max(pool.Spec.WorkersPerPod, 1)
	class := nodeapi.ClassOf(pool.Spec.SandboxClass)
	// The image's entrypoint is `ate` (as for every other component's
	// manifest in deploy/), so the arguments start with the subcommand.
	args := []string{
		"node",
		"--api=" + w.API,
		"--name=$(POD_NAME)",
		"--advertise=$(POD_IP)",
		fmt.Sprintf("--workers=%d", workers),
		"--labels=" + workerLabelsArg(pool),
		"--sandbox-class=" + class.String(),
		fmt.Sprintf("--agent-port=%d", agentPort),
		fmt.Sprintf("--tunnel-port=%d", tunnelPort),
		fmt.Sprintf("--management-addr=:%d", managementPort),
		"--data-dir=" + dataDir,
		fmt.Sprintf("--drain-timeout=%ds", max(grace-drainMargin, 1)),
	}
	if w.Snapshots != "" {
		// Empty would make the node fall back to a directory of its own,
		// which the API server refuses (another snapshot store).
		args = append(args, "--snapshots="+w.Snapshots)
	}
	args = append(args, runscArgs...)
	tlsArgs, tlsVolume, tlsMount := tlsArgsAndVolume(pool.Name, w)
	args = append(args, tlsArgs...)
	mounts := []corev1.VolumeMount{{Name: "data", MountPath: dataDir}}
	volumes := []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	if tlsVolume != nil {
		mounts = append(mounts, corev1.VolumeMount{Name: tlsVolume.Name, MountPath: tlsMount, ReadOnly: true})
		volumes = append(volumes, *tlsVolume)
	}
	if s := w.RegistryCredentialsSecret; s != "" {
		// Optional: without the Secret the directory is empty and every
		// atespace pulls anonymously, as the API server would.
		args = append(args, "--registry-credentials="+registryCredentialsDir)
		mounts = append(mounts, corev1.VolumeMount{Name: "registry-credentials", MountPath: registryCredentialsDir, ReadOnly: true})
		volumes = append(volumes, corev1.Volume{Name: "registry-credentials", VolumeSource: corev1.VolumeSource{
			Secret: &corev1.SecretVolumeSource{SecretName: s, Optional: ptr.To(true), DefaultMode: ptr.To[int32](0o400)}}})
	}
	var envFrom []corev1.EnvFromSource
	if w.EnvSecret != "" {
		envFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: w.EnvSecret},
			Optional:             ptr.To(true),
		}}}
	}
	probe := func(path string) *corev1.Probe {
		return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
			Path: path, Port: intstr.FromInt32(managementPort),
		}}}
	}
	container := corev1.Container{
		Name:  "node",
		Image: image,
		Args:  args,
		Env: []corev1.EnvVar{
			{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
			{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
		},
		EnvFrom: envFrom,
		Ports: []corev1.ContainerPort{
			{Name: "agent", ContainerPort: agentPort},
			{Name: "tunnel", ContainerPort: tunnelPort},
			{Name: "management", ContainerPort: managementPort},
		},
		Resources: t.Resources,
		// runsc creates user, network and mount namespaces, mounts the
		// sandboxes' file systems and sets up their cgroups and veth
		// pairs: none of that is allowed to an unprivileged container,
		// and no narrower capability set is known to cover it (the same
		// holds for `ate up` outside Kubernetes, which runs as root).
		SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)},
		// /readyz answers 503 until the API server welcomed the node, so a
		// Ready Pod is a registered node.
		ReadinessProbe: probe("/readyz"),
		LivenessProbe:  probe("/healthz"),
		VolumeMounts:   mounts,
	}
	return &appsv1.Deployment{
		TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{
			Name:            DeploymentName(pool.Name),
			Namespace:       pool.Namespace,
			Labels:          map[string]string{atek8s.PoolLabel: pool.Name, nameLabel: workerName, managedByLabel: FieldManager},
			OwnerReferences: poolOwner(pool),
		},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(ptr.Deref(pool.Spec.Replicas, 1)),
			Selector: &metav1.LabelSelector{MatchLabels: selectorLabels(pool.Name)},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: podLabels, Annotations: maps.Clone(t.Annotations)},
				Spec: corev1.PodSpec{
					Containers:                    []corev1.Container{container},
					NodeSelector:                  nodeSelector(t.NodeSelector, runscArgs),
					Tolerations:                   t.Tolerations,
					Affinity:                      t.Affinity,
					PriorityClassName:             t.PriorityClassName,
					ServiceAccountName:            cmp.Or(t.ServiceAccountName, w.ServiceAccount),
					ImagePullSecrets:              t.ImagePullSecrets,
					TerminationGracePeriodSeconds: ptr.To(grace),
					Volumes:                       volumes,
				},
			},
		},
	}
}

// archLabel is the well-known node label of a node's GOARCH.
const archLabel = "kubernetes.io/arch"

// nodeSelector is the pool's node selector, plus kubernetes.io/arch when
// the runsc assets cover one architecture only and the pool does not
// choose: a Pod on another would find no runsc for its node and never
// become ready.
func nodeSelector(pool map[string]string, runscArgs []string) map[string]string {
	sel := maps.Clone(pool)
	archs := map[string]bool{}
	for _, a := range runscArgs {
		arch, _, ok := strings.Cut(strings.TrimPrefix(a, "--runsc-asset="), "=")
		if ok {
			archs[arch] = true
		}
	}
	if len(archs) != 1 || sel[archLabel] != "" {
		return sel
	}
	if sel == nil {
		sel = map[string]string{}
	}
	for arch := range archs {
		sel[archLabel] = arch
	}
	return sel
}

// WorkerPodLabels are the labels the controller puts on every worker Pod
// of pool, besides the pool template's own: WorkerPodOf's inverse.
func WorkerPodLabels(pool string) map[string]string {
	l := selectorLabels(pool)
	l[managedByLabel] = FieldManager
	return l
}

// WorkerPodOf returns the pool of a worker Pod the controller made: one
// carrying the labels workerDeployment puts on every worker Pod
// (PoolLabel, the worker name, managed by the controller). Labels are
// not proof: whoever may create Pods in a pool's namespace can set them,
// which is why pool namespaces are opted in by an operator
// (PoolNamespaceLabel) and the API server checks that too before giving
// a Pod a node certificate.
func WorkerPodOf(pod *corev1.Pod) (pool string, ok bool) {
	l := pod.Labels
	if l[nameLabel] != workerName || l[managedByLabel] != FieldManager || l[atek8s.PoolLabel] == "" {
		return "", false
	}
	return l[atek8s.PoolLabel], true
}
