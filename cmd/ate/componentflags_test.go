package main

import (
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// apart are the flags of a separate component that `ate up` does not
// share: it has none of that name, or its namesake is another thing.
// Every other flag of `ate apiserver`, `ate node` and `ate router` must
// mean the same in `ate up` (TestComponentFlagsInUp).
var apart = map[string]map[string]string{
	"apiserver": {
		"data-dir":             "holds another thing: ate up's holds the store, snapshots and node state (default $HOME/.ate), the API server's only caches (default $HOME/.ate-apiserver)",
		"listen":               "ate up names its listeners by component: --api-addr",
		"management-addr":      "ate up has one management listener, --metrics-addr, on loopback by default",
		"tls-dir":              "ate up issues its components' certificates from its own CA (<data-dir>/pki)",
		"insecure":             "ate up issues its components' certificates from its own CA (<data-dir>/pki)",
		"snapshots":            "ate up keeps snapshots in <data-dir>/snapshots; only nodes on other machines need a store they share",
		"lease-duration":       "workflow leases only decide takeovers between API server replicas; ate up is the only one over its store (its installation lease)",
		"lease-renew-interval": "workflow leases only decide takeovers between API server replicas; ate up is the only one over its store (its installation lease)",
		"lease-jitter":         "workflow leases only decide takeovers between API server replicas; ate up is the only one over its store (its installation lease)",
		"snapshot-gc-interval": "repeats the collection while a dead predecessor's remote nodes may still finish snapshots; ate up's node dies with it, so it collects once at start",
		"node-signer-dir":      "signs worker Pods' node certificates for their ServiceAccount tokens; ate up's node gets its certificate from ate up's own CA",
		"node-token-audience":  "signs worker Pods' node certificates for their ServiceAccount tokens; ate up's node gets its certificate from ate up's own CA",
		"node-cert-ttl":        "signs worker Pods' node certificates for their ServiceAccount tokens; ate up's node gets its certificate from ate up's own CA",
		"kubeconfig":           "the cluster worker Pods' tokens are reviewed in; ate up runs no worker Pods",
	},
	"node": {
		"api":                  "ate up's node belongs to the API server beside it",
		"data-dir":             "holds another thing: ate up's holds the store, snapshots and node state (default $HOME/.ate), the node's only its own (default $HOME/.ate-node)",
		"name":                 "a node's identity among a cluster's; ate up's one node is up.DefaultNodeName",
		"advertise":            "where other machines reach a node; nothing off the machine reaches ate up's (its tunnel: --tunnel-addr)",
		"agent-port":           "the NodeAgent service remote API servers call; ate up's API server calls its node in process",
		"tunnel-port":          "ate up names its listeners by component: --tunnel-addr",
		"management-addr":      "ate up has one management listener, --metrics-addr, on loopback by default",
		"snapshots":            "ate up's node writes the API server's own snapshot directory, <data-dir>/snapshots",
		"snapshot-cache-bytes": "bounds the cache of snapshots downloaded from a remote store; ate up's node reads its local one in place",
		"runsc-asset":          "fetches a fleet's runsc by URL (ate controller sets it on worker Pods); ate up runs --runsc",
		"drain-timeout":        "bounds the API server checkpointing a leaving node's actors; ate up's --drain-timeout is the router's, and it suspends its actors itself once the router drained",
		"tls-dir":              "ate up issues its components' certificates from its own CA (<data-dir>/pki)",
		"insecure":             "ate up issues its components' certificates from its own CA (<data-dir>/pki)",
		"tls-bootstrap-dir":    "ate up issues its components' certificates from its own CA (<data-dir>/pki)",
	},
	"router": {
		"api":             "ate up's router asks the API server beside it",
		"listen":          "ate up names its listeners by component: --router-addr",
		"management-addr": "ate up has one management listener, --metrics-addr, on loopback by default",
		"tls-dir":         "ate up issues its components' certificates from its own CA (<data-dir>/pki)",
		"insecure":        "ate up issues its components' certificates from its own CA (<data-dir>/pki)",
	},
}

// otherDefaultInUp are the shared flags whose default `ate up` has its
// own; name, help and type must still agree.
var otherDefaultInUp = map[string]string{
	"image-root": "ate up reads images where hack/build-examples.sh writes them (up.DefaultUpImageRoot), the components where the ate container image carries them (up.DefaultImageRoot)",
	"http-addr":  "ate up serves its dashboard on loopback by default (up.DefaultHTTPAddr); a cluster's API server only where told",
	"node-lost-after": "ate up's node is in its process, so a long lease fences nothing sooner and rides out the process's own stalls (up.InProcessLostAfter); " +
		"a cluster's nodes are lost within seconds (nodeagent.DefaultLostAfter)",
}

// onlyInUp are `ate up`'s flags no component has.
var onlyInUp = map[string]string{
	"api-addr":      "ate up's listeners, named by component (the components': --listen, --tunnel-port)",
	"router-addr":   "ate up's listeners, named by component (the components': --listen, --tunnel-port)",
	"tunnel-addr":   "ate up's listeners, named by component (the components': --listen, --tunnel-port)",
	"metrics-addr":  "ate up's one management listener (the components': --management-addr)",
	"demo":          "ate up's demo template and actor",
	"demo-template": "ate up's demo template and actor",
	"cert-ttl":      "the life of the leaves ate up's own CA issues (hidden, for rotation tests)",
}

// commonFlags are every server command's (componentCommand): compared
// like the rest, never excused.
var commonFlags = []string{flagConfigFile, "log-level"}

// TestComponentFlagsInUp: each flag of `ate apiserver`, `ate node` and
// `ate router` means the same in `ate up` — name, default, help and type
// — unless the tables above say why not, and `ate up`'s flags are its
// parts' (or its own, as onlyInUp says).
func TestComponentFlagsInUp(t *testing.T) {
	upFlags := upCommand(nil).Flags()
	components := []struct {
		name string
		cmd  *cobra.Command
	}{
		{"apiserver", apiserverCommand()},
		{"node", nodeCommand()},
		{"router", routerCommand()},
	}
	inComponent := map[string]bool{}
	for _, c := range components {
		t.Run(c.name, func(t *testing.T) {
			flags, except := c.cmd.Flags(), apart[c.name]
			for name, why := range except {
				if flags.Lookup(name) == nil {
					t.Errorf("apart names --%s, which ate %s does not have (%s)", name, c.name, why)
				}
			}
			for _, name := range commonFlags {
				if flags.Lookup(name) == nil || upFlags.Lookup(name) == nil {
					t.Errorf("--%s is not on both ate %s and ate up", name, c.name)
				}
				if _, ok := except[name]; ok {
					t.Errorf("common flag --%s is in apart", name)
				}
			}
			flags.VisitAll(func(f *pflag.Flag) {
				inComponent[f.Name] = true
				if _, ok := except[f.Name]; ok {
					return
				}
				t.Run(f.Name, func(t *testing.T) {
					u := upFlags.Lookup(f.Name)
					if u == nil {
						t.Fatalf("ate up has no --%s", f.Name)
					}
					if _, ok := otherDefaultInUp[f.Name]; !ok && u.DefValue != f.DefValue {
						t.Errorf("default %q, ate up's %q", f.DefValue, u.DefValue)
					}
					if u.Usage != f.Usage {
						t.Errorf("help\n  %q\nate up's\n  %q", f.Usage, u.Usage)
					}
					if u.Value.Type() != f.Value.Type() {
						t.Errorf("type %s, ate up's %s", f.Value.Type(), u.Value.Type())
					}
				})
			})
		})
	}
	for name := range otherDefaultInUp {
		if !inComponent[name] || upFlags.Lookup(name) == nil {
			t.Errorf("otherDefaultInUp names --%s, which is not on ate up and a component", name)
		}
	}
	upFlags.VisitAll(func(f *pflag.Flag) {
		_, own := onlyInUp[f.Name]
		switch {
		case !inComponent[f.Name] && !own:
			t.Errorf("ate up --%s is no component's: define it in their flag function, or say in onlyInUp why only ate up has it", f.Name)
		case inComponent[f.Name] && own:
			t.Errorf("onlyInUp names --%s, which a component has", f.Name)
		}
	})
	for name := range onlyInUp {
		if upFlags.Lookup(name) == nil {
			t.Errorf("onlyInUp names --%s, which ate up does not have", name)
		}
	}
}
