package cli

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"substrate.dev/ate/internal/ateconfig"
)

// TestConfigContexts: `ate config` round trip on a file `ate up` wrote:
// each step's output or error, the file staying 0600 with its top-level
// settings, a CA stored as an absolute path, set-context changing only
// the settings given, and bad names refused naming the file.
func TestConfigContexts(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir) // --certificate-authority ca.crt is relative to here
	writeFile(t, filepath.Join(dir, "ca.crt"), "not checked here\n")
	path := filepath.Join(dir, "home", ".ate", "config.yaml")
	local := ateconfig.Config{Server: "127.0.0.1:7070", CertificateAuthority: "pki/ca.crt", Token: "local-admin"}
	if err := ateconfig.Write(path, local); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o644); err != nil { // loosened by hand: a write makes it 0600 again
		t.Fatal(err)
	}
	ca := filepath.Join(dir, "ca.crt")
	for _, step := range []struct {
		args    []string
		stdout  string
		wantErr string // in stderr
	}{
		{args: []string{"get-contexts"}, stdout: "CURRENT   NAME   SERVER\n"},
		{args: []string{"current-context"}, wantErr: "client config " + path + " sets no current-context"},
		{args: []string{"set-context", "kind-prod", "--certificate-authority", "ca.crt", "--token", "prod-token"},
			stdout: `Context "kind-prod" created in ` + path + ".\n"},
		{args: []string{"set-context", "staging", "--server", "ate.staging:7070", "--current"},
			stdout: `Context "staging" created in ` + path + ".\nSwitched to context \"staging\".\n"},
		{args: []string{"get-contexts"}, stdout: "" +
			"CURRENT   NAME        SERVER\n" +
			"          kind-prod   \n" +
			"*         staging     ate.staging:7070\n"},
		{args: []string{"current-context"}, stdout: "staging\n"},
		{args: []string{"use-context", "kind-prod"}, stdout: "Switched to context \"kind-prod\".\n"},
		{args: []string{"set-context", "kind-prod", "--token", "rotated"}, stdout: `Context "kind-prod" modified in ` + path + ".\n"},
		{args: []string{"use-context", "kind-dev"}, wantErr: "client config " + path + `: context "kind-dev": no such context (it has kind-prod, staging)`},
		{args: []string{"set-context", ""}, wantErr: "client config " + path + ": a context needs a name"},
		{args: []string{"set-context", "x", "--certificate-authority", "missing.crt"}, wantErr: "--certificate-authority: stat " + filepath.Join(dir, "missing.crt")},
		{args: []string{"use-context"}, wantErr: "needs a context name or --top-level"},
		{args: []string{"delete-context", "kind-dev"}, wantErr: "client config " + path + `: context "kind-dev": no such context`},
		{args: []string{"current-context"}, stdout: "kind-prod\n"},
	} {
		res := runConfig(t, path, step.args...)
		if step.wantErr != "" {
			if res.code == 0 || !strings.Contains(res.stderr, step.wantErr) {
				t.Fatalf("ate config %v: exit %d, stderr %q; want %q", step.args, res.code, res.stderr, step.wantErr)
			}
			continue
		}
		if res.code != 0 || res.stdout != step.stdout {
			t.Fatalf("ate config %v: exit %d, stdout %q, stderr %q; want stdout %q", step.args, res.code, res.stdout, res.stderr, step.stdout)
		}
	}
	checkFile(t, path, &ateconfig.File{Config: local, CurrentContext: "kind-prod", Contexts: []ateconfig.Context{
		{Name: "kind-prod", Config: ateconfig.Config{CertificateAuthority: ca, Token: "rotated"}},
		{Name: "staging", Config: ateconfig.Config{Server: "ate.staging:7070"}},
	}})

	// Deleting the current context goes back to the top-level settings.
	if res := runConfig(t, path, "delete-context", "kind-prod"); res.code != 0 ||
		res.stdout != `Deleted context "kind-prod" from `+path+".\nIt was the current context: the top-level settings are used now.\n" {
		t.Fatalf("delete-context: %+v", res)
	}
	if res := runConfig(t, path, "use-context", "staging"); res.code != 0 {
		t.Fatalf("use-context: %+v", res)
	}
	if res := runConfig(t, path, "use-context", "--top-level"); res.code != 0 || res.stdout != "Switched to the top-level settings of "+path+".\n" {
		t.Fatalf("use-context --top-level: %+v", res)
	}
	checkFile(t, path, &ateconfig.File{Config: local, Contexts: []ateconfig.Context{
		{Name: "staging", Config: ateconfig.Config{Server: "ate.staging:7070"}},
	}})
}

// runConfig runs `ate config --config path args...`.
func runConfig(t *testing.T, path string, args ...string) result {
	t.Helper()
	root := NewRootCommand(WithGetenv(func(string) string { return "" }), WithNow(func() time.Time { return testNow }))
	var stdout, stderr bytes.Buffer
	root.SetOut(&stdout)
	root.SetErr(&stderr)
	root.SetArgs(append([]string{"config", "--config", path}, args...))
	code := Main(t.Context(), root)
	return result{stdout: stdout.String(), stderr: stderr.String(), code: code}
}

// checkFile checks that path holds want and is readable by its owner only
// (it holds tokens).
func checkFile(t *testing.T, path string, want *ateconfig.File) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != fs.FileMode(0o600) {
		t.Errorf("%s mode %v, want 0600", path, fi.Mode().Perm())
	}
	got, err := ateconfig.LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got.Config != want.Config || got.CurrentContext != want.CurrentContext || !slices.Equal(got.Contexts, want.Contexts) {
		t.Errorf("file %+v\nwant %+v", got, want)
	}
}
