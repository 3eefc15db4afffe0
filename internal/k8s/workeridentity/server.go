// Package workeridentity gives worker Pods their node certificates
// without cert-manager: a Pod shows the projected, audience-bound,
// Pod-bound ServiceAccount token the kubelet mounts for it, the API
// server has the cluster review it (TokenReview), checks that its Pod is
// a worker Pod of a pool in a namespace opted in to pools, and signs the
// Pod's key into a short-lived node certificate naming exactly that Pod.
// The kubelet's TLS bootstrap and SPIRE's Kubernetes attestor work the
// same way. docs/kubernetes.md, Worker identity.
package workeridentity

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/auth"
	"substrate.dev/ate/internal/k8s/controller"
	"substrate.dev/ate/internal/pki"
	atek8s "substrate.dev/ate/pkg/apis/ate/v1alpha1"
)

const (
	// DefaultAudience is the audience of the tokens worker Pods show
	// (the controller's --worker-token-audience, the API server's
	// --node-token-audience): one no other party accepts, so a token
	// stolen from a worker Pod opens nothing but this, and no other
	// token of the cluster opens this.
	DefaultAudience = controller.DefaultTokenAudience
	// DefaultTTL is a node certificate's life; the node renews it at two
	// thirds (pki.BootstrapSource).
	DefaultTTL = time.Hour
	// maxInFlight bounds the reviews under way, maxPerPeer those of one
	// caller's address: the method answers anyone, and each call costs
	// the cluster a TokenReview and reads. A call beyond either is
	// refused at once (Unavailable: the node retries with backoff), never
	// queued, so a flood holds no goroutines or memory here and one
	// address cannot take every slot.
	maxInFlight = 8
	maxPerPeer  = 2
	// reviewTimeout bounds one call's work whatever the caller's deadline.
	reviewTimeout = 10 * time.Second
	// maxTokenBytes and maxRequestBytes bound what an anonymous caller
	// may make us parse (a ServiceAccount token is ~1 KB, a P-256
	// certificate request ~300 bytes).
	maxTokenBytes   = 16 << 10
	maxRequestBytes = 8 << 10
)

// The extra fields of a TokenReview's user naming the Pod a token is
// bound to (kube-apiserver sets them for Pod-bound tokens).
const (
	extraPodName = "authentication.kubernetes.io/pod-name"
	extraPodUID  = "authentication.kubernetes.io/pod-uid"
)

// Config configures a Server.
type Config struct {
	// Client reviews tokens and reads Pods and Namespaces: it needs
	// create on tokenreviews and get on pods and namespaces.
	Client kubernetes.Interface
	// Audience is the one audience a token is reviewed for
	// (DefaultAudience if empty).
	Audience string
	// CA signs the node certificates: the CA the components trust.
	CA          *pki.CA
	TrustDomain string
	// TTL is a certificate's life (DefaultTTL if 0).
	TTL    time.Duration
	Logger *slog.Logger
}

// Server implements atev1.NodeIdentityServer.
type Server struct {
	atev1.UnimplementedNodeIdentityServer
	cfg Config
	log *slog.Logger

	mu       sync.Mutex
	inFlight int
	perPeer  map[string]int
}

// New returns a Server for cfg. Errors: no client or CA.
func New(cfg Config) (*Server, error) {
	if cfg.Client == nil || cfg.CA == nil {
		return nil, errors.New("node identity: a Kubernetes client and a CA are required")
	}
	if cfg.Audience == "" {
		cfg.Audience = DefaultAudience
	}
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultTTL
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Server{cfg: cfg, perPeer: map[string]int{}, log: log}, nil
}

// errUnauthenticated is what any caller whose token does not hold gets:
// which check failed goes to the log only.
var errUnauthenticated = status.Error(codes.Unauthenticated,
	"the token is not a valid Pod-bound ServiceAccount token of this audience: mount a projected serviceAccountToken with the API server's --node-token-audience")

// IssueNodeCertificate implements atev1.NodeIdentityServer.
func (s *Server) IssueNodeCertificate(ctx context.Context, req *atev1.IssueNodeCertificateRequest) (*atev1.IssueNodeCertificateResponse, error) {
	if len(req.GetToken()) == 0 || len(req.GetToken()) > maxTokenBytes {
		return nil, status.Errorf(codes.InvalidArgument, "token: want a ServiceAccount token of at most %d bytes", maxTokenBytes)
	}
	if n := len(req.GetCertificateRequest()); n == 0 || n > maxRequestBytes {
		return nil, status.Errorf(codes.InvalidArgument, "certificate_request: want a DER PKCS#10 request of at most %d bytes", maxRequestBytes)
	}
	csr, err := x509.ParseCertificateRequest(req.GetCertificateRequest())
	if err == nil {
		err = csr.CheckSignature()
	}
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "certificate_request: %v", err)
	}
	if !looksLikeJWT(req.GetToken()) {
		// Garbage costs the cluster nothing.
		return nil, errUnauthenticated
	}
	release, ok := s.admit(pki.PeerHost(ctx))
	if !ok {
		return nil, status.Error(codes.Unavailable, "node identity: too many certificate requests under way; retry")
	}
	defer release()
	ctx, cancel := context.WithTimeout(ctx, reviewTimeout)
	defer cancel()
	pod, err := s.review(ctx, req.GetToken())
	if err != nil {
		return nil, err
	}
	id := auth.Identity{Component: auth.ComponentNode, Name: pod.Name}
	leaf, err := s.cfg.CA.Sign(pki.LeafRequest{Identity: id, TrustDomain: s.cfg.TrustDomain, TTL: s.cfg.TTL}, csr.PublicKey)
	if err != nil {
		// A key type x509 cannot sign over is the caller's error.
		return nil, status.Errorf(codes.InvalidArgument, "certificate_request: %v", err)
	}
	s.log.Info("node certificate issued", "pod", pod.Namespace+"/"+pod.Name, "uid", string(pod.UID),
		"serviceAccount", pod.Spec.ServiceAccountName, "notAfter", leaf.NotAfter)
	return &atev1.IssueNodeCertificateResponse{Certificate: leaf.Raw, Node: pod.Name}, nil
}

// admit takes a slot for a call from host, or says there is none.
func (s *Server) admit(host string) (release func(), ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inFlight >= maxInFlight || s.perPeer[host] >= maxPerPeer {
		return nil, false
	}
	s.inFlight++
	s.perPeer[host]++
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.inFlight--
		if s.perPeer[host]--; s.perPeer[host] == 0 {
			delete(s.perPeer, host)
		}
	}, true
}

// looksLikeJWT: three non-empty dot-separated parts of base64url, as a
// ServiceAccount token is.
func looksLikeJWT(token string) bool {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return false
	}
	for _, part := range parts {
		if part == "" || strings.Trim(part, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") != "" {
			return false
		}
	}
	return true
}

// review returns the worker Pod token is bound to, or the status to
// answer: Unauthenticated for a token that does not hold (or whose Pod
// is gone or replaced), PermissionDenied for a Pod that is not a worker
// Pod of a pool in an opted-in namespace, Unavailable when the cluster
// cannot be asked.
func (s *Server) review(ctx context.Context, token string) (*corev1.Pod, error) {
	tr, err := s.cfg.Client.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{
		Spec: authnv1.TokenReviewSpec{Token: token, Audiences: []string{s.cfg.Audience}}}, metav1.CreateOptions{})
	if err != nil {
		s.log.Error("node certificate: token review failed", "err", err)
		return nil, status.Error(codes.Unavailable, "the cluster could not review the token; retry")
	}
	st := tr.Status
	if !st.Authenticated || !slices.Contains(st.Audiences, s.cfg.Audience) {
		s.log.Warn("node certificate refused: token not authenticated", "reason", st.Error, "audiences", st.Audiences)
		return nil, errUnauthenticated
	}
	ns, sa, ok := serviceAccountOf(st.User.Username)
	podName, podUID := first(st.User.Extra[extraPodName]), first(st.User.Extra[extraPodUID])
	if !ok || podName == "" || podUID == "" {
		s.log.Warn("node certificate refused: not a Pod-bound ServiceAccount token", "user", st.User.Username)
		return nil, errUnauthenticated
	}
	pod, err := s.cfg.Client.CoreV1().Pods(ns).Get(ctx, podName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		s.log.Warn("node certificate refused: the token's Pod is gone", "pod", ns+"/"+podName)
		return nil, errUnauthenticated
	case err != nil:
		s.log.Error("node certificate: Pod unreadable", "pod", ns+"/"+podName, "err", err)
		return nil, status.Error(codes.Unavailable, "the token's Pod could not be read; retry")
	case string(pod.UID) != podUID:
		// A Pod of the same name made since: the token is its
		// predecessor's.
		s.log.Warn("node certificate refused: the token's Pod was replaced", "pod", ns+"/"+podName, "tokenUID", podUID, "uid", string(pod.UID))
		return nil, errUnauthenticated
	}
	denied := func(why string) error {
		s.log.Warn("node certificate refused", "pod", ns+"/"+podName, "serviceAccount", sa, "why", why)
		return status.Errorf(codes.PermissionDenied, "Pod %s/%s may not be a node: %s", ns, podName, why)
	}
	if pod.DeletionTimestamp != nil {
		// A Pod being deleted drains and goes; its certificate lasts
		// longer than its grace period, so it needs no new one.
		return nil, denied("it is being deleted")
	}
	if pod.Spec.ServiceAccountName != sa {
		return nil, denied(fmt.Sprintf("the token is ServiceAccount %s's, the Pod runs as %s", sa, pod.Spec.ServiceAccountName))
	}
	pool, ok := controller.WorkerPodOf(pod)
	if !ok {
		return nil, denied("it is not a worker Pod of a WorkerPool")
	}
	// Labels are whatever the Pod's creator wrote: the Pod must also be
	// one its pool's Deployment made, through its ReplicaSet, and run as
	// that Deployment's ServiceAccount.
	if err := s.ownedByPool(ctx, pod, pool); err != nil {
		if st, ok := status.FromError(err); ok && st.Code() == codes.Unavailable {
			return nil, err
		}
		return nil, denied(err.Error())
	}
	nsObj, err := s.cfg.Client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		s.log.Error("node certificate: Namespace unreadable", "namespace", ns, "err", err)
		return nil, status.Error(codes.Unavailable, "the Pod's namespace could not be read; retry")
	}
	if err != nil || nsObj.Labels[controller.PoolNamespaceLabel] != controller.PoolNamespaceAllowed {
		return nil, denied(fmt.Sprintf("namespace %s is not labelled %s=%s", ns, controller.PoolNamespaceLabel, controller.PoolNamespaceAllowed))
	}
	return pod, nil
}

// ownedByPool checks that pod's controller is a ReplicaSet of the
// Deployment the controller makes for pool (controller.DeploymentName),
// which the WorkerPool of that name controls, and that pod runs as the
// Deployment's ServiceAccount. It returns why not, or Unavailable when
// the cluster cannot be asked.
func (s *Server) ownedByPool(ctx context.Context, pod *corev1.Pod, pool string) error {
	rsRef := metav1.GetControllerOf(pod)
	if rsRef == nil || rsRef.Kind != "ReplicaSet" || rsRef.APIVersion != "apps/v1" {
		return errors.New("no ReplicaSet controls it")
	}
	rs, err := s.cfg.Client.AppsV1().ReplicaSets(pod.Namespace).Get(ctx, rsRef.Name, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		s.log.Error("node certificate: ReplicaSet unreadable", "pod", pod.Namespace+"/"+pod.Name, "err", err)
		return status.Error(codes.Unavailable, "the Pod's ReplicaSet could not be read; retry")
	}
	if err != nil || rs.UID != rsRef.UID {
		return fmt.Errorf("its ReplicaSet %s is gone", rsRef.Name)
	}
	depRef := metav1.GetControllerOf(rs)
	want := controller.DeploymentName(pool)
	if depRef == nil || depRef.Kind != "Deployment" || depRef.APIVersion != "apps/v1" || depRef.Name != want {
		return fmt.Errorf("its ReplicaSet %s is not Deployment %s's", rs.Name, want)
	}
	dep, err := s.cfg.Client.AppsV1().Deployments(pod.Namespace).Get(ctx, want, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		s.log.Error("node certificate: Deployment unreadable", "pod", pod.Namespace+"/"+pod.Name, "err", err)
		return status.Error(codes.Unavailable, "the Pod's Deployment could not be read; retry")
	}
	if err != nil || dep.UID != depRef.UID {
		return fmt.Errorf("its Deployment %s is gone", want)
	}
	poolRef := metav1.GetControllerOf(dep)
	if poolRef == nil || poolRef.Kind != "WorkerPool" || poolRef.APIVersion != atek8s.GroupVersion.String() || poolRef.Name != pool {
		return fmt.Errorf("its Deployment %s is not WorkerPool %s's", want, pool)
	}
	if sa := dep.Spec.Template.Spec.ServiceAccountName; pod.Spec.ServiceAccountName != sa {
		return fmt.Errorf("it runs as ServiceAccount %s, its pool's Pods as %s", pod.Spec.ServiceAccountName, sa)
	}
	return nil
}

// serviceAccountOf splits a ServiceAccount's user name,
// system:serviceaccount:<namespace>:<name>.
func serviceAccountOf(user string) (ns, name string, ok bool) {
	rest, ok := strings.CutPrefix(user, "system:serviceaccount:")
	if !ok {
		return "", "", false
	}
	ns, name, ok = strings.Cut(rest, ":")
	return ns, name, ok && ns != "" && name != ""
}

func first(v authnv1.ExtraValue) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}
