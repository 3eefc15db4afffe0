package workeridentity

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/auth"
	"substrate.dev/ate/internal/k8s/controller"
	"substrate.dev/ate/internal/k8s/k8stest"
	"substrate.dev/ate/internal/pki"
	"substrate.dev/ate/internal/testwait"
	atek8s "substrate.dev/ate/pkg/apis/ate/v1alpha1"
)

// cluster is a real kube-apiserver with two namespaces: "pools", opted
// in to worker pools, and "elsewhere", not. Both have the workers'
// ServiceAccount and another.
type cluster struct {
	t  *testing.T
	cs kubernetes.Interface
	s  *Server
	ca *pki.CA
}

const (
	poolsNS     = "pools"
	elsewhereNS = "elsewhere"
	workerSA    = controller.DefaultWorkerServiceAccount
	otherSA     = "build-bot"
	trustDomain = "test.local"
)

func startCluster(t *testing.T) *cluster {
	t.Helper()
	env := k8stest.Start(t)
	ctx := context.Background()
	for ns, labels := range map[string]map[string]string{
		poolsNS:     {controller.PoolNamespaceLabel: controller.PoolNamespaceAllowed},
		elsewhereNS: nil,
	} {
		if _, err := env.Clientset.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: labels}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		for _, sa := range []string{workerSA, otherSA} {
			if _, err := env.Clientset.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	ca, err := pki.NewCA(trustDomain, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Client: env.Clientset, CA: ca, TrustDomain: trustDomain, TTL: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return &cluster{t: t, cs: env.Clientset, s: s, ca: ca}
}

// owners makes, in ns, what the controller and kube-controller-manager
// make for a pool: Deployment <pool>-workers running as sa, controlled by
// WorkerPool pool (unless orphan), and a ReplicaSet it controls; it
// returns the controller reference a Pod of that ReplicaSet carries.
// Nothing garbage-collects here (no kube-controller-manager), so the
// WorkerPool need not exist.
func (c *cluster) owners(ns, pool, sa string, orphan bool) []metav1.OwnerReference {
	c.t.Helper()
	ctx := context.Background()
	labels := controller.WorkerPodLabels(pool)
	tpl := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
		Spec: corev1.PodSpec{ServiceAccountName: sa, Containers: []corev1.Container{{Name: "node", Image: "ate"}}}}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: controller.DeploymentName(pool)},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: tpl}}
	if !orphan {
		dep.OwnerReferences = []metav1.OwnerReference{{APIVersion: atek8s.GroupVersion.String(), Kind: "WorkerPool", Name: pool,
			UID: types.UID("pool-" + pool), Controller: ptr.To(true)}}
	}
	dep, err := c.cs.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	rs, err := c.cs.AppsV1().ReplicaSets(ns).Create(ctx, &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: dep.Name + "-7d9f", OwnerReferences: []metav1.OwnerReference{
			{APIVersion: "apps/v1", Kind: "Deployment", Name: dep.Name, UID: dep.UID, Controller: ptr.To(true)}}},
		Spec: appsv1.ReplicaSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: tpl},
	}, metav1.CreateOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	return []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID, Controller: ptr.To(true)}}
}

// pod creates a Pod (it stays Pending: no kubelet) with owners.
func (c *cluster) pod(ns, name, sa string, labels map[string]string, owners []metav1.OwnerReference) *corev1.Pod {
	c.t.Helper()
	p, err := c.cs.CoreV1().Pods(ns).Create(context.Background(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, OwnerReferences: owners},
		Spec: corev1.PodSpec{ServiceAccountName: sa, AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{Name: "node", Image: "ate"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	return p
}

// token mints a token of p's ServiceAccount for audience, bound to p
// (as the kubelet's projected volume does) unless p is nil (then of
// ns/sa, bound to nothing).
func (c *cluster) token(ns, sa string, p *corev1.Pod, audience string) string {
	c.t.Helper()
	req := &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{Audiences: []string{audience}, ExpirationSeconds: ptr.To[int64](600)}}
	if p != nil {
		req.Spec.BoundObjectRef = &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.Name, UID: p.UID}
	}
	tr, err := c.cs.CoreV1().ServiceAccounts(ns).CreateToken(context.Background(), sa, req, metav1.CreateOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	return tr.Status.Token
}

// request is a certificate request for a new key, claiming subject
// (which the server must ignore).
func request(t *testing.T, subject string) (*ecdsa.PrivateKey, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse("spiffe://" + trustDomain + "/ate/apiserver/x")
	csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: subject}, URIs: []*url.URL{u}}, key)
	if err != nil {
		t.Fatal(err)
	}
	return key, csr
}

// TestIssueNodeCertificate: a worker Pod's token yields a node
// certificate naming exactly that Pod, over the key it asked with,
// whatever its request claims; every other token — another Pod's, a
// Pod's outside an opted-in namespace, one of another audience, one
// bound to no Pod, one whose Pod is gone or was replaced — yields
// nothing, with the status a caller can act on.
func TestIssueNodeCertificate(t *testing.T) {
	c := startCluster(t)
	ctx := context.Background()
	poolA := c.owners(poolsNS, "pool-a", workerSA, false)
	worker := c.pod(poolsNS, "pool-a-workers-7d9f-x2k", workerSA, controller.WorkerPodLabels("pool-a"), poolA)

	t.Run("worker Pod", func(t *testing.T) {
		key, csr := request(t, "node/someone-else")
		resp, err := c.s.IssueNodeCertificate(ctx, &atev1.IssueNodeCertificateRequest{CertificateRequest: csr, Token: c.token(poolsNS, workerSA, worker, DefaultAudience)})
		if err != nil {
			t.Fatalf("IssueNodeCertificate: %v", err)
		}
		leaf, err := x509.ParseCertificate(resp.GetCertificate())
		if err != nil {
			t.Fatal(err)
		}
		want := auth.Identity{Component: auth.ComponentNode, Name: worker.Name}
		if len(leaf.URIs) != 1 || leaf.URIs[0].String() != want.URI(trustDomain).String() || resp.GetNode() != worker.Name {
			t.Errorf("certificate names %v (node %q), want exactly %s", leaf.URIs, resp.GetNode(), want.URI(trustDomain))
		}
		if pub, ok := leaf.PublicKey.(*ecdsa.PublicKey); !ok || !pub.Equal(&key.PublicKey) {
			t.Error("the certificate is not over the requested key")
		}
		roots := x509.NewCertPool()
		roots.AddCert(c.ca.Cert)
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("certificate does not verify against the CA: %v", err)
		}
		if life := time.Until(leaf.NotAfter); life > 10*time.Minute || life < 9*time.Minute {
			t.Errorf("certificate lives %v, want the configured 10m", life)
		}
	})

	// Each refusal, with the code a caller sees.
	plain := c.pod(poolsNS, "debug-shell", workerSA, nil, nil)
	outside := c.pod(elsewhereNS, "pool-b-workers-5c4d-q9z", workerSA, controller.WorkerPodLabels("pool-b"), c.owners(elsewhereNS, "pool-b", workerSA, false))
	// Pods with a worker Pod's labels that the pool did not make.
	handMade := c.pod(poolsNS, "pool-a-workers-7d9f-hand", workerSA, controller.WorkerPodLabels("pool-a"), nil)
	otherAccount := c.pod(poolsNS, "pool-a-workers-7d9f-sa", otherSA, controller.WorkerPodLabels("pool-a"), poolA)
	noPool := c.pod(poolsNS, "pool-c-workers-7d9f-x", workerSA, controller.WorkerPodLabels("pool-c"), c.owners(poolsNS, "pool-c", workerSA, true))
	wrongPool := c.pod(poolsNS, "pool-d-workers-7d9f-x", workerSA, controller.WorkerPodLabels("pool-d"), poolA)
	gone := c.pod(poolsNS, "pool-a-workers-7d9f-gone", workerSA, controller.WorkerPodLabels("pool-a"), poolA)
	goneToken := c.token(poolsNS, workerSA, gone, DefaultAudience)
	if err := c.cs.CoreV1().Pods(poolsNS).Delete(ctx, gone.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	replaced := c.pod(poolsNS, "pool-a-workers-7d9f-again", workerSA, controller.WorkerPodLabels("pool-a"), poolA)
	replacedToken := c.token(poolsNS, workerSA, replaced, DefaultAudience)
	if err := c.cs.CoreV1().Pods(poolsNS).Delete(ctx, replaced.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	c.pod(poolsNS, replaced.Name, workerSA, controller.WorkerPodLabels("pool-a"), poolA)
	_, goodCSR := request(t, "")
	for _, tc := range []struct {
		name  string
		token string
		csr   []byte
		want  codes.Code
	}{
		{"another Pod of the workers' ServiceAccount", c.token(poolsNS, workerSA, plain, DefaultAudience), goodCSR, codes.PermissionDenied},
		{"a worker Pod in a namespace not opted in", c.token(elsewhereNS, workerSA, outside, DefaultAudience), goodCSR, codes.PermissionDenied},
		{"a Pod with the worker labels that no ReplicaSet controls", c.token(poolsNS, workerSA, handMade, DefaultAudience), goodCSR, codes.PermissionDenied},
		{"a Pod of the pool's ReplicaSet running as another ServiceAccount", c.token(poolsNS, otherSA, otherAccount, DefaultAudience), goodCSR, codes.PermissionDenied},
		{"a Pod of a Deployment no WorkerPool controls", c.token(poolsNS, workerSA, noPool, DefaultAudience), goodCSR, codes.PermissionDenied},
		{"a Pod labelled for one pool under another pool's ReplicaSet", c.token(poolsNS, workerSA, wrongPool, DefaultAudience), goodCSR, codes.PermissionDenied},
		{"a worker Pod's token for another audience", c.token(poolsNS, workerSA, worker, "ate"), goodCSR, codes.Unauthenticated},
		{"a token bound to no Pod", c.token(poolsNS, workerSA, nil, DefaultAudience), goodCSR, codes.Unauthenticated},
		{"a deleted Pod's token", goneToken, goodCSR, codes.Unauthenticated},
		{"the token of a Pod since replaced by one of its name", replacedToken, goodCSR, codes.Unauthenticated},
		{"not a token", "hello", goodCSR, codes.Unauthenticated},
		{"no token", "", goodCSR, codes.InvalidArgument},
		{"a certificate request that is not one", c.token(poolsNS, workerSA, worker, DefaultAudience), []byte("csr"), codes.InvalidArgument},
		{"a certificate request whose signature fails", c.token(poolsNS, workerSA, worker, DefaultAudience), tamper(goodCSR), codes.InvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := c.s.IssueNodeCertificate(ctx, &atev1.IssueNodeCertificateRequest{CertificateRequest: tc.csr, Token: tc.token})
			if got := status.Code(err); got != tc.want || resp != nil {
				t.Errorf("got %v (%v, certificate %v), want %v", got, err, resp != nil, tc.want)
			}
		})
	}
}

// tamper flips a bit of a request's signature.
func tamper(csr []byte) []byte {
	out := append([]byte(nil), csr...)
	out[len(out)-2] ^= 1
	return out
}

// blockingReviews is the cluster's TokenReview held until released: what
// a flood of callers leaves the server waiting on.
func blockingReviews(t *testing.T) (*fake.Clientset, chan struct{}, *atomic.Int32) {
	t.Helper()
	release := make(chan struct{})
	var started atomic.Int32
	cs := fake.NewClientset()
	cs.PrependReactor("create", "tokenreviews", func(k8stesting.Action) (bool, k8sruntime.Object, error) {
		started.Add(1)
		<-release
		return true, &authnv1.TokenReview{}, nil // not authenticated
	})
	return cs, release, &started
}

func fromPeer(ip string) context.Context {
	return peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.ParseIP(ip), Port: 40000}})
}

// TestIssueNodeCertificateUnderFlood: anonymous callers cannot hold the
// server: what is not a JWT is refused without asking the cluster; one
// address gets two reviews at once and the server eight, and a call
// beyond is refused at once (UNAVAILABLE, which nodes retry), never
// queued; slots come back when reviews end.
func TestIssueNodeCertificateUnderFlood(t *testing.T) {
	cs, release, started := blockingReviews(t)
	ca, err := pki.NewCA(trustDomain, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Client: cs, CA: ca, TrustDomain: trustDomain})
	if err != nil {
		t.Fatal(err)
	}
	_, csr := request(t, "")
	jwt := "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln"
	call := func(ctx context.Context, token string) error {
		_, err := s.IssueNodeCertificate(ctx, &atev1.IssueNodeCertificateRequest{CertificateRequest: csr, Token: token})
		return err
	}
	if err := call(fromPeer("10.0.0.1"), "x"); status.Code(err) != codes.Unauthenticated || started.Load() != 0 {
		t.Fatalf("a token that is no JWT: %v, %d reviews asked; want Unauthenticated, none", err, started.Load())
	}
	var wg sync.WaitGroup
	hold := func(ip string) {
		wg.Add(1)
		go func() { defer wg.Done(); _ = call(fromPeer(ip), jwt) }()
	}
	hold("10.0.0.1")
	hold("10.0.0.1")
	// The fake serialises its reactors: count the calls holding a slot.
	underWay := func() int { s.mu.Lock(); defer s.mu.Unlock(); return s.inFlight }
	testwait.Until(t, "two reviews under way", func() bool { return underWay() == 2 })
	if err := call(fromPeer("10.0.0.1"), jwt); status.Code(err) != codes.Unavailable {
		t.Errorf("a third call from one address: %v, want Unavailable at once", err)
	}
	for i := 2; i <= 7; i++ {
		hold(fmt.Sprintf("10.0.0.%d", i))
	}
	testwait.Until(t, "eight reviews under way", func() bool { return underWay() == 8 })
	if err := call(fromPeer("10.0.1.1"), jwt); status.Code(err) != codes.Unavailable {
		t.Errorf("a ninth call: %v, want Unavailable at once", err)
	}
	close(release)
	wg.Wait()
	if err := call(fromPeer("10.0.0.1"), jwt); status.Code(err) != codes.Unauthenticated {
		t.Errorf("after the reviews ended: %v, want the review's answer (Unauthenticated)", err)
	}
}

// TestIssueNodeCertificateTerminatingPod: a worker Pod being deleted
// (its deletion held by a finalizer, or in its grace period) gets no new
// certificate.
func TestIssueNodeCertificateTerminatingPod(t *testing.T) {
	c := startCluster(t)
	ctx := context.Background()
	p, err := c.cs.CoreV1().Pods(poolsNS).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "pool-a-workers-7d9f-fin", Labels: controller.WorkerPodLabels("pool-a"), Finalizers: []string{"example.com/hold"}},
		Spec: corev1.PodSpec{ServiceAccountName: workerSA, AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{Name: "node", Image: "ate"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	token := c.token(poolsNS, workerSA, p, DefaultAudience)
	if err := c.cs.CoreV1().Pods(poolsNS).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	_, csr := request(t, "")
	_, err = c.s.IssueNodeCertificate(ctx, &atev1.IssueNodeCertificateRequest{CertificateRequest: csr, Token: token})
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "being deleted") {
		t.Errorf("a Pod being deleted: %v, want PermissionDenied", err)
	}
	got, err := c.cs.CoreV1().Pods(poolsNS).Get(ctx, p.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got.Finalizers = nil
	if _, err := c.cs.CoreV1().Pods(poolsNS).Update(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}
