package archtest

import (
	"bufio"
	"bytes"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// module is the module path; a pattern without a dot in its first
// element is relative to it.
const module = "substrate.dev/ate"

// layerRule: no package matching importers depends on a package matching
// forbidden, directly or through others (the non-test code's go list
// -deps: a rule on direct imports alone would let a shared package carry
// the forbidden one in, as execio carried sandbox into the CLI). A
// pattern is an import path, or a path ending in "/..." for it and
// everything under it.
type layerRule struct {
	name      string
	importers []string
	forbidden []string
	why       string
}

// controlPlane is everything above the node contract (internal/nodeapi):
// the workflows, the Control API and what serves beside it, the router,
// the record store's backends and the Kubernetes controller. The record
// store's own package (internal/store: records, errors) is shared, since
// a node reports its workers as store.Worker; internal/auth too, since
// the components' mTLS identities (internal/pki) are its.
var controlPlane = []string{"internal/lifecycle", "internal/apiserver", "internal/alarm", "internal/identity",
	"internal/router", "internal/dashboard", "internal/k8s/controller", "internal/k8s/workeridentity",
	"internal/store/bolt", "internal/store/postgres/...", "internal/store/storeurl", "internal/store/storetest"}

// nodeImplementation is what runs actors on a machine. The egress
// policy (internal/egress) and image references (internal/image) are
// not in it: the API server validates templates with them too.
var nodeImplementation = []string{"internal/node", "internal/sandbox/...", "internal/netns"}

// serverOnly is what only the servers run; the CLI links none of it.
// Left out: the wire (api/ate/v1), the record and snapshot types it
// prints or sends (store, snapshot, checkpoint, names, actorlog), the
// node contract's words (nodeapi: an exec's window sizes), and the
// client side of transport and auth (apidial, ateconfig, pki, auth).
var serverOnly = []string{"internal/apiserver", "internal/lifecycle", "internal/alarm", "internal/identity",
	"internal/router", "internal/dashboard", "internal/nodeagent", "internal/node", "internal/sandbox/...",
	"internal/netns", "internal/egress/...", "internal/image", "internal/metrics", "internal/httpserve/...",
	"internal/coalesce", "internal/runner", "internal/runtimeasset", "internal/up", "internal/k8s/controller", "internal/k8s/workeridentity",
	"internal/store/bolt", "internal/store/postgres/...", "internal/store/storeurl", "internal/snapshot/s3/...",
	"internal/snapshot/storeurl"}

var layerRules = []layerRule{
	{name: "control plane ↛ node implementation and transport", importers: append(slices.Clip(controlPlane), "internal/store"),
		forbidden: append(slices.Clip(nodeImplementation), "internal/nodeagent"),
		why:       "the control plane reaches a node only through internal/nodeapi; internal/up and cmd/ate wire in the node protocol's client"},
	{name: "node implementation ↛ control plane", importers: nodeImplementation, forbidden: controlPlane,
		why: "a node runs in its own process and speaks to the API server only over the node protocol; the worker tunnel's words are internal/tunnelproto's"},
	{name: "node protocol ↛ API server", importers: []string{"internal/nodeagent"},
		forbidden: []string{"internal/apiserver", "internal/lifecycle"},
		why:       "the protocol speaks internal/nodeapi on both sides (Remote is a Node, Server serves one, Registry calls the workflows' Events); only internal/up wires it to the API server's packages"},
	{name: "cli ↛ server packages", importers: []string{"internal/cli"}, forbidden: serverOnly,
		why: "the ate client speaks the Control API; the words it shares with the servers live in api/ate/v1, internal/nodeapi and the record and snapshot types"},
	{name: "ate binary ↛ test control plane", importers: []string{"cmd/ate"},
		forbidden: []string{"internal/k8s/k8stest", "sigs.k8s.io/controller-runtime/pkg/envtest/..."},
		why:       "k8stest and controller-runtime's envtest run a kube-apiserver for tests; they stay out of the ate binary"},
}

// TestLayers checks each layer rule: an offending package is reported
// with one chain of imports from it to what it may not depend on.
func TestLayers(t *testing.T) {
	g := importGraph(t)
	for _, r := range layerRules {
		t.Run(r.name, func(t *testing.T) {
			for _, pat := range r.importers {
				pkgs := g.matching(pat)
				if len(pkgs) == 0 {
					t.Errorf("no package matches importer %s; fix the rule", pat)
				}
				for _, p := range pkgs {
					for _, dep := range g.deps[p] {
						if matchAny(r.forbidden, dep) {
							t.Errorf("%s depends on %s (%s): %s", short(p), short(dep), strings.Join(g.chain(p, dep), " → "), r.why)
						}
					}
				}
			}
		})
	}
}

// graph is the module's packages with their direct imports and all their
// dependencies (non-test code).
type graph struct {
	imports, deps map[string][]string
}

func importGraph(t *testing.T) graph {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}|{{join .Imports \" \"}}|{{join .Deps \" \"}}", "./...")
	cmd.Dir = repo
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	g := graph{imports: map[string][]string{}, deps: map[string][]string{}}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		f := strings.Split(sc.Text(), "|")
		if len(f) != 3 {
			t.Fatalf("go list: unexpected line %q", sc.Text())
		}
		g.imports[f[0]], g.deps[f[0]] = strings.Fields(f[1]), strings.Fields(f[2])
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return g
}

// matching returns the packages of the module pat matches, sorted.
func (g graph) matching(pat string) []string {
	var out []string
	for p := range g.deps {
		if strings.HasPrefix(p, module+"/") && match(pat, p) {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// chain returns a shortest import chain from p to dep, both included.
func (g graph) chain(p, dep string) []string {
	prev := map[string]string{p: ""}
	queue := []string{p}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		if cur == dep {
			var out []string
			for ; cur != ""; cur = prev[cur] {
				out = append(out, short(cur))
			}
			slices.Reverse(out)
			return out
		}
		for _, next := range g.imports[cur] {
			if _, seen := prev[next]; !seen {
				prev[next] = cur
				queue = append(queue, next)
			}
		}
	}
	return []string{short(p), "…", short(dep)}
}

// match reports whether pattern pat names import path p.
func match(pat, p string) bool {
	if first, _, _ := strings.Cut(pat, "/"); !strings.Contains(first, ".") {
		pat = module + "/" + pat
	}
	if base, ok := strings.CutSuffix(pat, "/..."); ok {
		return p == base || strings.HasPrefix(p, base+"/")
	}
	return p == pat
}

func matchAny(pats []string, p string) bool {
	return slices.ContainsFunc(pats, func(pat string) bool { return match(pat, p) })
}

// short is p without the module's prefix.
func short(p string) string { return strings.TrimPrefix(p, module+"/") }
