// Package archtest checks the boundaries and vocabulary rules of
// docs/architecture.md that the compiler does not: which package may
// import which, and where the domain words may be spelled as literals.
package archtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// repo is the module root, relative to this package.
const repo = "../.."

// TestNodeDoesNotImportRouter: the worker tunnel's protocol lives in
// tunnelproto, so the node agent can leave the router's process.
func TestNodeDoesNotImportRouter(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "substrate.dev/ate/internal/node").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if dep == "substrate.dev/ate/internal/router" {
			t.Fatal("internal/node depends on internal/router")
		}
	}
}

// TestBinaryHasNoTestControlPlane: the controller's test control plane
// (k8stest, controller-runtime's envtest) stays out of the ate binary.
func TestBinaryHasNoTestControlPlane(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "substrate.dev/ate/cmd/ate").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if dep == "substrate.dev/ate/internal/k8s/k8stest" || strings.HasPrefix(dep, "sigs.k8s.io/controller-runtime/pkg/envtest") {
			t.Errorf("cmd/ate depends on %s", dep)
		}
	}
}

// TestRouterCoreIsTransportFree: only the router's gRPC adapter imports
// gRPC; the core, its error map and its fakes speak router errors.
func TestRouterCoreIsTransportFree(t *testing.T) {
	adapter := []string{"control.go"}
	files, err := filepath.Glob(filepath.Join(repo, "internal/router/*.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		name := filepath.Base(f)
		if strings.HasSuffix(name, "_test.go") || slices.Contains(adapter, name) {
			continue
		}
		for _, imp := range imports(t, f) {
			if strings.HasPrefix(imp, "google.golang.org/grpc") {
				t.Errorf("internal/router/%s imports %s; only %v may", name, imp, adapter)
			}
		}
	}
}

// TestDomainWordsOnlyInTheirEnums: the checkpoint action and the snapshot
// scope are spelled as string literals only in their enums' String and
// Parse; everything else goes through the types.
func TestDomainWordsOnlyInTheirEnums(t *testing.T) {
	words := map[string]bool{"pause": true, "suspend": true, "Full": true, "Data": true}
	enums := map[string]bool{"internal/checkpoint/action.go": true, "internal/snapshot/snapshot.go": true}
	for _, dir := range []string{"internal", "cmd"} {
		err := filepath.WalkDir(filepath.Join(repo, dir), func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return err
			}
			rel, _ := filepath.Rel(repo, p)
			if enums[filepath.ToSlash(rel)] {
				return nil
			}
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			ast.Inspect(f, func(n ast.Node) bool {
				if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					if v, err := strconv.Unquote(lit.Value); err == nil && words[v] {
						t.Errorf("%s: literal %s; use checkpoint.Action or snapshot.Scope", fset.Position(lit.Pos()), lit.Value)
					}
				}
				return true
			})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

func imports(t *testing.T, file string) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.ImportsOnly)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		out = append(out, p)
	}
	return out
}
