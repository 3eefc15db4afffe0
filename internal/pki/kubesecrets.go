package pki

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"substrate.dev/ate/internal/auth"
)

// KubernetesSecretsRequest says which installation's Secrets to make
// (`ate certs secrets`).
type KubernetesSecretsRequest struct {
	// Namespace of the installation (the Secrets' and the API server
	// Service's).
	Namespace string
	// CASecret names the CA's Secret (the chart's
	// tls.certManager.caSecret).
	CASecret      string
	TrustDomain   string
	ClusterDomain string
	// TTL is the components' leaves' life.
	TTL time.Duration
}

// KubernetesSecrets issues the leaves of a TLS installation without
// cert-manager (the chart's tls.mode secret, the kustomize base) and
// returns its Secrets, all of type kubernetes.io/tls: ate-apiserver-tls,
// ate-router-tls and ate-controller-tls (ca.crt, tls.crt, tls.key; the
// API server's with its Service's DNS names), and req.CASecret holding
// the CA itself (tls.crt, tls.key, ca.crt), which the API server signs
// worker Pods' node certificates with. Errors: Issue's, the key's
// encoding.
func (ca *CA) KubernetesSecrets(req KubernetesSecretsRequest) ([]corev1.Secret, error) {
	caKeyPEM, err := encodeKey(ca.Key)
	if err != nil {
		return nil, err
	}
	secret := func(name string, data map[string][]byte) corev1.Secret {
		return corev1.Secret{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: req.Namespace, Labels: map[string]string{"app.kubernetes.io/part-of": "substrate"}},
			Type:       corev1.SecretTypeTLS,
			Data:       data,
		}
	}
	out := []corev1.Secret{secret(req.CASecret, map[string][]byte{
		corev1.TLSCertKey: ca.CertPEM, corev1.TLSPrivateKeyKey: caKeyPEM, CAFile: ca.CertPEM})}
	svc := "ate-apiserver"
	for _, c := range []struct {
		component auth.Component
		dns       []string
	}{
		// Clients that check host names (grpcurl) dial the Service.
		{auth.ComponentAPIServer, []string{svc, svc + "." + req.Namespace, svc + "." + req.Namespace + ".svc",
			svc + "." + req.Namespace + ".svc." + req.ClusterDomain}},
		{auth.ComponentRouter, nil},
		{auth.ComponentController, nil},
	} {
		name := "ate-" + string(c.component)
		_, certPEM, keyPEM, err := ca.Issue(LeafRequest{Identity: auth.Identity{Component: c.component, Name: name},
			TrustDomain: req.TrustDomain, DNS: c.dns, TTL: req.TTL})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		out = append(out, secret(name+"-tls", map[string][]byte{
			corev1.TLSCertKey: certPEM, corev1.TLSPrivateKeyKey: keyPEM, CAFile: ca.CertPEM}))
	}
	return out, nil
}
