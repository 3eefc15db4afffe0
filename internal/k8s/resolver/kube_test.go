package resolver_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/apidial"
	"substrate.dev/ate/internal/k8s/k8stest"
	"substrate.dev/ate/internal/k8s/resolver"
	"substrate.dev/ate/internal/testlog"
	"substrate.dev/ate/internal/testwait"
)

// backend is a Control server that answers GetActor with its own name
// and counts the calls and the connections it accepted.
type backend struct {
	atev1.UnimplementedControlServer
	name    string
	calls   atomic.Int64
	accepts atomic.Int64
}

func (b *backend) GetActor(context.Context, *atev1.GetActorRequest) (*atev1.Actor, error) {
	b.calls.Add(1)
	return &atev1.Actor{Name: b.name}, nil
}

// countingListener counts accepted connections: a client that
// reconnected would show as a second accept.
type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

func (b *backend) serve(t *testing.T, ln net.Listener) {
	t.Helper()
	gs := grpc.NewServer(apidial.ServerOptions()...)
	atev1.RegisterControlServer(gs, b)
	go func() { _ = gs.Serve(countingListener{ln, &b.accepts}) }()
	t.Cleanup(gs.Stop)
}

// listenSamePort listens on port p of every host, with p picked at
// random and retried if one host's p is taken.
func listenSamePort(t *testing.T, hosts ...string) (int, []net.Listener) {
	t.Helper()
	for range 20 {
		first, err := net.Listen("tcp", net.JoinHostPort(hosts[0], "0"))
		if err != nil {
			t.Fatal(err)
		}
		port := first.Addr().(*net.TCPAddr).Port
		lns := []net.Listener{first}
		for _, h := range hosts[1:] {
			ln, err := net.Listen("tcp", net.JoinHostPort(h, strconv.Itoa(port)))
			if err != nil {
				break
			}
			lns = append(lns, ln)
		}
		if len(lns) == len(hosts) {
			return port, lns
		}
		for _, ln := range lns {
			_ = ln.Close()
		}
	}
	t.Fatalf("no port free on all of %v", hosts)
	return 0, nil
}

func createNamespace(t *testing.T, env *k8stest.Env, name string) {
	t.Helper()
	_, err := env.Clientset.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

// createService makes Service svc with one TCP port name/port → targetPort.
func createService(t *testing.T, env *k8stest.Env, ns, svc, portName string, port, targetPort int) {
	t.Helper()
	_, err := env.Clientset.CoreV1().Services(ns).Create(context.Background(), &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: svc},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{
			Name: portName, Port: int32(port), TargetPort: intstr.FromInt32(int32(targetPort)), Protocol: corev1.ProtocolTCP,
		}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

// ep is an endpoint for an EndpointSlice.
type ep struct {
	addr               string
	ready, terminating bool
}

// slice builds EndpointSlice name of svc: ports name→number, endpoints
// eps. The API server refuses loopback addresses in IPv4 slices (no Pod
// has one), and the test's backends can only listen on loopback, so the
// slices are of type FQDN, whose addresses are names: "127.0.0.2" is a
// valid one, and the resolver sends it to grpc-go as it would an IP.
func slice(ns, name, svc string, ports map[string]int, eps ...ep) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeFQDN,
	}
	for n, p := range ports {
		s.Ports = append(s.Ports, discoveryv1.EndpointPort{Name: new(n), Port: new(int32(p))})
	}
	for _, e := range eps {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{e.addr},
			Conditions: discoveryv1.EndpointConditions{Ready: new(e.ready), Terminating: new(e.terminating)}})
	}
	return s
}

// TestKubernetes runs the resolver against a real kube-apiserver and
// etcd (one control plane for all subtests; each uses its own
// namespace).
func TestKubernetes(t *testing.T) {
	env := k8stest.Start(t)
	t.Run("FollowsEndpointsWithoutReconnecting", func(t *testing.T) { testFollows(t, env) })
	t.Run("NumericPortDialsTargetPort", func(t *testing.T) { testTargetPort(t, env) })
	t.Run("MissingEndpointSliceRBAC", func(t *testing.T) { testMissingRBAC(t, env) })
	t.Run("ReplicaListerFollowsTheWatch", func(t *testing.T) { testReplicaLister(t, env) })
}

// testReplicaLister: a node agent's lister of every replica answers from
// its watch, and follows the EndpointSlice as it changes.
func testReplicaLister(t *testing.T, env *k8stest.Env) {
	const ns, svc = "replicas", "api"
	createNamespace(t, env, ns)
	createService(t, env, ns, svc, "grpc", 7070, 7070)
	ctx := t.Context()
	s := slice(ns, svc+"-a", svc, map[string]int{"grpc": 7070}, ep{addr: "127.0.0.2", ready: true})
	if _, err := env.Clientset.DiscoveryV1().EndpointSlices(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	l, err := apidial.NewReplicaLister("k8s:///"+svc+"."+ns+":grpc", apidial.WithKubeconfig(env.Kubeconfig, ""))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if got, err := l.List(ctx); err != nil || !slices.Equal(got, []string{"127.0.0.2:7070"}) {
		t.Fatalf("List = %v, %v; want [127.0.0.2:7070]", got, err)
	}
	s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{"127.0.0.3"},
		Conditions: discoveryv1.EndpointConditions{Ready: new(true)}})
	if _, err := env.Clientset.DiscoveryV1().EndpointSlices(ns).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	want := []string{"127.0.0.2:7070", "127.0.0.3:7070"}
	testwait.Until(t, "the lister seeing the slice grow", func() bool {
		got, err := l.List(ctx)
		return err == nil && slices.Equal(got, want)
	})
}

// testFollows: 8 connections to a Service with one ready endpoint; the
// slice grows to three and every connection's RPCs reach all three
// without reconnecting; one marked not ready, then one terminating, get
// no more RPCs once the change is seen.
func testFollows(t *testing.T, env *k8stest.Env) {
	const ns, svc = "follow", "api"
	createNamespace(t, env, ns)
	hosts := []string{"127.0.0.1", "127.0.0.2", "127.0.0.3"}
	port, lns := listenSamePort(t, hosts...)
	backends := map[string]*backend{}
	for i, h := range hosts {
		b := &backend{name: h}
		b.serve(t, lns[i])
		backends[h] = b
	}
	createService(t, env, ns, svc, "grpc", 443, port)
	slices := env.Clientset.DiscoveryV1().EndpointSlices(ns)
	ctx := t.Context()
	ports := map[string]int{"grpc": port}
	// A slice of another Service in the namespace, which must be ignored.
	if _, err := slices.Create(ctx, slice(ns, "other", "other", ports, ep{addr: "127.0.0.3", ready: true}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := slices.Create(ctx, slice(ns, svc+"-a", svc, ports, ep{addr: "127.0.0.1", ready: true}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	const n = 8
	var clients []atev1.ControlClient
	for range n {
		conn, err := apidial.DialContext(ctx, "k8s:///"+svc+"."+ns+":grpc", apidial.WithKubeconfig(env.Kubeconfig, ""))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		clients = append(clients, atev1.NewControlClient(conn))
	}
	// round calls every connection k times and returns, per connection,
	// which backends answered.
	round := func(k int) []map[string]int {
		out := make([]map[string]int, n)
		for i, c := range clients {
			out[i] = map[string]int{}
			for range k {
				rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				got, err := c.GetActor(rctx, &atev1.GetActorRequest{})
				cancel()
				if err != nil {
					t.Fatalf("connection %d: GetActor: %v", i, err)
				}
				out[i][got.GetName()]++
			}
		}
		return out
	}
	for i, seen := range round(5) {
		if len(seen) != 1 || seen["127.0.0.1"] != 5 {
			t.Fatalf("connection %d with one endpoint reached %v", i, seen)
		}
	}

	// Grow to three ready endpoints, in a second slice too (the Service's
	// slices are merged, 127.0.0.1 listed twice counts once).
	if _, err := slices.Create(ctx, slice(ns, svc+"-b", svc, ports,
		ep{addr: "127.0.0.1", ready: true}, ep{addr: "127.0.0.2", ready: true}, ep{addr: "127.0.0.3", ready: true}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	reached := make([]map[string]bool, n)
	for i := range reached {
		reached[i] = map[string]bool{}
	}
	testwait.Until(t, "every connection reaching all three endpoints", func() bool {
		all := true
		for i, seen := range round(3) {
			for h := range seen {
				reached[i][h] = true
			}
			all = all && len(reached[i]) == 3
		}
		return all
	})
	if got := backends["127.0.0.1"].accepts.Load(); got != n {
		t.Fatalf("the first endpoint accepted %d connections from %d clients: a client reconnected", got, n)
	}

	// not ready → excluded; then terminating (still ready) → excluded.
	for _, step := range []struct {
		what   string
		eps    []ep
		gone   string
		remain []string
	}{
		{"127.0.0.2 not ready", []ep{{addr: "127.0.0.1", ready: true}, {addr: "127.0.0.2"}, {addr: "127.0.0.3", ready: true}},
			"127.0.0.2", []string{"127.0.0.1", "127.0.0.3"}},
		{"127.0.0.3 terminating", []ep{{addr: "127.0.0.1", ready: true}, {addr: "127.0.0.2"}, {addr: "127.0.0.3", ready: true, terminating: true}},
			"127.0.0.3", []string{"127.0.0.1"}},
	} {
		if _, err := slices.Update(ctx, slice(ns, svc+"-b", svc, ports, step.eps...), metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		// Seen by every connection once a window of calls misses it.
		testwait.Until(t, step.what+" seen by every connection", func() bool {
			for _, seen := range round(10) {
				if seen[step.gone] > 0 {
					return false
				}
			}
			return true
		})
		after := backends[step.gone].calls.Load()
		hit := map[string]bool{}
		for i, seen := range round(20) {
			if seen[step.gone] > 0 {
				t.Fatalf("%s: connection %d still reached it: %v", step.what, i, seen)
			}
			for h := range seen {
				hit[h] = true
			}
		}
		if got := backends[step.gone].calls.Load(); got != after {
			t.Fatalf("%s: it got %d more calls", step.what, got-after)
		}
		for _, h := range step.remain {
			if !hit[h] {
				t.Fatalf("%s: %s, still ready, got no calls (%v)", step.what, h, hit)
			}
		}
	}

	// Replicas (the node agent's view) lists the same ready endpoints.
	got, err := apidial.Replicas(ctx, "k8s:///"+svc+"."+ns+":grpc", apidial.WithKubeconfig(env.Kubeconfig, ""))
	if want := "127.0.0.1:" + strconv.Itoa(port); err != nil || len(got) != 1 || got[0] != want {
		t.Fatalf("Replicas = %v, %v; want [%s]", got, err, want)
	}
}

// freePortPreferring returns a listener on 127.0.0.1:preferred, or on a
// free port if preferred is taken.
func freePortPreferring(t *testing.T, preferred int) (net.Listener, int) {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(preferred)))
	if errors.Is(err, syscall.EADDRINUSE) {
		ln, err = net.Listen("tcp", "127.0.0.1:0")
	}
	if err != nil {
		t.Fatal(err)
	}
	return ln, ln.Addr().(*net.TCPAddr).Port
}

// testTargetPort: a target naming Service port 443 (targetPort 7070, or a
// free port) dials the EndpointSlice's port of that name, 7070; nothing
// listens on 443.
func testTargetPort(t *testing.T, env *k8stest.Env) {
	const ns, svc = "targetport", "web"
	createNamespace(t, env, ns)
	ln, port := freePortPreferring(t, 7070)
	b := &backend{name: "web"}
	b.serve(t, ln)
	createService(t, env, ns, svc, "grpc", 443, port)
	ctx := t.Context()
	// A second port with another name, which must not be picked.
	s := slice(ns, svc+"-a", svc, map[string]int{"grpc": port, "metrics": 9}, ep{addr: "127.0.0.1", ready: true})
	if _, err := env.Clientset.DiscoveryV1().EndpointSlices(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	conn, err := apidial.DialContext(ctx, "k8s:///"+svc+"."+ns+":443", apidial.WithKubeconfig(env.Kubeconfig, ""))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if got, err := atev1.NewControlClient(conn).GetActor(rctx, &atev1.GetActorRequest{}); err != nil || got.GetName() != "web" {
		t.Fatalf("GetActor through Service port 443 = %v, %v; want the backend on target port %d", got, err, port)
	}

	// A number that is no port of the Service is refused at start-up.
	_, err = apidial.DialContext(ctx, "k8s:///"+svc+"."+ns+":8443", apidial.WithKubeconfig(env.Kubeconfig, ""), apidial.WithSyncTimeout(2*time.Second))
	if err == nil || !strings.Contains(err.Error(), "no port 8443") || strings.Contains(err.Error(), "grant") {
		t.Fatalf("Dial of a port the Service lacks = %v; want an error naming it", err)
	}
	// So is a Service that does not exist, without blaming RBAC.
	_, err = apidial.DialContext(ctx, "k8s:///missing."+ns+":443", apidial.WithKubeconfig(env.Kubeconfig, ""), apidial.WithSyncTimeout(2*time.Second))
	if err == nil || !strings.Contains(err.Error(), `no service "missing"`) || strings.Contains(err.Error(), "grant") {
		t.Fatalf("Dial of a missing Service = %v; want an error saying it is missing", err)
	}
}

// testMissingRBAC: a user who may get services but not list
// EndpointSlices fails to dial within the sync bound, with an error
// naming endpointslices and list, and a log naming the resource.
func testMissingRBAC(t *testing.T, env *k8stest.Env) {
	const ns, svc = "norbac", "api"
	createNamespace(t, env, ns)
	createService(t, env, ns, svc, "grpc", 443, 7070)
	ctx := t.Context()
	rbac := env.Clientset.RbacV1()
	if _, err := rbac.Roles(ns).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "services-get"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: []string{"get"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := rbac.RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "services-get"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "services-get"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "no-slices"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	user := env.AddUser(t, "no-slices")
	kubeconfig := env.WriteKubeconfig(t, user)

	for _, tc := range []struct {
		port, resource, verb string
	}{
		{port: "443", resource: "endpointslices", verb: "list"}, // the Service is readable, the slices not
		{port: "grpc", resource: "endpointslices", verb: "list"},
	} {
		var logs testlog.Buffer
		log := slog.New(slog.NewTextHandler(&logs, nil))
		const bound = 3 * time.Second
		start := time.Now()
		_, err := apidial.DialContext(ctx, fmt.Sprintf("k8s:///%s.%s:%s", svc, ns, tc.port),
			apidial.WithKubeconfig(kubeconfig, ""), apidial.WithSyncTimeout(bound), apidial.WithLogger(log))
		took := time.Since(start)
		if err == nil {
			t.Fatalf("port %s: Dial without EndpointSlice RBAC succeeded", tc.port)
		}
		if took > bound+2*time.Second {
			t.Errorf("port %s: Dial failed after %s; the bound is %s", tc.port, took, bound)
		}
		for _, want := range []string{tc.resource, "cannot " + tc.verb, "grant list and watch", "namespace " + ns} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("port %s: Dial error %q does not name %q", tc.port, err, want)
			}
		}
		if l := logs.String(); !strings.Contains(l, "resource=\"discovery.k8s.io/v1 endpointslices\"") || !strings.Contains(l, "verb=list") {
			t.Errorf("port %s: the log does not name the resource and verb refused:\n%s", tc.port, l)
		}
	}

	// A connection built on the resolver alone (no start-up wait) gets
	// the refusal as its resolver error: calls fail UNAVAILABLE with it.
	cs, err := kubernetes.NewForConfig(user)
	if err != nil {
		t.Fatal(err)
	}
	b := resolver.NewBuilder(cs, resolver.Options{Logger: slog.New(slog.DiscardHandler)})
	conn, err := grpc.NewClient("k8s:///"+svc+"."+ns+":grpc", grpc.WithResolvers(b), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	testwait.Until(t, "the connection reporting the refused list", func() bool {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err := atev1.NewControlClient(conn).GetActor(rctx, &atev1.GetActorRequest{})
		st := status.Convert(err)
		return st.Code() == codes.Unavailable && strings.Contains(st.Message(), "endpointslices") && strings.Contains(st.Message(), "forbidden")
	})

	// A user with no permission at all, on a numeric port, is told to
	// grant get on services.
	none := env.WriteKubeconfig(t, env.AddUser(t, "nothing"))
	_, err = apidial.DialContext(ctx, "k8s:///"+svc+"."+ns+":443", apidial.WithKubeconfig(none, ""),
		apidial.WithSyncTimeout(2*time.Second), apidial.WithLogger(slog.New(slog.DiscardHandler)))
	if err == nil || !strings.Contains(err.Error(), "grant get on services") {
		t.Fatalf("Dial without services get = %v; want an error naming it", err)
	}
}
