package image

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/docker/cli/cli/config/configfile"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// ErrUnauthorized marks a registry that refused a pull (401 or 403): the
// atespace has no credentials for it, or not ones that may read that
// repository. Retrying does not help; the operator's credentials for the
// atespace (Credentials) must change.
var ErrUnauthorized = errors.New("registry refused the pull")

// Credentials chooses the registry credentials of each atespace's pulls.
// Whoever writes a template names the registry image; pulling it with
// the machine's own credentials (~/.docker/config.json) would let any
// tenant read every private image the operator's login can, and one
// tenant's credentials must not serve another's pulls. The API server
// (Inspect, when a template is created) and the nodes (unpacking) use
// the same choice, so a template one of them may not read is refused at
// creation.
type Credentials interface {
	// Keychain returns the credentials for atespace's pulls ("" for
	// pulls of no atespace) and says whose they are, for the error a
	// registry's refusal gets (never a secret).
	Keychain(atespace string) (kc authn.Keychain, whose string, err error)
	// String names the choice for logs, never a secret.
	String() string
}

// Credential choices, as ParseCredentials reads them (--registry-credentials).
const (
	// CredentialsAnonymous pulls without credentials: public images only.
	// The default.
	CredentialsAnonymous = "anonymous"
	// CredentialsNode pulls every atespace's images with the machine's
	// own Docker credentials ($DOCKER_CONFIG or ~/.docker/config.json):
	// for an installation whose every tenant may read whatever that
	// login can (one team, `ate up` on a workstation).
	CredentialsNode = "node"
)

// ParseCredentials reads a --registry-credentials value: "anonymous"
// (or empty), "node", or an absolute directory holding one Docker
// config.json per atespace, named <atespace>.json (CredentialsDir). A
// directory must exist.
func ParseCredentials(s string) (Credentials, error) {
	switch s {
	case "", CredentialsAnonymous:
		return anonymous{}, nil
	case CredentialsNode:
		return nodeCredentials{}, nil
	}
	if !filepath.IsAbs(s) {
		return nil, fmt.Errorf("registry credentials %q: want %s, %s or an absolute directory of <atespace>.json files", s, CredentialsAnonymous, CredentialsNode)
	}
	fi, err := os.Stat(s)
	if err != nil {
		return nil, fmt.Errorf("registry credentials: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("registry credentials %s: not a directory", s)
	}
	return CredentialsDir(s), nil
}

// RegistryCredentials sets whose credentials the cache's registry pulls
// use. Without it pulls are anonymous.
func RegistryCredentials(c Credentials) Option {
	return func(cache *Cache) {
		if c != nil {
			cache.creds = c
		}
	}
}

// anonymousKeychain answers every registry with authn.Anonymous (a
// multi-keychain of none does).
var anonymousKeychain = authn.NewMultiKeychain()

type anonymous struct{}

func (anonymous) Keychain(string) (authn.Keychain, string, error) {
	return anonymousKeychain, "anonymously (--registry-credentials anonymous: public images only)", nil
}
func (anonymous) String() string { return CredentialsAnonymous }

type nodeCredentials struct{}

func (nodeCredentials) Keychain(string) (authn.Keychain, string, error) {
	return authn.DefaultKeychain, "with this machine's Docker login (--registry-credentials node)", nil
}
func (nodeCredentials) String() string { return CredentialsNode }

// CredentialsDir reads atespace A's credentials from DIR/A.json, a
// Docker config.json of which only the inline "auths" entries count:
// credential helpers ("credsStore", "credHelpers") are ignored, so the
// file never makes the API server or a node run a program. The file is
// read at every pull, so the operator rotates a key by rewriting it (on
// Kubernetes: a Secret with one key per atespace, mounted as a volume).
// An atespace without a file pulls anonymously; pulls of no atespace
// always do.
type CredentialsDir string

func (d CredentialsDir) String() string { return "per-atespace files in " + string(d) }

func (d CredentialsDir) Keychain(atespace string) (authn.Keychain, string, error) {
	root, err := os.OpenRoot(string(d))
	if err != nil {
		return nil, "", fmt.Errorf("registry credentials: %w", err)
	}
	defer root.Close()
	cas, err := trustedCAs(root, filepath.Join(string(d), RegistryCAFile))
	if err != nil {
		return nil, "", err
	}
	kc, whose, err := d.keychain(root, atespace)
	if err != nil || cas == nil {
		return kc, whose, err
	}
	return trustingKeychain{Keychain: kc, transport: cas}, whose, nil
}

// RegistryCAFile is the file of a credentials directory (CredentialsDir)
// whose PEM certificates are trusted for every registry pull made with
// that directory, besides the system's roots: a registry with a
// certificate from the installation's own CA. Pulls of every atespace
// trust it (whom to trust is the operator's choice, not a tenant's). It
// is re-read at each pull, as the keys are.
const RegistryCAFile = "ca.crt"

func (d CredentialsDir) keychain(root *os.Root, atespace string) (authn.Keychain, string, error) {
	p := filepath.Join(string(d), atespace+".json")
	anonymously := "anonymously (no " + p + ")"
	// Atespace names are DNS labels (validated at the API's edge); a
	// name that could leave the directory is refused here too.
	if atespace == "" || strings.ContainsAny(atespace, `/\`) || strings.HasPrefix(atespace, ".") {
		return anonymousKeychain, "anonymously (pulls of no atespace)", nil
	}
	f, err := root.Open(atespace + ".json")
	if errors.Is(err, fs.ErrNotExist) {
		return anonymousKeychain, anonymously, nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("registry credentials of atespace %s: %w", atespace, err)
	}
	defer f.Close()
	cf := configfile.New("")
	if err := cf.LoadFromReader(f); err != nil {
		// The decoder's message may quote the file; the file holds
		// secrets, so only the kind of mistake is given.
		return nil, "", fmt.Errorf("registry credentials of atespace %s: %s is not a Docker config.json", atespace, p)
	}
	// Inline auths only: a helper named here would make the API server
	// or a node run a program.
	cf.CredentialsStore, cf.CredentialHelpers = "", nil
	return configKeychain{cf}, "with the key in " + p, nil
}

// configKeychain answers from one config.json (helpers removed).
type configKeychain struct{ cf *configfile.ConfigFile }

// Resolve looks the registry up as authn.DefaultKeychain does in the
// machine's config.json: by the repository's name, then by the
// registry's, Docker Hub under its historical key; the config file's own
// lookup matches "https://host" entries to "host".
func (k configKeychain) Resolve(target authn.Resource) (authn.Authenticator, error) {
	for _, key := range []string{target.String(), target.RegistryStr()} {
		if key == name.DefaultRegistry {
			key = authn.DefaultAuthKey
		}
		a, err := k.cf.GetAuthConfig(key)
		if err != nil {
			return nil, err
		}
		if a.Username != "" || a.Password != "" || a.IdentityToken != "" || a.RegistryToken != "" {
			return authn.FromConfig(authn.AuthConfig{Username: a.Username, Password: a.Password,
				IdentityToken: a.IdentityToken, RegistryToken: a.RegistryToken}), nil
		}
	}
	return authn.Anonymous, nil
}

// trustingKeychain is a keychain whose pulls trust more roots than the
// system's: resolve uses its transport.
type trustingKeychain struct {
	authn.Keychain
	transport http.RoundTripper
}

// transports holds one transport per distinct CA bundle, so pulls keep
// reusing connections while the bundle stays the same.
var transports sync.Map // sha256 of the PEM → *http.Transport

// trustedCAs returns a transport trusting the system's roots and the
// certificates in root's RegistryCAFile, nil when there is no such file.
// path names the file in errors.
func trustedCAs(root *os.Root, path string) (http.RoundTripper, error) {
	pem, err := root.ReadFile(RegistryCAFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("registry CA: %w", err)
	}
	key := sha256.Sum256(pem)
	if t, ok := transports.Load(key); ok {
		return t.(http.RoundTripper), nil
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("registry CA %s holds no PEM certificate", path)
	}
	t := remote.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	got, _ := transports.LoadOrStore(key, t)
	return got.(http.RoundTripper), nil
}

// refused reports whether err is a registry's refusal of the caller's
// credentials.
func refused(err error) bool {
	var te *transport.Error
	return errors.As(err, &te) && (te.StatusCode == http.StatusUnauthorized || te.StatusCode == http.StatusForbidden)
}
