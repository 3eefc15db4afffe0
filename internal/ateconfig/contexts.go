package ateconfig

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// ErrNoContext: the client config file has no context of the name asked
// for (--ate-context, current-context, `ate config use-context`).
var ErrNoContext = errors.New("no such context")

// File is the client config file as stored: the top-level settings `ate
// up` writes, and named contexts for other installations, as a kubeconfig
// has them:
//
//	server: 127.0.0.1:7070             # the top-level settings: ate up's
//	certificate-authority: pki/ca.crt
//	token: <admin token>
//	current-context: staging           # optional
//	contexts:
//	- name: staging
//	  server: ate.staging.example.com:7070
//	  certificate-authority: /etc/ate/staging-ca.crt
//	  token: <token>
//	- name: kind-prod                  # named after a kubeconfig context:
//	  certificate-authority: ca.crt    # what `kubectl ate` uses with it
//	  token: <token>
//
// A file with only the top-level fields, as `ate up` has always written,
// means what it always meant. The contexts are flat (their settings
// beside the name), unlike kubeconfig's, because an ate context has no
// cluster or user to share with another. A File is not safe for
// concurrent use.
type File struct {
	// Config is the top-level settings: used when no context is selected.
	Config
	// CurrentContext names the context used when the CLI is given none
	// (--ate-context); empty: the top-level settings. Kubernetes mode
	// ignores it (Context).
	CurrentContext string `json:"current-context,omitempty"`
	// Contexts are the named settings, names unique.
	Contexts []Context `json:"contexts,omitempty"`

	// path is where the file was read from: a relative
	// certificate-authority is relative to its directory.
	path string
}

// Context is one named set of connection settings in a File.
type Context struct {
	Name string `json:"name"`
	Config
}

// LoadFile reads the client config file at path, keeping the paths in it
// as written (Select and Context resolve them), so that writing it back
// changes nothing the caller did not. A missing file yields an error
// wrapping fs.ErrNotExist.
func LoadFile(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	f := &File{path: path}
	if err := yaml.Unmarshal(data, f); err != nil {
		return nil, fmt.Errorf("parse config %s: %w", path, err)
	}
	seen := map[string]bool{}
	for _, c := range f.Contexts {
		if c.Name == "" {
			return nil, fmt.Errorf("config %s: a context without a name", path)
		}
		if seen[c.Name] {
			return nil, fmt.Errorf("config %s: context %q twice", path, c.Name)
		}
		seen[c.Name] = true
	}
	return f, nil
}

// NewFile is an empty File that will be written to path, for a caller
// that found none there (`ate config set-context` creates the file).
func NewFile(path string) *File { return &File{path: path} }

// Path is where f was read from.
func (f *File) Path() string { return f.path }

// Select returns the settings the CLI uses outside Kubernetes mode: those
// of the context called name; with name empty, those of current-context,
// or the top-level fields when it names none. It also returns the name
// of the context used, empty for the top-level fields. Errors: a name
// (given or current-context) the file has no context of, wrapping
// ErrNoContext and naming the file.
func (f *File) Select(name string) (Config, string, error) {
	what := "context"
	if name == "" {
		if f.CurrentContext == "" {
			return f.resolve(f.Config), "", nil
		}
		name, what = f.CurrentContext, "current-context"
	}
	c, ok := f.Context(name)
	if !ok {
		return Config{}, "", f.noContext(what, name)
	}
	return c, name, nil
}

// Context returns the settings of the context called name and whether f
// has one. Kubernetes mode uses this and nothing else of the file: only a
// context named after the kubeconfig context is for that cluster, while
// the top-level fields and current-context are another installation's.
func (f *File) Context(name string) (Config, bool) {
	i := f.index(name)
	if i < 0 {
		return Config{}, false
	}
	return f.resolve(f.Contexts[i].Config), true
}

// SetContext stores c, replacing the context of its name or adding one
// at the end. Errors: an empty name.
func (f *File) SetContext(c Context) error {
	if c.Name == "" {
		return fmt.Errorf("config %s: a context needs a name", f.path)
	}
	if i := f.index(c.Name); i >= 0 {
		f.Contexts[i] = c
		return nil
	}
	f.Contexts = append(f.Contexts, c)
	return nil
}

// UseContext makes the context called name the current one. Errors: no
// such context (ErrNoContext).
func (f *File) UseContext(name string) error {
	if f.index(name) < 0 {
		return f.noContext("context", name)
	}
	f.CurrentContext = name
	return nil
}

// DeleteContext removes the context called name, and current-context if
// it named it (the top-level settings are then used), reporting whether
// it did. Errors: no such context (ErrNoContext).
func (f *File) DeleteContext(name string) (wasCurrent bool, err error) {
	i := f.index(name)
	if i < 0 {
		return false, f.noContext("context", name)
	}
	f.Contexts = slices.Delete(f.Contexts, i, i+1)
	if f.CurrentContext == name {
		f.CurrentContext = ""
		return true, nil
	}
	return false, nil
}

func (f *File) index(name string) int {
	if name == "" {
		return -1
	}
	return slices.IndexFunc(f.Contexts, func(c Context) bool { return c.Name == name })
}

// resolve makes c's relative certificate-authority relative to the file's
// directory rather than to wherever the CLI runs.
func (f *File) resolve(c Config) Config {
	if c.CertificateAuthority != "" && !filepath.IsAbs(c.CertificateAuthority) {
		c.CertificateAuthority = filepath.Join(filepath.Dir(f.path), c.CertificateAuthority)
	}
	return c
}

// noContext is ErrNoContext for name, naming the file and the contexts it
// has, so a typo shows what was meant.
func (f *File) noContext(what, name string) error {
	have := "it has none"
	if len(f.Contexts) > 0 {
		var names []string
		for _, c := range f.Contexts {
			names = append(names, c.Name)
		}
		have = "it has " + strings.Join(names, ", ")
	}
	return fmt.Errorf("client config %s: %s %q: %w (%s)", f.path, what, name, ErrNoContext, have)
}
