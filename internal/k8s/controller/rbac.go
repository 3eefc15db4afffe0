package controller

import (
	rbacv1 "k8s.io/api/rbac/v1"
)

// RBACRules are the permissions `ate controller` needs, for a ClusterRole
// (or, with --namespace, a Role in that namespace for the namespaced
// kinds plus a ClusterRole for sandboxconfigs). The least-privilege test
// runs the controller with exactly these. Leases and events are needed
// only in the leader election namespace.
func RBACRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{"ate.substrate.dev"}, Resources: []string{"workerpools", "sandboxconfigs"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"ate.substrate.dev"}, Resources: []string{"workerpools/status", "sandboxconfigs/status"}, Verbs: []string{"get", "patch"}},
		// update on finalizers: the Deployment's owner reference sets
		// blockOwnerDeletion, which clusters running the
		// OwnerReferencesPermissionEnforcement admission plugin allow only
		// to who may update the owner's finalizers.
		{APIGroups: []string{"ate.substrate.dev"}, Resources: []string{"workerpools/finalizers"}, Verbs: []string{"update"}},
		// create and patch: a server-side apply that creates the Deployment
		// is authorised as both.
		{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"get", "list", "watch", "create", "patch"}},
		// patch: the deletion-cost annotation.
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch", "patch"}},
		// namespaces: a pool runs only in a namespace labelled
		// ate.substrate.dev/worker-pools=allowed (admission.go); the
		// watch scales a withdrawn namespace's pools to zero at once.
		{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get", "list", "watch"}},
		// create and patch: with --worker-tls-bootstrap, each pool's CA
		// ConfigMap, server-side applied as the Deployment is.
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create", "patch"}},
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "create", "update"}},
		// The leader election's events (controller-runtime records them).
		{APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
	}
}
