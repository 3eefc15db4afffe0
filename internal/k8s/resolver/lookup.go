package resolver

import (
	"context"
	"fmt"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Lookup returns the ready endpoints of t now (host:port, sorted, as a
// Watch would send them) from one Service get (numeric ports only) and
// one EndpointSlice list, for callers that keep a session with every
// replica rather than a balanced connection (a node agent, which asks
// again periodically). A target naming no namespace uses
// opts.Namespace, else DefaultNamespace(). Errors: the failed get or
// list, naming the permission to grant.
func Lookup(ctx context.Context, cs kubernetes.Interface, t Target, opts Options) ([]string, error) {
	opts = opts.withDefaults()
	if t.Namespace == "" {
		t.Namespace = opts.Namespace
	}
	name := t.Port
	if num, ok := t.numericPort(); ok {
		svc, err := cs.CoreV1().Services(t.Namespace).Get(ctx, t.Service, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("k8s resolver %s: get %s %q in namespace %s (grant get on services to map port %s to its name): %w",
				t, serviceResource, t.Service, t.Namespace, t.Port, err)
		}
		found := false
		for _, p := range svc.Spec.Ports {
			if p.Port == num {
				name, found = p.Name, true
				break
			}
		}
		if !found {
			return nil, fmt.Errorf("k8s resolver %s: service %s/%s has no port %d", t, t.Namespace, t.Service, num)
		}
	}
	list, err := cs.DiscoveryV1().EndpointSlices(t.Namespace).List(ctx, metav1.ListOptions{LabelSelector: serviceNameLabel + "=" + t.Service})
	if err != nil {
		return nil, fmt.Errorf("k8s resolver %s: cannot list %s in namespace %s (grant list and watch on endpointslices, API group discovery.k8s.io): %w",
			t, sliceResource, t.Namespace, err)
	}
	ptrs := make([]*discoveryv1.EndpointSlice, len(list.Items))
	for i := range list.Items {
		ptrs[i] = &list.Items[i]
	}
	return ReadyAddresses(ptrs, name), nil
}
