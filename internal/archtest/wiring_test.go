package archtest

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// maxWiringLines bounds a function of internal/up, counted from func to
// its closing brace: enough to list one component's parts, too few to
// hide a retry loop, a lease or a policy among them.
const maxWiringLines = 60

// TestUpOnlyWires: internal/up constructs and connects; the logic lives
// with its domain (the installation lease in store, the orphan window in
// lifecycle, the authorizer in auth, the egress deny prefixes in egress).
// A function over maxWiringLines there is either logic that belongs in
// its domain's package or assembly that wants splitting into named
// steps.
func TestUpOnlyWires(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(repo, "internal/up/*.go"))
	if err != nil {
		t.Fatal(err)
	}
	// No files would check nothing and pass.
	if len(files) == 0 {
		t.Fatal("no internal/up/*.go files found")
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		fset := token.NewFileSet()
		file, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			start, end := fset.Position(fn.Pos()), fset.Position(fn.End())
			if n := end.Line - start.Line + 1; n > maxWiringLines {
				t.Errorf("internal/up/%s:%d: %s is %d lines, over %d: move its logic to its domain's package or split it into named assembly steps",
					filepath.Base(f), start.Line, funcName(fn), n, maxWiringLines)
			}
		}
	}
}

// funcName is fn's name, with its receiver's type for a method
// ("(*ControlPlane).Start").
func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	var recv string
	switch t := fn.Recv.List[0].Type.(type) {
	case *ast.StarExpr:
		if id, ok := t.X.(*ast.Ident); ok {
			recv = "*" + id.Name
		}
	case *ast.Ident:
		recv = t.Name
	}
	return fmt.Sprintf("(%s).%s", recv, fn.Name.Name)
}
