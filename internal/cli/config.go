package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"substrate.dev/ate/internal/ateconfig"
)

// clientConfig finds the server address from --server, Kubernetes mode
// (package doc) and the config file, in that order. --server alone, or
// Kubernetes mode, is enough; the file is still read when present so that
// future settings (tokens) apply to an overridden address too — except
// the default file in Kubernetes mode: $HOME/.ate/config.yaml is what a
// local `ate up` wrote (its CA, its admin token), which means nothing to
// a cluster's API server, so `kubectl ate` reads a config file only when
// --config or $ATE_CONFIG names one.
func (a *app) clientConfig() (ateconfig.Config, error) {
	path, err := ateconfig.Path(a.configFlag, a.getenv)
	if err != nil {
		return ateconfig.Config{}, err
	}
	server := a.server
	explicitFile := a.configFlag != "" || a.getenv(ateconfig.EnvVar) != ""
	kube := a.kubeMode()
	if server == "" && kube {
		if msgs := validation.IsDNS1123Label(a.ateNamespace); len(msgs) > 0 {
			return ateconfig.Config{}, fmt.Errorf("--%s %q: %s", flagATENamespace, a.ateNamespace, strings.Join(msgs, "; "))
		}
		server = KubeTarget(a.ateNamespace)
	}
	var c ateconfig.Config
	if kube && !explicitFile {
		err = fs.ErrNotExist
	} else {
		c, err = ateconfig.Load(path)
	}
	switch {
	case errors.Is(err, fs.ErrNotExist) && server != "":
		c = ateconfig.Config{}
	case errors.Is(err, fs.ErrNotExist):
		return ateconfig.Config{}, fmt.Errorf("no client config at %s: run `ate up` to start a local server (it writes this file; with --data-dir DIR it writes DIR/config.yaml: pass --config DIR/config.yaml or set $%s), or pass --server HOST:PORT", path, ateconfig.EnvVar)
	case err != nil:
		return ateconfig.Config{}, err
	}
	if server != "" {
		c.Server = server
	}
	if a.ca != "" {
		c.CertificateAuthority = a.ca
	}
	if a.token != "" {
		c.Token = a.token
	}
	if c.Server == "" {
		return ateconfig.Config{}, fmt.Errorf("client config %s sets no server: run `ate up` or pass --server HOST:PORT", path)
	}
	return c, nil
}

// KubeTarget is the API server's address in Kubernetes mode: Service
// KubeService's port KubePortName in namespace ns.
func KubeTarget(ns string) string {
	return "k8s:///" + KubeService + "." + ns + ":" + KubePortName
}
