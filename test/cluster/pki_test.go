package cluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// clusterPKI writes the cluster's CA (ca.crt, ca.key), the kube-apiserver's
// serving certificate (apiserver.crt/.key, for every name Pods and the host
// use), its client certificate towards the kubelet (apiserver-kubelet.crt/.key,
// group system:masters), the registry's serving certificate
// (registry.crt/.key), and the service-account signing key pair
// (sa.key, sa.pub) into dir.
func clusterPKI(dir string, hostIP net.IP, serviceIP net.IP) error {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now().Add(-time.Hour)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ate-test-cluster-ca"},
		NotBefore: now, NotAfter: now.Add(10 * 24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	ca, _ := x509.ParseCertificate(caDER)
	if err := writeCertKey(dir, "ca", caDER, caKey); err != nil {
		return err
	}
	leaf := func(name string, serial int64, subject pkix.Name, usage x509.ExtKeyUsage, ips []net.IP, dns []string) error {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		t := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: subject, NotBefore: now, NotAfter: now.Add(10 * 24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			IPAddresses: ips, DNSNames: dns,
		}
		der, err := x509.CreateCertificate(rand.Reader, t, ca, &k.PublicKey, caKey)
		if err != nil {
			return err
		}
		return writeCertKey(dir, name, der, k)
	}
	if err := leaf("apiserver", 2, pkix.Name{CommonName: "kube-apiserver"}, x509.ExtKeyUsageServerAuth,
		[]net.IP{net.IPv4(127, 0, 0, 1), hostIP, serviceIP},
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}); err != nil {
		return err
	}
	// The registry's serving certificate, for the host's address (the
	// name Pods and containerd pull by).
	if err := leaf("registry", 4, pkix.Name{CommonName: "ate-test-registry"}, x509.ExtKeyUsageServerAuth,
		[]net.IP{hostIP}, nil); err != nil {
		return err
	}
	if err := leaf("apiserver-kubelet", 3, pkix.Name{CommonName: "kube-apiserver-kubelet-client", Organization: []string{"system:masters"}},
		x509.ExtKeyUsageClientAuth, nil, nil); err != nil {
		return err
	}
	sa, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	saDER, err := x509.MarshalECPrivateKey(sa)
	if err != nil {
		return err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(&sa.PublicKey)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "sa.key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: saDER}), 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), 0o644)
}

func writeCertKey(dir, name string, der []byte, key *ecdsa.PrivateKey) error {
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, name+".crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, name+".key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600)
}
