package up

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/auth"
	"substrate.dev/ate/internal/node"
	"substrate.dev/ate/internal/router"
	"substrate.dev/ate/internal/sandbox"
	"substrate.dev/ate/internal/sandbox/gvisor"
)

// Defaults for Config fields left zero. `ate up`'s flags default to the
// same values.
const (
	DefaultAPIAddr    = "127.0.0.1:7070"
	DefaultRouterAddr = "127.0.0.1:8080"
	// DefaultMetricsAddr is `ate up --metrics-addr`'s default: loopback
	// only, since the metrics name templates and actors. A zero
	// MetricsConfig.Addr means no management listener.
	DefaultMetricsAddr = "127.0.0.1:7071"
	// DefaultTunnelAddr lets the system pick the worker tunnel's port:
	// workers record whatever it is, nobody types it.
	DefaultTunnelAddr   = "127.0.0.1:0"
	DefaultWorkers      = 4
	DefaultSandboxClass = string(sandbox.DefaultClass)
	DefaultDemoTemplate = "examples/counter/template.yaml"
	// DefaultNodeName names the one node of `ate up`.
	DefaultNodeName = "local"
	// DefaultDrainDelay is `ate up --drain-delay`'s default, the time a
	// load balancer takes to notice /readyz answering 503. It is not
	// applied to a zero RouterConfig.DrainDelay: zero means no delay
	// (nothing in front to tell).
	DefaultDrainDelay = 5 * time.Second
)

// Config is `ate up`'s configuration: one field per component, each the
// component's own configuration. Run fills in what wiring decides (the
// node's runtime, stores and tunnel address; loggers; the router's
// resolver) and leaves the rest as given, zero fields defaulted
// (withDefaults).
type Config struct {
	// DataDir holds everything `ate up` stores: ate.db, snapshots/,
	// images/, node/ and the client config (config.yaml). Default
	// $HOME/.ate.
	DataDir string
	// Store is the record store (storeurl.Open): empty for <DataDir>/ate.db,
	// or postgres://… (workflows then hold store leases, since other API
	// servers may share the database). With StoreFile it is read as
	// APIServerConfig's (storeurl.Resolve; $ATE_STORE last).
	Store, StoreFile string
	// Ceilings are the operator's bounds on templates; nil bounds
	// nothing (tests; the commands always set them).
	Ceilings *CeilingsConfig
	// ImageRoots are the directories oci: and oci-archive: template
	// images may be read from (--image-root, image.LocalRoots); nil
	// allows any path (`ate up` defaults it to DefaultUpImageRoot), an empty list none.
	ImageRoots []string
	// RegistryCredentials are whose credentials registry pulls use
	// (--registry-credentials, image.ParseCredentials): anonymous, the
	// machine's own, or a directory of one config.json per atespace.
	RegistryCredentials string

	API APIConfig
	// Node is the local node agent. From here Run takes Workers (default
	// DefaultWorkers), WorkerPrefix (default derived from DataDir, so two
	// installations never collide), SandboxClass (gvisor, the default,
	// or fake), Labels, Name (default DefaultNodeName) and NoStandbys;
	// it sets the rest.
	Node node.Config
	// Gvisor configures the workers' runtime when Node.SandboxClass is
	// gvisor. Run sets RootDir (under /run/ate, per WorkerPrefix) and
	// Logger.
	Gvisor  gvisor.Config
	Tunnel  TunnelConfig
	Router  RouterConfig
	Metrics MetricsConfig
	// HTTP is the API server's HTTP listener (the web dashboard).
	HTTP HTTPConfig
	// Identity configures actor identity; its issuer URL defaults to
	// the HTTP listener's.
	Identity IdentityConfig
	Demo     DemoConfig
	// PKI configures the in-process CA and the components' leaves.
	PKI PKIConfig
	// Logger receives every component's records; nil discards.
	Logger *slog.Logger
	// Ready, if set, is called once every component serves.
	Ready func(Info)
}

// APIConfig configures the gRPC Control API server.
type APIConfig struct {
	// Addr is its listen address. Default DefaultAPIAddr.
	Addr string
	// ExpiryInterval is how often the expiry sweep runs
	// (ControlPlaneConfig.ExpiryInterval).
	ExpiryInterval time.Duration
	// Auth adds token files, OIDC and a policy file to the admin token
	// `ate up` always accepts (<data-dir>/admin-token).
	Auth auth.Config
	// MaxStreamsPerCaller bounds the watches and log follows one caller
	// may hold open at once (apiserver.Server.SetMaxStreamsPerCaller);
	// 0 means apiserver.DefaultMaxStreamsPerCaller.
	MaxStreamsPerCaller int
	// Heartbeat and LostAfter: nodeagent.RegistryConfig (zero: its
	// defaults, but LostAfter's is InProcessLostAfter), as
	// APIServerConfig's: the in-process node is subject to them as any
	// node.
	Heartbeat, LostAfter time.Duration
}

// PKIConfig configures `ate up`'s mutual TLS between its components
// (internal/pki): the CA in <DataDir>/pki, created on first start, and
// leaves issued in memory, renewed at two thirds of their life.
type PKIConfig struct {
	// LeafTTL is the life of the components' leaves; default
	// pki.DefaultLeafTTL. Short values exercise rotation (tests).
	LeafTTL time.Duration
	// TrustDomain of the identities; default auth.DefaultTrustDomain.
	TrustDomain string
}

// MetricsConfig configures the management listener: Prometheus metrics
// on /metrics (docs/observability.md), and the pprof listener.
type MetricsConfig struct {
	// Addr is its listen address; port 0 picks one. Empty: no listener,
	// and no metrics are recorded.
	Addr string
	// PprofAddr serves net/http/pprof on /debug/pprof/
	// (httpserve.NewPprof: loopback only); empty means none.
	PprofAddr string
}

// TunnelConfig configures the worker tunnel's listener.
type TunnelConfig struct {
	// Addr is its listen address; port 0 picks one. Default
	// DefaultTunnelAddr.
	Addr string
}

// RouterConfig configures the HTTP router: its listener and drain
// (httpserve.Server) and its handler (router.Config, defaulted by the
// router; Run sets Idler and Activity).
type RouterConfig struct {
	// Addr is its listen address. Default DefaultRouterAddr.
	Addr string
	// DrainDelay and DrainTimeout shape the drain on shutdown
	// (httpserve.Server): zero DrainDelay means none, zero DrainTimeout
	// router.DefaultDrainTimeout.
	DrainDelay   time.Duration
	DrainTimeout time.Duration
	Handler      router.Config
}

// DemoConfig configures `ate up --demo`.
type DemoConfig struct {
	// Enabled creates the template in Template and actor DemoActor once
	// everything serves.
	Enabled bool
	// Template is the template file. Default DefaultDemoTemplate.
	Template string
	// LoadTemplate reads a template file (the CLI's format,
	// cli.LoadTemplateFile); required when Enabled. It is passed in so
	// that this package does not depend on the CLI.
	LoadTemplate func(path string) (*atev1.ActorTemplate, error)
}

// withDefaults returns c with every zero field defaulted and DataDir made
// absolute, or an error for a value no default can mend.
func (c Config) withDefaults() (Config, error) {
	if c.DataDir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return c, fmt.Errorf("data dir: %w", err)
		}
		c.DataDir = filepath.Join(home, ".ate")
	}
	dataDir, err := filepath.Abs(c.DataDir)
	if err != nil {
		return c, fmt.Errorf("data dir: %w", err)
	}
	c.DataDir = dataDir
	if err := checkNodeSettings(c.RegistryCredentials, c.Node); err != nil {
		return c, err
	}
	c.API.Addr = orDefault(c.API.Addr, DefaultAPIAddr)
	if c.API.MaxStreamsPerCaller < 0 {
		return c, fmt.Errorf("max streams per caller %d is negative", c.API.MaxStreamsPerCaller)
	}
	c.Tunnel.Addr = orDefault(c.Tunnel.Addr, DefaultTunnelAddr)
	c.Router.Addr = orDefault(c.Router.Addr, DefaultRouterAddr)
	if c.Router.DrainDelay < 0 {
		return c, fmt.Errorf("drain delay %s is negative", c.Router.DrainDelay)
	}
	if c.Router.DrainTimeout <= 0 {
		c.Router.DrainTimeout = router.DefaultDrainTimeout
	}
	c.Node.Name = orDefault(c.Node.Name, DefaultNodeName)
	if c.Node, err = nodeDefaults(c.Node, c.DataDir); err != nil {
		return c, err
	}
	c.Demo.Template = orDefault(c.Demo.Template, DefaultDemoTemplate)
	if c.Demo.Enabled && c.Demo.LoadTemplate == nil {
		return c, errors.New("demo: no template loader")
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func orDiscard(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.New(slog.DiscardHandler)
	}
	return l
}

// nodeDefaults defaults a node's Workers (DefaultWorkers; negative is an
// error), SandboxClass and WorkerPrefix, the latter derived from
// prefixSeed so that two installations on one machine never share worker
// or network namespace names.
func nodeDefaults(nc node.Config, prefixSeed string) (node.Config, error) {
	switch {
	case nc.Workers == 0:
		nc.Workers = DefaultWorkers
	case nc.Workers < 0:
		return nc, fmt.Errorf("workers: %d is negative", nc.Workers)
	}
	if err := nc.SelfService.Validate(); err != nil {
		return nc, err
	}
	nc.SandboxClass = orDefault(nc.SandboxClass, DefaultSandboxClass)
	if nc.WorkerPrefix == "" {
		sum := sha256.Sum256([]byte(prefixSeed))
		nc.WorkerPrefix = "ate" + hex.EncodeToString(sum[:3])
	}
	return nc, nil
}
