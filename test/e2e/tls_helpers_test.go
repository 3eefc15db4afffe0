package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
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

// adminToken is the bearer token of the e2e run's cluster admin (user
// e2e-admin in group ate:admins, bound to the admin role built in), in
// tokenFile: every separately started `ate apiserver` gets it as its
// --token-auth-file unless the test chooses its own authentication, and
// clusterClientConfig carries it, so the multi-process tests run with
// authentication on, as a real installation does.
const adminToken = "e2e-cluster-admin-token-0123456789abcdef"

// tokenFile is the static token file holding adminToken (writeTokenFile).
var tokenFile string

// writeTokenFile writes tokenFile into dir.
func writeTokenFile(dir string) error {
	tokenFile = filepath.Join(dir, "tokens.csv")
	return os.WriteFile(tokenFile, []byte(adminToken+",e2e-admin,0,\"ate:admins\"\n"), 0o600)
}

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
// unless args choose already (--tls-dir, --tls-bootstrap-dir, --insecure); an `ate apiserver`
// with TLS also gets --token-auth-file tokenFile unless args choose an
// authenticator (--token-auth-file, --oidc-issuer-url). Other commands'
// args unchanged.
func withTLS(t testing.TB, args []string) []string {
	t.Helper()
	if len(args) == 0 || !slices.Contains([]string{"apiserver", "node", "router", "controller"}, args[0]) ||
		hasFlag(args, "--insecure") {
		return args
	}
	args = slices.Clone(args)
	if args[0] == "apiserver" && !hasFlag(args, "--token-auth-file") && !hasFlag(args, "--oidc-issuer-url") {
		args = append(args, "--token-auth-file", tokenFile)
	}
	if hasFlag(args, "--tls-dir") || hasFlag(args, "--tls-bootstrap-dir") {
		return args
	}
	name := args[0]
	if i := slices.Index(args, "--name"); args[0] == "node" && i >= 0 && i+1 < len(args) {
		name = args[i+1]
	}
	return append(args, "--tls-dir", issueCert(t, caDir, args[0], name))
}

// hasFlag reports whether args hold flag, as "--flag" or "--flag=…".
func hasFlag(args []string, flag string) bool {
	return slices.ContainsFunc(args, func(a string) bool { return a == flag || strings.HasPrefix(a, flag+"=") })
}

// clusterClientConfig is the client config of the CLI and the test's
// own connections to separately started API servers at server: caDir's
// CA, and the cluster admin's token.
func clusterClientConfig(server string) ateconfig.Config {
	return ateconfig.Config{Server: server, CertificateAuthority: filepath.Join(caDir, pki.CAFile), Token: adminToken}
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
