package e2e

import (
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"google.golang.org/grpc"

	"substrate.dev/ate/internal/ateconfig"
	"substrate.dev/ate/internal/pki"
)

// caDir is the CA every separately started component of the e2e run
// gets its certificate from (`ate certs init` in TestMain): the
// components' mTLS is on in every multi-process test, as in a real
// installation, not only in the tests about it.
var caDir string

// initCA runs `ate certs init` into dir.
func initCA(dir string) ([]byte, error) {
	return exec.Command(ateBin, "certs", "init", "--dir", dir).CombinedOutput()
}

// issueCert runs `ate certs issue` from the CA in ca for component/name
// into a fresh directory and returns it (a --tls-dir).
func issueCert(t testing.TB, ca, component, name string, extra ...string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), component+"-"+name)
	args := append([]string{"certs", "issue", "--ca-dir", ca, "--component", component, "--name", name, "--out", out}, extra...)
	if b, err := exec.Command(ateBin, args...).CombinedOutput(); err != nil {
		t.Fatalf("ate %v: %v\n%s", args, err, b)
	}
	return out
}

// withTLS returns args of `ate apiserver|node|router|controller` with a
// --tls-dir from caDir for the component (a node's named by its --name),
// unless args choose already (--tls-dir, --insecure); other commands'
// args unchanged.
func withTLS(t testing.TB, args []string) []string {
	t.Helper()
	if len(args) == 0 || !slices.Contains([]string{"apiserver", "node", "router", "controller"}, args[0]) ||
		slices.ContainsFunc(args, func(a string) bool {
			return a == "--insecure" || a == "--tls-dir" || len(a) > 10 && a[:10] == "--tls-dir="
		}) {
		return args
	}
	name := args[0]
	if i := slices.Index(args, "--name"); args[0] == "node" && i >= 0 && i+1 < len(args) {
		name = args[i+1]
	}
	return append(slices.Clone(args), "--tls-dir", issueCert(t, caDir, args[0], name))
}

// clusterClientConfig is the client config of the CLI and the test's
// own connections to separately started API servers at server.
func clusterClientConfig(server string) ateconfig.Config {
	return ateconfig.Config{Server: server, CertificateAuthority: filepath.Join(caDir, pki.CAFile)}
}

// dialOptions are ateconfig.DialOptions of c, failing t on error.
func dialOptions(t testing.TB, c ateconfig.Config) []grpc.DialOption {
	t.Helper()
	opts, err := ateconfig.DialOptions(c)
	if err != nil {
		t.Fatal(err)
	}
	return opts
}
