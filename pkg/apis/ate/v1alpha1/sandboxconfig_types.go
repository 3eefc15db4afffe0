package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RuntimeAsset is one file of the sandbox runtime for one architecture,
// fetched by the node agent and checked against SHA256 before use.
type RuntimeAsset struct {
	// Name is the asset: runsc (the gVisor runtime binary).
	// +kubebuilder:validation:Enum=runsc
	Name string `json:"name"`
	// Architecture is a GOARCH value.
	// +kubebuilder:validation:Enum=amd64;arm64
	Architecture string `json:"architecture"`
	// URL is where the node fetches it: https://, http:// or file://
	// (a path inside the worker Pod, e.g. a volume).
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^(https?|file)://.+`
	URL string `json:"url"`
	// SHA256 is the file's digest, 64 lowercase hex digits; a node
	// refuses a file that does not match.
	// +kubebuilder:validation:Pattern=`^[a-f0-9]{64}$`
	SHA256 string `json:"sha256"`
}

// SandboxConfigSpec is a sandbox runtime's assets.
type SandboxConfigSpec struct {
	// SandboxClass is the runtime these assets are for.
	// +kubebuilder:default=gvisor
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`
	// +optional
	SandboxClass string `json:"sandboxClass,omitempty"`
	// Default makes this the SandboxConfig of WorkerPools of its class
	// that name none. One default per class: when two claim it, neither
	// is used and both report Conflict.
	// +optional
	Default bool `json:"default,omitempty"`
	// Assets per name and architecture.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +listType=map
	// +listMapKey=name
	// +listMapKey=architecture
	// +kubebuilder:validation:XValidation:rule="self.exists(a, a.name == 'runsc')",message="assets must include runsc for at least one architecture"
	Assets []RuntimeAsset `json:"assets"`
}

// SandboxConfigStatus is the observed state.
type SandboxConfigStatus struct {
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Accepted (False with reason Conflict when another
	// SandboxConfig is the default of the same class).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// SandboxConfig says where nodes get the sandbox runtime for each
// architecture. Cluster-scoped: one set of runtimes serves every
// namespace's pools.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=sbc,categories=ate
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Class",type=string,JSONPath=`.spec.sandboxClass`
// +kubebuilder:printcolumn:name="Default",type=boolean,JSONPath=`.spec.default`
// +kubebuilder:printcolumn:name="Accepted",type=string,JSONPath=`.status.conditions[?(@.type=="Accepted")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type SandboxConfig struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec SandboxConfigSpec `json:"spec"`
	// +optional
	Status SandboxConfigStatus `json:"status,omitempty"`
}

// SandboxConfigList is a list of SandboxConfigs.
//
// +kubebuilder:object:root=true
type SandboxConfigList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SandboxConfig `json:"items"`
}
