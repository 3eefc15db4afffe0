package v1alpha1_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"substrate.dev/ate/internal/k8s/k8stest"
)

// `make generate` reproduces the deepcopy code and the CRDs: controller-gen
// (pinned by hack/install-kube.sh) run into a scratch directory writes
// exactly the committed files. A types change without `make generate`
// fails here.
func TestGeneratedFilesAreCurrent(t *testing.T) {
	gen := filepath.Join(k8stest.BinDir(), "controller-gen")
	if _, err := os.Stat(gen); err != nil {
		t.Fatalf("controller-gen not built (%v): run hack/install-kube.sh", err)
	}
	root := k8stest.RepoRoot()
	out := t.TempDir()
	cmd := exec.Command(gen, "object", "paths=./pkg/apis/...", "output:object:dir="+out,
		"crd", "paths=./pkg/apis/...", "output:crd:dir="+filepath.Join(out, "crds"))
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("controller-gen: %v\n%s", err, b)
	}
	files := map[string]string{
		"zz_generated.deepcopy.go":                   "pkg/apis/ate/v1alpha1/zz_generated.deepcopy.go",
		"crds/ate.substrate.dev_workerpools.yaml":    "deploy/crds/ate.substrate.dev_workerpools.yaml",
		"crds/ate.substrate.dev_sandboxconfigs.yaml": "deploy/crds/ate.substrate.dev_sandboxconfigs.yaml",
	}
	for gotPath, committed := range files {
		got, err := os.ReadFile(filepath.Join(out, gotPath))
		if err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(filepath.Join(root, committed))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is not what controller-gen generates from the types: run make generate", committed)
		}
	}
	entries, err := os.ReadDir(filepath.Join(out, "crds"))
	if err != nil || len(entries) != 2 {
		t.Fatalf("controller-gen wrote %d CRDs (%v), the test knows 2: add the new one above", len(entries), err)
	}
}
