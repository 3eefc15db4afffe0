package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"substrate.dev/ate/internal/cli"
	"substrate.dev/ate/internal/k8s/controller"
	atek8s "substrate.dev/ate/pkg/apis/ate/v1alpha1"
)

// TestManifestArgsParse: every container of deploy/base, every overlay's
// patch that replaces a container's arguments (dev's --insecure,
// production's OIDC), and the worker Pods the controller renders for the
// example WorkerPool (with a cert-manager issuer and plaintext), passes
// `ate` arguments its real subcommand accepts (the image's entrypoint is
// `ate`). A flag renamed in cmd/ate and not in the manifests fails here,
// not on a cluster. Each controller's flags also give its worker Pods
// exactly one of --worker-tls-bootstrap, --worker-cert-issuer and
// --worker-insecure, plaintext
// exactly when the controller's own link is (a TLS API server refuses
// plaintext nodes, a plaintext one cannot check node certificates).
func TestManifestArgsParse(t *testing.T) {
	var containers []corev1.Container
	var pool *atek8s.WorkerPool
	var sc *atek8s.SandboxConfig
	files, err := filepath.Glob(filepath.Join("..", "..", "deploy", "base", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in deploy/base (%v)", err)
	}
	overlays, err := filepath.Glob(filepath.Join("..", "..", "deploy", "overlays", "*", "*.yaml"))
	if err != nil || len(overlays) == 0 {
		t.Fatalf("no overlays in deploy/overlays (%v)", err)
	}
	for _, f := range append(files, overlays...) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range bytes.Split(data, []byte("\n---")) {
			var meta struct{ Kind string }
			if err := yaml.Unmarshal(doc, &meta); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			// Overlays are patches: only their Deployments' arguments
			// count, and $patch directives are no Deployment fields.
			overlay := slices.Contains(overlays, f)
			if overlay && meta.Kind != "Deployment" {
				continue
			}
			switch meta.Kind {
			case "Deployment":
				var d appsv1.Deployment
				unmarshal := yaml.UnmarshalStrict
				if overlay {
					unmarshal = yaml.Unmarshal
				}
				if err := unmarshal(doc, &d); err != nil {
					t.Fatalf("%s: %v", f, err)
				}
				for _, c := range d.Spec.Template.Spec.Containers {
					// An overlay's patch that leaves the arguments alone.
					if len(c.Args) > 0 {
						containers = append(containers, c)
					}
				}
			case "WorkerPool":
				pool = &atek8s.WorkerPool{}
				if err := yaml.UnmarshalStrict(doc, pool); err != nil {
					t.Fatalf("%s: %v", f, err)
				}
			case "SandboxConfig":
				sc = &atek8s.SandboxConfig{}
				if err := yaml.UnmarshalStrict(doc, sc); err != nil {
					t.Fatalf("%s: %v", f, err)
				}
			}
		}
	}
	if pool == nil || sc == nil || len(containers) < 3 {
		t.Fatalf("deploy/base: pool %v, SandboxConfig %v, %d containers; want the example pool, the default SandboxConfig and 3 components", pool != nil, sc != nil, len(containers))
	}
	for _, tls := range []controller.WorkerSettings{{CertIssuer: "ClusterIssuer/ate-ca", TrustDomain: "ate.local"}, {Insecure: true}} {
		tls.API, tls.Image, tls.Snapshots = "k8s:///ate-apiserver.ate-system:grpc", "ate", "s3://b/p"
		w := controller.WorkerDeployment(pool, tls, sc)
		containers = append(containers, w.Spec.Template.Spec.Containers...)
	}
	for _, c := range containers {
		if len(c.Command) > 0 {
			t.Errorf("container %s sets a command %q: the image's entrypoint is ate", c.Name, c.Command)
		}
		var ctl *controller.Config
		root := cli.NewRootCommand()
		root.AddCommand(upCommand(nil), apiserverCommand(), nodeCommand(), routerCommand(),
			controllerCommand(func(_ context.Context, cfg controller.Config) error { ctl = &cfg; return nil }))
		sub, rest, err := root.Find(c.Args)
		if err != nil || sub == root {
			t.Errorf("container %s: args %q name no ate subcommand (%v)", c.Name, c.Args, err)
			continue
		}
		if err := sub.ParseFlags(rest); err != nil {
			t.Errorf("container %s: ate %s refuses its args: %v\nargs: %s", c.Name, sub.Name(), err, strings.Join(c.Args, " "))
			continue
		}
		if sub.Name() != "controller" {
			continue
		}
		sub.SetErr(io.Discard)
		if err := sub.RunE(sub, nil); err != nil || ctl == nil {
			t.Fatalf("container %s: ate controller: %v", c.Name, err)
		}
		w := ctl.Workers
		modes := 0
		for _, set := range []bool{w.CertIssuer != "", w.Insecure, w.TLSBootstrap} {
			if set {
				modes++
			}
		}
		if modes != 1 || w.Insecure != ctl.TLS.Insecure {
			t.Errorf("container %s: --worker-tls-bootstrap=%v --worker-cert-issuer=%q --worker-insecure=%v with --insecure=%v: want exactly one, plaintext with plaintext\nargs: %s",
				c.Name, w.TLSBootstrap, w.CertIssuer, w.Insecure, ctl.TLS.Insecure, strings.Join(c.Args, " "))
		}
	}
}
