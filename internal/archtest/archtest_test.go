// Package archtest checks the boundaries and vocabulary rules of
// docs/architecture.md that the compiler does not: which package may
// depend on which (the layer table, layers_test.go), which files may
// import gRPC, and where the domain words may be spelled as literals.
package archtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// repo is the module root, relative to this package.
const repo = "../.."

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

// wordRule: words spelled as Go string literals only in their enum's
// file, within dirs (tests excluded everywhere). allow lists the places
// where one of the words means something else.
type wordRule struct {
	name  string
	words []string
	enum  string   // the file of the enum's String and Parse
	use   string   // what to use instead, for the message
	dirs  []string // where the rule holds
	allow []allowed
}

// allowed is a literal word that is not the enum's, in file, inside the
// declaration decl (a function, or a constant or variable), and why.
type allowed struct {
	file, word, decl, why string
}

// everywhere is the code the repository-wide rules cover.
var everywhere = []string{"internal", "cmd"}

var wordRules = []wordRule{
	{name: "checkpoint action", words: []string{"pause", "suspend"}, enum: "internal/checkpoint/action.go",
		use: "checkpoint.Action", dirs: everywhere,
		allow: []allowed{{"internal/sandbox/gvisor/runsc.go", "pause", "runscPause",
			"runsc's subcommand that freezes a container in place, not a checkpoint action"}}},
	{name: "snapshot scope", words: []string{"Full", "Data"}, enum: "internal/snapshot/snapshot.go",
		use: "snapshot.Scope", dirs: everywhere},
	{name: "sandbox class", words: []string{"gvisor", "fake"}, enum: "internal/nodeapi/class.go",
		use: "nodeapi.Class", dirs: everywhere,
		allow: []allowed{{"internal/sandbox/fake/pipe.go", "fake", "String",
			"the network name of the fake runtime's in-memory connections (net.Addr), not a class"}}},
	{name: "activation kind", words: []string{"warm", "resumed", "joined"}, enum: "internal/activation/activation.go",
		use: "activation.Kind", dirs: everywhere,
		allow: []allowed{{"internal/cli/lifecycle.go", "resumed", "actorVerbs",
			"the resume verb's past participle in the CLI's output, not how a request found its actor"}}},
	// The phases of templates, workers and nodes are the API's enums
	// (api/ate/v1, outside the dirs walked); clients compare those, and
	// read an older server's phase_name through atev1's PhaseOrName. Only
	// the unambiguous names are checked: READY, FAILED, FREE and PENDING
	// are also other things' words (alarm states, a table's FREE column).
	{name: "template, worker and node phase", words: []string{"BUILDING", "CLAIMED", "DRAINING", "LOST"},
		enum: "api/ate/v1/control.pb.go", use: "atev1.ActorTemplateStatus_Phase, atev1.Worker_Phase or atev1.Node_Phase",
		dirs: everywhere,
		allow: []allowed{{"internal/store/store.go", "BUILDING", "TemplateBuilding",
			"the record store's persisted template phase (JSON records), converted to the enum by name in internal/apiserver"}}},
	// ate_lifecycle_actors's state values are the store's states, lower
	// case; elsewhere "running" or "suspended" are everyday words.
	{name: "actor state in metrics", words: []string{"suspended", "resuming", "running", "suspending", "pausing", "paused", "crashed", "deleting",
		"SUSPENDED", "RESUMING", "RUNNING", "SUSPENDING", "PAUSING", "PAUSED", "CRASHED", "DELETING"},
		enum: "internal/store/store.go", use: "store.ActorStates", dirs: []string{"internal/metrics"}},
	// "paused" and "golden" are everyday words elsewhere (the node's paused
	// snapshot directory, the CLI's past participles, a template's
	// newActors value in internal/bench); the restore source is decided
	// in lifecycle and counted in metrics, so the rule holds there.
	{name: "restore source", words: []string{"paused", "durable", "golden", "cold"}, enum: "internal/checkpoint/source.go",
		use: "checkpoint.Source", dirs: []string{"internal/lifecycle", "internal/metrics"},
		allow: []allowed{
			{"internal/lifecycle/resume.go", "golden", "NewActorsGolden",
				"a template's newActors value (the API's word), not what a resume restored"},
			{"internal/lifecycle/resume.go", "paused", "resumeLocked",
				`the "actor resumed" log record's key for whether the resume was from a paused checkpoint`},
		}},
}

// TestDomainWordsOnlyInTheirEnums: the checkpoint action, the snapshot
// scope, the sandbox class, the router's activation kind, the phases of
// templates, workers and nodes, and a resume's restore source are
// spelled as string literals only in their enums' String and Parse;
// everything else goes through the types.
func TestDomainWordsOnlyInTheirEnums(t *testing.T) {
	for _, r := range wordRules {
		t.Run(r.name, func(t *testing.T) {
			used := map[allowed]bool{}
			for _, dir := range r.dirs {
				checkWords(t, r, dir, used)
			}
			for _, a := range r.allow {
				if !used[a] {
					t.Errorf("%s: no literal %q in %s any more; drop the exception", a.file, a.word, a.decl)
				}
			}
		})
	}
}

// checkWords reports every literal of r's words in dir's non-test Go
// files, except in r.enum and where r.allow allows it, marking in used
// the exceptions it met.
func checkWords(t *testing.T, r wordRule, dir string, used map[allowed]bool) {
	t.Helper()
	err := filepath.WalkDir(filepath.Join(repo, dir), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return err
		}
		rel, _ := filepath.Rel(repo, p)
		rel = filepath.ToSlash(rel)
		if rel == r.enum {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			// names: the enclosing declarations' names, innermost last.
			names := []string{declName(decl)}
			ast.Inspect(decl, func(n ast.Node) bool {
				switch n := n.(type) {
				case nil:
					names = names[:len(names)-1]
					return true
				case *ast.ValueSpec:
					if len(n.Names) == 1 {
						names = append(names, n.Names[0].Name)
						return true
					}
				case *ast.BasicLit:
					v, err := strconv.Unquote(n.Value)
					if err != nil || n.Kind != token.STRING || !slices.Contains(r.words, v) {
						break
					}
					if i := slices.IndexFunc(r.allow, func(a allowed) bool {
						return a.file == rel && a.word == v && a.decl == names[len(names)-1]
					}); i >= 0 {
						used[r.allow[i]] = true
					} else {
						t.Errorf("%s: literal %s; use %s", fset.Position(n.Pos()), n.Value, r.use)
					}
				}
				names = append(names, names[len(names)-1])
				return true
			})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// declName is the name of a top-level function, or of a declaration's
// only constant, variable or type; "" otherwise.
func declName(d ast.Decl) string {
	switch d := d.(type) {
	case *ast.FuncDecl:
		return d.Name.Name
	case *ast.GenDecl:
		if len(d.Specs) == 1 {
			switch s := d.Specs[0].(type) {
			case *ast.ValueSpec:
				if len(s.Names) == 1 {
					return s.Names[0].Name
				}
			case *ast.TypeSpec:
				return s.Name.Name
			}
		}
	}
	return ""
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
