package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
