package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"substrate.dev/ate/internal/apidial"
	"substrate.dev/ate/internal/ateconfig"
)

// clientConfig finds the settings a command connects with, and says
// where they came from:
//
//   - Outside Kubernetes mode (package doc): the client config file's
//     context named by --ate-context, else its current-context, else its
//     top-level fields (what `ate up` writes). --server alone is enough
//     when there is no file.
//   - In Kubernetes mode: the server is the cluster's Service, and of the
//     file only the context named after the kubeconfig context in use
//     applies (its CA, its token, its server if it sets one). Without
//     such a context: no CA and no token. Never the top-level fields or
//     current-context's: those are another installation's — a local `ate
//     up`'s CA and admin token sent to a cluster failed as "first record
//     does not look like a TLS handshake".
//
// --server, --certificate-authority and --token override whatever was
// found, in both modes.
func (a *app) clientConfig() (ateconfig.Config, configSource, error) {
	path, err := ateconfig.Path(a.configFlag, a.getenv)
	if err != nil {
		return ateconfig.Config{}, configSource{}, err
	}
	src := configSource{path: path, kube: a.kubeMode()}
	file, err := ateconfig.LoadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		file = nil
	case err != nil:
		return ateconfig.Config{}, src, err
	default:
		src.read = true
	}
	var c ateconfig.Config
	switch {
	case src.kube:
		if a.ateContext != "" {
			return ateconfig.Config{}, src, fmt.Errorf("--%s does not apply in Kubernetes mode: the ate context used is the one named after the kubeconfig context (--%s, else the kubeconfig's current-context)", flagATEContext, flagKubeContext)
		}
		// A kubeconfig that cannot be read leaves no context to match;
		// the dial reports the kubeconfig itself if it needs it (it does
		// not with --server).
		src.kubeContext, src.kubeErr = apidial.KubeContext(a.kubeconfig, a.kubeContext)
		if file != nil && src.kubeContext != "" {
			if cc, ok := file.Context(src.kubeContext); ok {
				c, src.context = cc, src.kubeContext
			}
		}
		if c.Server == "" && a.server == "" {
			if msgs := validation.IsDNS1123Label(a.ateNamespace); len(msgs) > 0 {
				return ateconfig.Config{}, src, fmt.Errorf("--%s %q: %s", flagATENamespace, a.ateNamespace, strings.Join(msgs, "; "))
			}
			c.Server = KubeTarget(a.ateNamespace)
		}
	case file != nil:
		if c, src.context, err = file.Select(a.ateContext); err != nil {
			return ateconfig.Config{}, src, err
		}
	case a.server == "" || a.ateContext != "":
		return ateconfig.Config{}, src, fmt.Errorf("no client config at %s: run `ate up` to start a local server (it writes this file; with --data-dir DIR it writes DIR/config.yaml: pass --config DIR/config.yaml or set $%s), or pass --server HOST:PORT", path, ateconfig.EnvVar)
	}
	for _, o := range []struct {
		flag, value string
		field       *string
	}{
		{flagServer, a.server, &c.Server},
		{flagCA, a.ca, &c.CertificateAuthority},
		{flagToken, a.token, &c.Token},
	} {
		if o.value != "" {
			*o.field = o.value
			src.flags = append(src.flags, "--"+o.flag)
		}
	}
	if c.Server == "" {
		return ateconfig.Config{}, src, fmt.Errorf("client config %s sets no server (%s): run `ate up` or pass --server HOST:PORT", path, src.settings())
	}
	return c, src, nil
}

// configSource is where a command's connection settings came from, for
// the errors that they may have caused (a refused connection, a failed
// TLS handshake, a rejected token): with a local and a cluster
// installation side by side, which file and context were used is the
// first question.
type configSource struct {
	path string // the client config file looked for
	read bool   // it exists and was read
	// context is the ate context used; empty: none (top-level fields,
	// or in Kubernetes mode nothing of the file).
	context string
	kube    bool
	// kubeContext is, in Kubernetes mode, the kubeconfig context in use
	// (empty: none, or kubeErr).
	kubeContext string
	kubeErr     error
	flags       []string // settings given as flags, which override the file
}

// settings says which settings of the file were used.
func (s configSource) settings() string {
	switch {
	case s.context != "":
		return fmt.Sprintf("context %q", s.context)
	case s.kube:
		return "none in Kubernetes mode"
	default:
		return "top-level settings, no context"
	}
}

// String is the source as an error's parenthesis, e.g.
//
//	(client config /root/.ate/config.yaml, context "kind-prod"; Kubernetes mode: kubeconfig context "kind-prod")
//	(no client config: Kubernetes mode, no ate context named "kind-prod" in /root/.ate/config.yaml)
func (s configSource) String() string {
	var b strings.Builder
	b.WriteString("(")
	switch {
	case s.context != "" || (s.read && !s.kube):
		fmt.Fprintf(&b, "client config %s, %s", s.path, s.settings())
		if s.kube {
			fmt.Fprintf(&b, "; Kubernetes mode: kubeconfig context %q", s.kubeContext)
		}
	case s.kube && s.kubeErr != nil:
		fmt.Fprintf(&b, "no client config: Kubernetes mode, no kubeconfig context to name an ate context after: %v", s.kubeErr)
	case s.kube && s.kubeContext == "":
		b.WriteString("no client config: Kubernetes mode, no kubeconfig context to name an ate context after")
	case s.kube && !s.read:
		fmt.Fprintf(&b, "no client config: Kubernetes mode, no ate context named %q: no file %s", s.kubeContext, s.path)
	case s.kube:
		fmt.Fprintf(&b, "no client config: Kubernetes mode, no ate context named %q in %s", s.kubeContext, s.path)
	default:
		fmt.Fprintf(&b, "no client config at %s", s.path)
	}
	if len(s.flags) > 0 {
		fmt.Fprintf(&b, "; given as flags: %s", strings.Join(s.flags, ", "))
	}
	b.WriteString(")")
	return b.String()
}

// KubeTarget is the API server's address in Kubernetes mode: Service
// KubeService's port KubePortName in namespace ns.
func KubeTarget(ns string) string {
	return "k8s:///" + KubeService + "." + ns + ":" + KubePortName
}
