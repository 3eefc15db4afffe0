package router

import (
	"crypto/tls"
	"net"
	"net/http"
	"time"

	"substrate.dev/ate/internal/metrics"
)

// Defaults for Config fields left zero.
const (
	DefaultActorDomain = "actors.localhost"
	// DefaultParkMax bounds parked requests: each costs a goroutine and an
	// open client connection, ~22 KiB measured (BENCHMARKS.md), so 2048
	// stay under 50 MiB while absorbing a large burst of cold requests.
	DefaultParkMax = 2048
	// DefaultParkBudget is how long a request waits for a resume: long
	// enough to ride out a restore plus a wait for a worker to free up,
	// short enough that clients and load balancers have not given up.
	DefaultParkBudget = 30 * time.Second
	// DefaultParkGrace is the extra wait for a request whose budget ran
	// out while its actor was already being restored on a worker: a
	// restore takes well under a second and a cold boot of an interpreter
	// ~11 s (BENCHMARKS.md), so 10 s turns most late restores into
	// answers instead of 503s without holding clients much longer.
	DefaultParkGrace = 10 * time.Second
	// DefaultDrainTimeout is the drain timeout (httpserve.Server) of the
	// server in front of a Handler: it lets a request parked just before
	// the drain began wait out its budget and grace and still be
	// answered.
	DefaultDrainTimeout = DefaultParkBudget + DefaultParkGrace
	// DefaultRouteTimeout bounds the wait for an actor's response header,
	// for templates that set none (route_timeout_seconds).
	DefaultRouteTimeout = 5 * time.Minute
	// DefaultStreamIdleTimeout bounds the silence in a streaming response
	// or WebSocket, for templates that set none
	// (stream_idle_timeout_seconds).
	DefaultStreamIdleTimeout = 5 * time.Minute
	// DefaultIdleCheckInterval is how often idle actors are looked for:
	// an actor is put away between idle.after and idle.after plus this.
	DefaultIdleCheckInterval = time.Second
	// DefaultActivityInterval is how often observed activity is reported
	// to the control plane; last activity is shown with this resolution.
	DefaultActivityInterval = 2 * time.Second
)

// tunnelDialTimeout bounds connecting to a worker tunnel. Tunnels are on the
// local network, so a slow dial means a dead worker; failing fast turns it
// into a re-resolve or a 502 instead of a hang.
const tunnelDialTimeout = 5 * time.Second

// Config configures NewHandler. The zero value of every field means its
// default.
type Config struct {
	// ActorDomain is the DNS suffix under which
	// "<name>.<atespace>.<ActorDomain>" addresses an actor. Default
	// DefaultActorDomain.
	ActorDomain string
	// ParkMax is the most requests that may wait at once, across all
	// actors, for an actor not in the router's cache to be looked up and,
	// if need be, resumed; a request beyond it is answered 503 at once.
	// Default DefaultParkMax.
	ParkMax int
	// ParkBudget is the longest one request waits for its actor to be
	// looked up and resumed; it also bounds the shared resume call.
	// Default DefaultParkBudget.
	ParkBudget time.Duration
	// ParkGrace is the most a request waits beyond ParkBudget when, as the
	// budget runs out, its actor has already been given a worker (the
	// restore is under way). Default DefaultParkGrace.
	ParkGrace time.Duration
	// RouteTimeout and StreamIdleTimeout apply to actors whose template
	// sets no timeout of its own (see Policy). Defaults
	// DefaultRouteTimeout and DefaultStreamIdleTimeout.
	RouteTimeout      time.Duration
	StreamIdleTimeout time.Duration
	// Idler puts actors away once idle (Policy.IdleAfter); nil disables
	// idle handling.
	Idler Idler
	// Activity receives activity reports every ActivityInterval; nil
	// disables them.
	Activity ActivityRecorder
	// IdleCheckInterval and ActivityInterval pace Handler.Start's loop.
	// Defaults DefaultIdleCheckInterval and DefaultActivityInterval.
	IdleCheckInterval time.Duration
	ActivityInterval  time.Duration
	// Transport carries proxied requests to worker tunnels. Default: a
	// clone of http.DefaultTransport tuned for tunnels (no environment
	// proxy, no transparent compression, short dial timeout).
	Transport http.RoundTripper
	// TunnelTLS, if set, is the TLS config of connections to worker
	// tunnels (mutual TLS, internal/pki): requests go to https://, carry
	// their target's node in their context (tunnelproto.WithNode) for a
	// Transport that accepts only that node's certificate
	// (pki.NodeTransport, as ate up and ate router wire it), and the
	// default Transport uses it (any node's certificate).
	TunnelTLS *tls.Config
	// Metrics receives the router's metrics; nil records none.
	Metrics *metrics.Router
	// IngressCacheTTL is how long the router remembers the control
	// plane's review of a bearer token (accepted or refused) and an
	// actor's ingress policy: a deleted ingress token keeps working on a
	// router that accepted it for at most this long. IngressCacheMax
	// bounds each of the two tables. Defaults DefaultIngressCacheTTL and
	// DefaultIngressCacheMax.
	IngressCacheTTL time.Duration
	IngressCacheMax int
	// Loopback says the router listens on loopback addresses only
	// (LoopbackAddr of its listen address): it then answers only
	// requests whose Host is localhost or under it, a loopback IP, or
	// under ActorDomain, and 421 Misdirected Request to any other
	// (DNS rebinding: a web page whose own name resolves to 127.0.0.1
	// would otherwise reach every actor from the local browser).
	Loopback bool
}

// withDefaults returns c with every zero (or negative) field defaulted.
func (c Config) withDefaults() Config {
	if c.ActorDomain == "" {
		c.ActorDomain = DefaultActorDomain
	}
	if c.ParkMax <= 0 {
		c.ParkMax = DefaultParkMax
	}
	if c.ParkBudget <= 0 {
		c.ParkBudget = DefaultParkBudget
	}
	c.ParkGrace = orDefault(c.ParkGrace, DefaultParkGrace)
	c.RouteTimeout = orDefault(c.RouteTimeout, DefaultRouteTimeout)
	c.StreamIdleTimeout = orDefault(c.StreamIdleTimeout, DefaultStreamIdleTimeout)
	c.IdleCheckInterval = orDefault(c.IdleCheckInterval, DefaultIdleCheckInterval)
	c.ActivityInterval = orDefault(c.ActivityInterval, DefaultActivityInterval)
	c.IngressCacheTTL = orDefault(c.IngressCacheTTL, DefaultIngressCacheTTL)
	if c.IngressCacheMax <= 0 {
		c.IngressCacheMax = DefaultIngressCacheMax
	}
	if c.Transport == nil {
		t := NewTunnelTransport()
		t.TLSClientConfig = c.TunnelTLS
		c.Transport = t
	}
	return c
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// withDefaults returns p with its zero timeouts replaced by cfg's.
func (p Policy) withDefaults(cfg Config) Policy {
	p.RouteTimeout = orDefault(p.RouteTimeout, cfg.RouteTimeout)
	p.StreamIdleTimeout = orDefault(p.StreamIdleTimeout, cfg.StreamIdleTimeout)
	return p
}

// NewTunnelTransport returns the default transport to worker tunnels (the
// base of pki.NodeTransport's with mutual TLS).
func NewTunnelTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	// Tunnels are on the cluster network; an HTTP_PROXY meant for the
	// outside world must never see actor traffic.
	t.Proxy = nil
	// A proxy passes bodies through untouched: with compression on, the
	// transport would add Accept-Encoding itself and decompress behind
	// the client's back, buffering streamed responses.
	t.DisableCompression = true
	t.DialContext = (&net.Dialer{Timeout: tunnelDialTimeout, KeepAlive: 30 * time.Second}).DialContext
	// A handshake that takes longer is a node whose answers do not
	// arrive, as a dial that does (tunnelUnreachable).
	t.TLSHandshakeTimeout = tunnelDialTimeout
	// A tunnel fronts every actor of its node; fewer idle connections
	// per host than requests in flight to it makes the surplus open and
	// close a connection each (a dial, a handshake and a TIME_WAIT per
	// request), which halves throughput. Idle ones cost a few KiB and
	// close after IdleConnTimeout (90 s).
	t.MaxIdleConnsPerHost = 1024
	t.MaxIdleConns = 4096
	// Tunnels speak cleartext HTTP/1.1, which carries upgrades
	// (WebSocket) and full-duplex bodies.
	t.ForceAttemptHTTP2 = false
	t.Protocols = new(http.Protocols)
	t.Protocols.SetHTTP1(true)
	return t
}
