// Package v1alpha1 holds Substrate's Kubernetes API, group ate.substrate.dev:
// WorkerPool (namespaced: worker capacity as Pods the Kubernetes scheduler
// places) and SandboxConfig (cluster-scoped: the sandbox runtime's assets
// per architecture). Actors are never Kubernetes objects: they change too
// often for etcd, and live in the API server's record store.
//
// The CRD YAML in deploy/crds and zz_generated.deepcopy.go are generated
// by controller-gen from these types (`make generate`).
//
// +kubebuilder:object:generate=true
// +groupName=ate.substrate.dev
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

// GroupVersion is the API group and version of these types.
var GroupVersion = schema.GroupVersion{Group: "ate.substrate.dev", Version: "v1alpha1"}

var (
	// SchemeBuilder registers the types with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}
	// AddToScheme adds the types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func init() {
	SchemeBuilder.Register(&WorkerPool{}, &WorkerPoolList{}, &SandboxConfig{}, &SandboxConfigList{})
}
