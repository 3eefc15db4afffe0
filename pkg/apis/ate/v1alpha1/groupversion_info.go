// Package v1alpha1 holds Substrate's Kubernetes API, group ate.substrate.dev:
// WorkerPool (namespaced: worker capacity as Pods the Kubernetes scheduler
// places) and SandboxConfig (cluster-scoped: the sandbox runtime's assets
// per architecture). Actors are never Kubernetes objects: they change too
// often for etcd, and live in the API server's record store.
//
// The CRD YAML in deploy/crds and zz_generated.deepcopy.go are generated
// by controller-gen from these types (`make generate`). The package
// depends on k8s.io/apimachinery and k8s.io/api only, so clients can
// import it cheaply.
//
// +kubebuilder:object:generate=true
// +groupName=ate.substrate.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the API group and version of these types.
var GroupVersion = schema.GroupVersion{Group: "ate.substrate.dev", Version: "v1alpha1"}

var (
	// SchemeBuilder registers the types with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds the types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &WorkerPool{}, &WorkerPoolList{}, &SandboxConfig{}, &SandboxConfigList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
