package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Labels and annotations the controller sets; users may not.
const (
	// PoolLabel names a worker Pod's WorkerPool, on the Pod and on each
	// of its workers (so a worker selector can name a pool).
	PoolLabel = "ate.substrate.dev/pool"
	// NamespaceLabel names the pool's namespace on each of its workers:
	// pools of one name in two namespaces are two pools, and the
	// controller matches the API server's workers to a pool by both.
	NamespaceLabel = "ate.substrate.dev/namespace"
	// PodDeletionCostAnnotation is the ReplicaSet controller's hint
	// (Kubernetes 1.22+, k8s.io/api/core/v1 PodDeletionCost): on
	// scale-down, Pods with a lower cost go first. The controller sets it
	// to what a Pod hosts, so free workers are removed before busy ones.
	PodDeletionCostAnnotation = "controller.kubernetes.io/pod-deletion-cost"
)

// Condition types of a WorkerPool's status.
const (
	// ConditionReady: every desired worker Pod is ready and its node
	// registered with the API server.
	ConditionReady = "Ready"
	// ConditionDegraded: the pool cannot reach its desired state
	// (Deployment apply refused, SandboxConfig missing, …); the message
	// says why.
	ConditionDegraded = "Degraded"
	// ConditionNodesSynced: the controller's last sync of the pool's
	// worker Pods with the API server (drains, removals, deletion costs,
	// readyWorkers) succeeded. False with reason APIServerUnavailable
	// while the API server cannot be reached; the Deployment is still
	// reconciled meanwhile.
	ConditionNodesSynced = "NodesSynced"
)

// WorkerPoolSpec is the desired worker capacity.
//
// +kubebuilder:validation:XValidation:rule="!has(self.sandboxConfigName) || self.sandboxConfigName.size() > 0",message="sandboxConfigName must not be empty when set"
type WorkerPoolSpec struct {
	// Replicas is the number of worker Pods. Each Pod runs one node agent
	// (`ate node`) with WorkersPerPod workers.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`

	// WorkersPerPod is the number of workers (sandbox slots) each Pod's
	// node agent runs.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=64
	// +optional
	WorkersPerPod int32 `json:"workersPerPod,omitempty"`

	// Labels are given to every worker of the pool; actors' worker
	// selectors match them. The controller adds ate.substrate.dev/pool
	// and ate.substrate.dev/namespace.
	// +kubebuilder:validation:MaxProperties=32
	// +kubebuilder:validation:XValidation:rule="self.all(k, k.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$'))",message="label keys must be Kubernetes label keys: an optional DNS-subdomain prefix and '/', then at most 63 alphanumerics, '-', '_' or '.'"
	// +kubebuilder:validation:XValidation:rule="!('ate.substrate.dev/pool' in self)",message="label ate.substrate.dev/pool is set by the controller to the pool's name"
	// +kubebuilder:validation:XValidation:rule="!('ate.substrate.dev/namespace' in self)",message="label ate.substrate.dev/namespace is set by the controller to the pool's namespace"
	// +optional
	Labels map[string]LabelValue `json:"labels,omitempty"`

	// SandboxClass is the sandbox runtime the workers run; it must be the
	// API server's (`ate apiserver --sandbox-class`). Immutable.
	// +kubebuilder:default=gvisor
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="sandboxClass is immutable: create another WorkerPool"
	// +optional
	SandboxClass string `json:"sandboxClass,omitempty"`

	// SandboxConfigName names the SandboxConfig whose runtime assets the
	// workers use; empty means the default SandboxConfig of the class.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	SandboxConfigName string `json:"sandboxConfigName,omitempty"`

	// Image is the `ate` container image of the worker Pods; empty means
	// the controller's --worker-image.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Image string `json:"image,omitempty"`

	// Template is the part of the worker Pods' spec a platform team sets.
	// +optional
	Template WorkerPodTemplate `json:"template,omitempty"`
}

// LabelValue is a Kubernetes label value: at most 63 alphanumerics, '-',
// '_' or '.', starting and ending alphanumeric, or empty. The length
// bound keeps the CEL rule's estimated cost within the API server's CRD
// budget (without it the rule over a map of unbounded strings was refused,
// 13x over).
// +kubebuilder:validation:MaxLength=63
// +kubebuilder:validation:XValidation:rule="self.matches('^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$')",message="label values must be at most 63 alphanumerics, '-', '_' or '.', starting and ending alphanumeric"
type LabelValue string

// WorkerPodTemplate is the subset of a Pod spec a WorkerPool passes on to
// its worker Pods; the controller owns the rest (container, args,
// privileges, probes).
type WorkerPodTemplate struct {
	// Labels and Annotations are added to the worker Pods' metadata.
	// +optional
	Labels map[string]string `json:"labels,omitempty"`
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
	// +optional
	// +listType=atomic
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`
	// +optional
	Affinity *corev1.Affinity `json:"affinity,omitempty"`
	// Resources of the node agent container, whose cgroup also holds the
	// sandboxes.
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`
	// +optional
	PriorityClassName string `json:"priorityClassName,omitempty"`
	// +optional
	ServiceAccountName string `json:"serviceAccountName,omitempty"`
	// ImagePullSecrets are Secrets in the pool's namespace with which the
	// kubelet pulls the worker Pods' image (the controller's
	// --worker-image) from a private registry. Template images are not
	// pulled by the kubelet but by the node agent
	// (--worker-registry-credentials-secret).
	// +optional
	// +listType=atomic
	ImagePullSecrets []corev1.LocalObjectReference `json:"imagePullSecrets,omitempty"`
	// TerminationGracePeriodSeconds bounds a leaving Pod's drain: its
	// running actors are suspended and paused checkpoints uploaded within
	// it. At least 10.
	// +kubebuilder:default=60
	// +kubebuilder:validation:Minimum=10
	// +kubebuilder:validation:Maximum=3600
	// +optional
	TerminationGracePeriodSeconds *int64 `json:"terminationGracePeriodSeconds,omitempty"`
}

// WorkerPoolStatus is the observed state.
type WorkerPoolStatus struct {
	// ObservedGeneration is the spec generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Replicas is the number of worker Pods that exist (the /scale
	// subresource's status.replicas).
	// +optional
	Replicas int32 `json:"replicas"`
	// ReadyReplicas is the number of worker Pods that are ready.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas"`
	// ReadyWorkers is the number of the pool's workers the API server
	// lists on READY nodes.
	// +optional
	ReadyWorkers int32 `json:"readyWorkers"`
	// Selector is the worker Pods' label selector, for the /scale
	// subresource (an HPA reads it).
	// +optional
	Selector string `json:"selector,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// WorkerPool is worker capacity: a Deployment of worker Pods, each running
// a node agent, whose workers carry the pool's labels.
//
// The name becomes a label value (ate.substrate.dev/pool) and the start
// of its worker Pods' names, which are node names (DNS labels): so a DNS
// label itself, short enough for "<name>-workers-<hash>-<suffix>".
//
// +kubebuilder:object:root=true
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 40 && self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="a WorkerPool's name must be a DNS label of at most 40 characters (lowercase alphanumerics and '-'): it names its worker Pods and nodes"
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.replicas,statuspath=.status.replicas,selectorpath=.status.selector
// +kubebuilder:resource:shortName=wp,categories=ate
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.spec.replicas`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyReplicas`
// +kubebuilder:printcolumn:name="Workers",type=integer,JSONPath=`.status.readyWorkers`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Degraded",type=string,JSONPath=`.status.conditions[?(@.type=="Degraded")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type WorkerPool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Spec WorkerPoolSpec `json:"spec,omitempty"`
	// +optional
	Status WorkerPoolStatus `json:"status,omitempty"`
}

// WorkerPoolList is a list of WorkerPools.
//
// +kubebuilder:object:root=true
type WorkerPoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []WorkerPool `json:"items"`
}
