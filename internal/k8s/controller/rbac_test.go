package controller

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"substrate.dev/ate/internal/testwait"
	atek8s "substrate.dev/ate/pkg/apis/ate/v1alpha1"
)

// without returns RBACRules with verbs taken off resource.
func without(resource string, verbs ...string) []rbacv1.PolicyRule {
	var out []rbacv1.PolicyRule
	for _, r := range RBACRules() {
		if !slices.Contains(r.Resources, resource) {
			out = append(out, r)
			continue
		}
		for _, res := range r.Resources {
			rule := r
			rule.Resources = []string{res}
			if res == resource {
				rule.Verbs = slices.DeleteFunc(slices.Clone(r.Verbs), func(v string) bool { return slices.Contains(verbs, v) })
			}
			out = append(out, rule)
		}
	}
	return out
}

// TestMissingPermission runs the controller as a user with RBACRules
// but for list/watch of one kind. /readyz answers 503 naming the
// resource and verb within the sync timeout, the log names them, and
// the WorkerPool → Deployment path still puts back a Deployment scaled
// to 0 by hand; with SandboxConfigs unreadable it keeps the
// Deployment's runtime flags and marks the pool Degraded.
func TestMissingPermission(t *testing.T) {
	tests := []struct {
		resource string
		// degraded is the pool's Degraded reason expected ("" none).
		degraded string
	}{
		{resource: "sandboxconfigs", degraded: ReasonSandboxConfigUnavailable},
		{resource: "pods"},
	}
	for _, tc := range tests {
		t.Run(tc.resource, func(t *testing.T) {
			ns := namespace(t)
			pool := newPool(ns, "w", 2)
			create(t, pool)
			// A Deployment as an earlier reconcile left it, with a runtime
			// the controller cannot now read the SandboxConfig of.
			runsc := []string{"--runsc-asset=amd64=" + sha('d') + "@https://example.com/earlier"}
			if err := applyObject(t.Context(), testEnv.Client, workerDeployment(getPool(t, ns, "w"), WorkerSettings{Image: "ate:test", API: "x:1"}, runsc)); err != nil {
				t.Fatal(err)
			}

			user := "ctl-no-" + tc.resource + "-" + ns
			rc := restrictedUser(t, user, without(tc.resource, "list", "watch"))
			start := timeNow()
			ctl := startController(t, ns, rc, Config{API: startFake(t, &fakeControl{}), Workers: WorkerSettings{API: "x:1"}})

			var body string
			testwait.Until(t, "/readyz 503 naming "+tc.resource, func() bool {
				code, b := ctl.readyz(t)
				body = b
				return code == 503 && strings.Contains(b, `"`+tc.resource+`"`) && strings.Contains(b, "cannot list")
			})
			if took := timeNow().Sub(start); took > 3*timeSecond+2*timeSecond {
				t.Errorf("/readyz took %v to report, bound 3s", took)
			}
			t.Logf("/readyz: %s", body)
			testwait.Until(t, "log naming the refused resource", func() bool {
				l := ctl.log.String()
				return strings.Contains(l, `"resource":"`+tc.resource+`"`) && strings.Contains(l, "cannot list resource")
			})

			scaleDeployment(t, ns, "w", 0)
			testwait.Until(t, "Deployment put back to 2 replicas", func() bool { return replicasOf(deployment(t, ns, "w")) == 2 })
			if got := currentRunscArgs(deployment(t, ns, "w")); tc.degraded == ReasonSandboxConfigUnavailable && !slices.Equal(got, runsc) {
				t.Errorf("runtime flags %q, want %q kept", got, runsc)
			}
			if tc.degraded != "" {
				testwait.Until(t, "pool Degraded "+tc.degraded, func() bool {
					c := condition(getPool(t, ns, "w"), atek8s.ConditionDegraded)
					return c != nil && c.Status == "True" && c.Reason == tc.degraded
				})
			}

			// The permission granted: the idle path starts on its next try.
			var role rbacv1.ClusterRole
			if err := testEnv.Client.Get(t.Context(), client.ObjectKey{Name: user}, &role); err != nil {
				t.Fatal(err)
			}
			role.Rules = RBACRules()
			if err := testEnv.Client.Update(t.Context(), &role); err != nil {
				t.Fatal(err)
			}
			testwait.Until(t, "/readyz 200 once granted", func() bool { code, _ := ctl.readyz(t); return code == 200 })
		})
	}
}

// TestRBACRulesSuffice: as a user with exactly RBACRules, every path
// syncs (/readyz 200) and a pool gets its Deployment and, with
// --worker-tls-bootstrap, its CA ConfigMap.
func TestRBACRulesSuffice(t *testing.T) {
	ns := namespace(t)
	rc := restrictedUser(t, "ctl-all-"+ns, RBACRules())
	ca := "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
	ctl := startController(t, ns, rc, Config{API: startFake(t, &fakeControl{}), LeaderElect: true,
		Workers: WorkerSettings{TLSBootstrap: true, CACert: []byte(ca)}})
	create(t, newPool(ns, "w", 1))
	testwait.Until(t, "Deployment", func() bool { return deployment(t, ns, "w") != nil })
	var cm corev1.ConfigMap
	if err := testEnv.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "w-workers-ca"}, &cm); err != nil || cm.Data["ca.crt"] != ca {
		t.Errorf("the pool's CA ConfigMap: %v, data %v", err, cm.Data)
	}
	testwait.Until(t, "/readyz 200", func() bool { code, _ := ctl.readyz(t); return code == 200 })
	testwait.Until(t, "NodesSynced status written", func() bool {
		c := condition(getPool(t, ns, "w"), atek8s.ConditionNodesSynced)
		return c != nil && c.Status == "True"
	})
}
