package up

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"substrate.dev/ate/internal/node"
	"substrate.dev/ate/internal/pki"
	"substrate.dev/ate/internal/runtimeasset"
	"substrate.dev/ate/internal/sandbox/gvisor"
)

func TestNodeAgentConfigRunscFlags(t *testing.T) {
	asset := []runtimeasset.Asset{{Name: "runsc", Architecture: runtime.GOARCH, URL: "file:///opt/runsc",
		SHA256: strings.Repeat("0", 64)}}
	for _, tc := range []struct {
		name string
		cfg  NodeAgentConfig
		err  string
	}{
		{"neither", NodeAgentConfig{}, ""},
		{"--runsc", NodeAgentConfig{Gvisor: gvisor.Config{RunscPath: "/opt/runsc"}}, ""},
		{"--runsc-asset", NodeAgentConfig{RunscAssets: asset}, ""},
		{"both", NodeAgentConfig{Gvisor: gvisor.Config{RunscPath: "/opt/runsc"}, RunscAssets: asset},
			"--runsc and --runsc-asset are both given"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.API, tc.cfg.DataDir = "127.0.0.1:1", t.TempDir()
			_, err := tc.cfg.withDefaults()
			if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("withDefaults = %v, want error containing %q", err, tc.err)
			}
		})
	}
}

// TestRunNodeRunscAsset checks that the node resolves runsc before it
// opens anything else, and stops there when the asset is refused.
func TestRunNodeRunscAsset(t *testing.T) {
	src := filepath.Join(t.TempDir(), "runsc")
	content := []byte("not really runsc")
	if err := os.WriteFile(src, content, 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(content)
	good := hex.EncodeToString(sum[:])
	other := "amd64"
	if runtime.GOARCH == "amd64" {
		other = "arm64"
	}
	for _, tc := range []struct {
		name   string
		class  string
		assets []runtimeasset.Asset
		err    string // empty: resolveRunsc succeeds
		want   string // the RunscPath resolveRunsc returns, below the data dir
	}{
		{"verified", DefaultSandboxClass, []runtimeasset.Asset{{Name: "runsc", Architecture: runtime.GOARCH, URL: "file://" + src, SHA256: good}},
			"", filepath.Join("runtime", good, "runsc")},
		{"fake class fetches nothing", "fake", []runtimeasset.Asset{{Name: "runsc", Architecture: runtime.GOARCH, URL: "file:///nonexistent", SHA256: good}},
			"", ""},
		{"digest mismatch", DefaultSandboxClass, []runtimeasset.Asset{{Name: "runsc", Architecture: runtime.GOARCH, URL: "file://" + src, SHA256: strings.Repeat("0", 64)}},
			"--runsc-asset: runsc from file://" + src + " has sha256 " + good, ""},
		{"other architecture only", DefaultSandboxClass, []runtimeasset.Asset{{Name: "runsc", Architecture: other, URL: "file://" + src, SHA256: good}},
			"--runsc-asset: no runsc for this machine's architecture " + runtime.GOARCH + " (given: " + other + ")", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dataDir := t.TempDir()
			cfg := NodeAgentConfig{API: "127.0.0.1:1", DataDir: dataDir, TLS: pki.Settings{Insecure: true}, Node: node.Config{SandboxClass: tc.class}, RunscAssets: tc.assets}
			if tc.err != "" {
				err := RunNode(t.Context(), cfg)
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("RunNode = %v, want error containing %q", err, tc.err)
				}
				// Refused before the snapshot stores (and so before any
				// sandbox) were opened.
				for _, d := range []string{"snapshots", "paused"} {
					if _, err := os.Stat(filepath.Join(dataDir, d)); !errors.Is(err, fs.ErrNotExist) {
						t.Errorf("%s exists after a refused runsc (%v)", d, err)
					}
				}
				return
			}
			gc, err := resolveRunsc(t.Context(), cfg, orDiscard(nil))
			if err != nil {
				t.Fatal(err)
			}
			if want := filepath.Join(dataDir, tc.want); tc.want != "" && gc.RunscPath != want || tc.want == "" && gc.RunscPath != "" {
				t.Fatalf("RunscPath %q, want %q", gc.RunscPath, tc.want)
			}
		})
	}
}
