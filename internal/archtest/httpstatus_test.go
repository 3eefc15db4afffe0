package archtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// domainDirs are the domain packages, each with the packages under it:
// they decide, and return results and errors; the edges turn those into
// transport answers — internal/apiserver (toStatus to gRPC codes,
// selfStatus to the self-service's HTTP statuses), the router, the
// node's endpoints and the node protocol. From the layer table: the
// control plane without its edges (apiserver, router, dashboard, the
// Kubernetes controller), and the shared words the edges map (the record
// and snapshot stores with their backends, checkpoint, the node
// contract, names, images).
var domainDirs = []string{"internal/lifecycle", "internal/alarm", "internal/identity",
	"internal/store", "internal/snapshot", "internal/checkpoint", "internal/nodeapi",
	"internal/names", "internal/image"}

// statusAllowed is a declaration of a domain package that answers with
// HTTP statuses, in file, and why.
type statusAllowed struct {
	file, decl, why string
}

var statusAllowedIn = []statusAllowed{
	{"internal/identity/discovery.go", "(*Issuer).Handler",
		"the OpenID Connect discovery document and JWKS are HTTP resources by the protocol's definition: an HTTP server kept with the keys it publishes, mounted by the API server's HTTP listener"},
}

// TestDomainAnswersNoHTTPStatus: the domain packages produce no HTTP
// status — no net/http Status* constant (or StatusText) outside a
// comparison — so a status is chosen in one place at the edge, from the
// domain's typed errors. Reading a status is not producing one: a client
// comparing the answer it got (res.StatusCode == http.StatusOK, a switch
// case) is fine, as alarm delivery and the image registry client do. A
// status spelled as a number escapes the rule; none is, and review
// keeps it so.
func TestDomainAnswersNoHTTPStatus(t *testing.T) {
	used := map[statusAllowed]bool{}
	for _, dir := range domainDirs {
		err := filepath.WalkDir(filepath.Join(repo, dir), func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && d.Name() == "testdata" {
				return filepath.SkipDir
			}
			if d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return nil
			}
			rel, _ := filepath.Rel(repo, p)
			checkStatuses(t, filepath.ToSlash(rel), p, used)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, a := range statusAllowedIn {
		if !used[a] {
			t.Errorf("%s: %s produces no HTTP status any more; drop the exception", a.file, a.decl)
		}
	}
}

// checkStatuses reports each net/http status constant file p (rel from
// the module root) produces, except in statusAllowedIn's declarations,
// marking in used the exceptions it met.
func checkStatuses(t *testing.T, rel, p string, used map[statusAllowed]bool) {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	httpName := ""
	for _, imp := range f.Imports {
		if path, _ := strconv.Unquote(imp.Path.Value); path != "net/http" {
			continue
		}
		httpName = "http"
		if imp.Name != nil {
			httpName = imp.Name.Name
		}
	}
	switch httpName {
	case "", "_":
		return
	case ".":
		t.Errorf("%s: net/http imported with a dot; its status constants would not show", rel)
		return
	}
	for _, decl := range f.Decls {
		name := declName(decl)
		if fn, ok := decl.(*ast.FuncDecl); ok {
			name = funcName(fn)
		}
		var parents []ast.Node
		ast.Inspect(decl, func(n ast.Node) bool {
			if n == nil {
				parents = parents[:len(parents)-1]
				return true
			}
			if sel, ok := n.(*ast.SelectorExpr); ok && isStatus(sel, httpName) && !isComparison(sel, parents[len(parents)-1]) {
				allowed := false
				for _, a := range statusAllowedIn {
					if a.file == rel && a.decl == name {
						used[a], allowed = true, true
					}
				}
				if !allowed {
					t.Errorf("%s: %s.%s in %s: return a typed error (or result) and let the edge choose the status (internal/apiserver/errors.go)",
						fset.Position(sel.Pos()), httpName, sel.Sel.Name, name)
				}
			}
			parents = append(parents, n)
			return true
		})
	}
}

// isStatus reports whether sel is net/http's Status* (imported as
// httpName).
func isStatus(sel *ast.SelectorExpr, httpName string) bool {
	x, ok := sel.X.(*ast.Ident)
	return ok && x.Name == httpName && strings.HasPrefix(sel.Sel.Name, "Status")
}

// isComparison reports whether e, a child of parent, is compared there:
// an operand of ==, !=, <, <=, > or >=, or a switch case's value.
func isComparison(e ast.Expr, parent ast.Node) bool {
	switch p := parent.(type) {
	case *ast.BinaryExpr:
		switch p.Op {
		case token.EQL, token.NEQ, token.LSS, token.LEQ, token.GTR, token.GEQ:
			return true
		}
	case *ast.CaseClause:
		for _, v := range p.List {
			if v == e {
				return true
			}
		}
	}
	return false
}
