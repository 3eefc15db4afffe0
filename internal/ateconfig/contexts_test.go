package ateconfig

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// contextsFile is a file with top-level settings (as `ate up` writes
// them), a current-context and contexts with relative and absolute CAs.
const contextsFile = `server: 127.0.0.1:7070
certificate-authority: pki/ca.crt
token: local-admin
current-context: staging
contexts:
- name: staging
  server: ate.staging:7070
  certificate-authority: /etc/ate/staging.crt
  token: staging-token
- name: kind-prod
  certificate-authority: prod/ca.crt
  token: prod-token
`

// TestSelect: which settings the CLI uses outside Kubernetes mode, from
// the context it names (--ate-context), else current-context, else the
// top-level fields; relative CAs are relative to the file.
func TestSelect(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name     string
		file     string
		ctx      string // --ate-context
		want     Config
		wantUsed string // context used
		wantErr  string // substring; also wraps ErrNoContext
	}{
		{name: "top-level only", file: "server: h:1\ncertificate-authority: ca.crt\ntoken: t\n",
			want: Config{Server: "h:1", CertificateAuthority: filepath.Join(dir, "ca.crt"), Token: "t"}},
		{name: "top-level, absolute CA", file: "server: h:1\ncertificate-authority: /abs/ca.crt\n",
			want: Config{Server: "h:1", CertificateAuthority: "/abs/ca.crt"}},
		{name: "contexts, no current-context", file: "server: h:1\ncontexts:\n- name: a\n  server: a:1\n",
			want: Config{Server: "h:1"}},
		{name: "current-context", file: contextsFile,
			want:     Config{Server: "ate.staging:7070", CertificateAuthority: "/etc/ate/staging.crt", Token: "staging-token"},
			wantUsed: "staging"},
		{name: "--ate-context over current-context, relative CA", file: contextsFile, ctx: "kind-prod",
			want:     Config{CertificateAuthority: filepath.Join(dir, "prod", "ca.crt"), Token: "prod-token"},
			wantUsed: "kind-prod"},
		{name: "unknown --ate-context", file: contextsFile, ctx: "kind-dev",
			wantErr: `context "kind-dev": no such context (it has staging, kind-prod)`},
		{name: "--ate-context, file without contexts", file: "server: h:1\n", ctx: "a",
			wantErr: `context "a": no such context (it has none)`},
		{name: "dangling current-context", file: "server: h:1\ncurrent-context: gone\n",
			wantErr: `current-context "gone": no such context`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, "config.yaml")
			writeFile(t, path, tc.file)
			f, err := LoadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			got, used, err := f.Select(tc.ctx)
			if tc.wantErr != "" {
				if !errors.Is(err, ErrNoContext) || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), path) {
					t.Fatalf("Select(%q) = %v; want ErrNoContext naming %s and saying %q", tc.ctx, err, path, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want || used != tc.wantUsed {
				t.Fatalf("Select(%q) = %+v, %q, %v; want %+v, %q", tc.ctx, got, used, err, tc.want, tc.wantUsed)
			}
			// Load is Select("").
			if tc.ctx == "" {
				if c, err := Load(path); err != nil || c != tc.want {
					t.Errorf("Load = %+v, %v; want %+v", c, err, tc.want)
				}
			}
		})
	}
}

// TestContext: Kubernetes mode's lookup finds a context by name and
// nothing else: not the top-level fields, not current-context's.
func TestContext(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, path, contextsFile)
	f, err := LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if c, ok := f.Context("kind-prod"); !ok || c.Token != "prod-token" || c.CertificateAuthority != filepath.Join(filepath.Dir(path), "prod", "ca.crt") {
		t.Errorf("Context(kind-prod) = %+v, %v", c, ok)
	}
	for _, name := range []string{"kind-dev", ""} {
		if c, ok := f.Context(name); ok || c != (Config{}) {
			t.Errorf("Context(%q) = %+v, %v; want nothing", name, c, ok)
		}
	}
}

// TestLoadFileRefusesBadContexts: names identify contexts, so a file
// with a nameless or a repeated one is refused rather than read one way.
func TestLoadFileRefusesBadContexts(t *testing.T) {
	dir := t.TempDir()
	for name, data := range map[string]string{
		"nameless": "contexts:\n- server: a:1\n",
		"twice":    "contexts:\n- name: a\n- name: a\n",
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, name+".yaml")
			writeFile(t, path, data)
			if _, err := LoadFile(path); err == nil || !strings.Contains(err.Error(), path) {
				t.Errorf("LoadFile = %v; want an error naming %s", err, path)
			}
		})
	}
}

// TestWriteKeepsContexts: `ate up` (Write) replaces the top-level
// settings and makes them current again, and keeps the user's contexts
// as written; a file it cannot parse it leaves alone.
func TestWriteKeepsContexts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, path, contextsFile)
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Write(path, Config{Server: "127.0.0.1:7171", Token: "new-admin"}); err != nil {
		t.Fatal(err)
	}
	checkMode(t, path, 0o600)
	f, err := LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if f.Config != (Config{Server: "127.0.0.1:7171", Token: "new-admin"}) || f.CurrentContext != "" {
		t.Errorf("top level %+v, current-context %q; want the new settings, current", f.Config, f.CurrentContext)
	}
	if len(f.Contexts) != 2 || f.Contexts[1].CertificateAuthority != "prod/ca.crt" {
		t.Errorf("contexts %+v; want both, paths as written", f.Contexts)
	}

	bad := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, bad, "contexts: [unclosed\n")
	if err := Write(bad, Config{Server: "h:1"}); err == nil {
		t.Error("Write over an unparsable file succeeded")
	}
	if data, _ := os.ReadFile(bad); string(data) != "contexts: [unclosed\n" {
		t.Errorf("unparsable file rewritten: %q", data)
	}
}

// TestEditContexts: SetContext adds or replaces, UseContext and
// DeleteContext refuse unknown names; deleting the current context
// unsets current-context.
func TestEditContexts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.yaml")
	f := NewFile(path)
	if err := f.SetContext(Context{}); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("SetContext without a name: %v", err)
	}
	for _, c := range []Context{{Name: "a", Config: Config{Server: "a:1"}}, {Name: "b"}, {Name: "a", Config: Config{Server: "a:2"}}} {
		if err := f.SetContext(c); err != nil {
			t.Fatal(err)
		}
	}
	if len(f.Contexts) != 2 || f.Contexts[0].Server != "a:2" {
		t.Errorf("contexts %+v; want a (replaced in place), b", f.Contexts)
	}
	if err := f.UseContext("c"); !errors.Is(err, ErrNoContext) {
		t.Errorf("UseContext(c) = %v", err)
	}
	if err := f.UseContext("a"); err != nil || f.CurrentContext != "a" {
		t.Errorf("UseContext(a) = %v, current %q", err, f.CurrentContext)
	}
	if was, err := f.DeleteContext("b"); was || err != nil {
		t.Errorf("DeleteContext(b) = %v, %v", was, err)
	}
	if was, err := f.DeleteContext("a"); !was || err != nil || f.CurrentContext != "" || len(f.Contexts) != 0 {
		t.Errorf("DeleteContext(a) = %v, %v; file %+v", was, err, f)
	}
	if _, err := f.DeleteContext("a"); !errors.Is(err, ErrNoContext) {
		t.Errorf("DeleteContext(a) twice = %v", err)
	}
}
