package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"substrate.dev/ate/internal/pki"
)

// TestCertsCommands: `ate certs init` then `issue` write a --tls-dir a
// component loads, with the identity and SANs asked for.
func TestCertsCommands(t *testing.T) {
	dir := t.TempDir()
	run := func(args ...string) (string, error) {
		cmd := certsCommand()
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs(args)
		err := cmd.Execute()
		return out.String(), err
	}
	ca, out := filepath.Join(dir, "ca"), filepath.Join(dir, "node-a")
	if got, err := run("init", "--dir", ca); err != nil || !strings.Contains(got, "created CA") {
		t.Fatalf("init: %v %s", err, got)
	}
	if got, err := run("init", "--dir", ca); err != nil || !strings.Contains(got, "kept the existing CA") {
		t.Fatalf("init again: %v %s", err, got)
	}
	if got, err := run("issue", "--ca-dir", ca, "--component", "node", "--name", "node-a", "--dns", "a.example", "--ip", "10.1.2.3", "--ttl", "2h", "--out", out); err != nil ||
		!strings.Contains(got, "spiffe://ate.local/ate/node/node-a") {
		t.Fatalf("issue: %v %s", err, got)
	}
	src, err := pki.NewFileSource(t.Context(), out, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := src.Certificate()
	if c.Leaf.DNSNames[0] != "a.example" || c.Leaf.IPAddresses[0].String() != "10.1.2.3" {
		t.Errorf("SANs %v %v", c.Leaf.DNSNames, c.Leaf.IPAddresses)
	}
	if st, err := os.Stat(filepath.Join(out, pki.KeyFile)); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("tls.key: %v %v", st.Mode(), err)
	}
	if _, err := run("issue", "--ca-dir", ca, "--component", "sidecar", "--name", "x", "--out", filepath.Join(dir, "x")); err == nil {
		t.Error("a certificate for an unknown component")
	}
}

// TestCertsSecrets: `ate certs secrets` prints, for kubectl apply, the
// CA's Secret (its key included, for the API server to sign nodes with)
// and one Secret per component whose leaf chains to that CA and names
// the component as the chart's Deployments and the kustomize base expect;
// the API server's carries its Service's DNS names in the namespace
// given.
func TestCertsSecrets(t *testing.T) {
	ca := filepath.Join(t.TempDir(), "ca")
	if _, _, err := pki.InitCA(ca, "prod.example"); err != nil {
		t.Fatal(err)
	}
	cmd := certsCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"secrets", "--ca-dir", ca, "--namespace", "ate-prod", "--trust-domain", "prod.example"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	secrets := map[string]corev1.Secret{}
	for _, doc := range strings.Split(out.String(), "---\n") {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		var s corev1.Secret
		if err := yaml.UnmarshalStrict([]byte(doc), &s); err != nil {
			t.Fatalf("%v in:\n%s", err, doc)
		}
		if s.Kind != "Secret" || s.Namespace != "ate-prod" || s.Type != corev1.SecretTypeTLS {
			t.Errorf("%s: kind %s namespace %s type %s", s.Name, s.Kind, s.Namespace, s.Type)
		}
		secrets[s.Name] = s
	}
	caPair, err := tls.X509KeyPair(secrets["ate-ca"].Data["tls.crt"], secrets["ate-ca"].Data["tls.key"])
	if err != nil || !caPair.Leaf.IsCA {
		t.Fatalf("Secret ate-ca is not the CA with its key: %v", err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(caPair.Leaf)
	for _, c := range []string{"apiserver", "router", "controller"} {
		s, ok := secrets["ate-"+c+"-tls"]
		if !ok {
			t.Errorf("no Secret ate-%s-tls among %d", c, len(secrets))
			continue
		}
		pair, err := tls.X509KeyPair(s.Data["tls.crt"], s.Data["tls.key"])
		if err != nil {
			t.Fatalf("ate-%s-tls: %v", c, err)
		}
		if _, err := pair.Leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil || !bytes.Equal(s.Data["ca.crt"], secrets["ate-ca"].Data["tls.crt"]) {
			t.Errorf("ate-%s-tls does not chain to the CA it carries: %v", c, err)
		}
		if want := "spiffe://prod.example/ate/" + c + "/ate-" + c; len(pair.Leaf.URIs) != 1 || pair.Leaf.URIs[0].String() != want {
			t.Errorf("ate-%s-tls names %v, want %s", c, pair.Leaf.URIs, want)
		}
		if c == "apiserver" && pair.Leaf.VerifyHostname("ate-apiserver.ate-prod.svc") != nil {
			t.Errorf("the API server's DNS names %v", pair.Leaf.DNSNames)
		}
	}
}
