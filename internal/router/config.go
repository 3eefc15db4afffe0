package router

import (
	"net"
	"net/http"
	"time"
)

// Defaults for Config fields left zero.
const (
	DefaultActorDomain = "actors.localhost"
	// DefaultParkMax bounds parked requests: each costs a goroutine and an
	// open client connection (tens of KiB), so 2048 stays around 100 MiB
	// in the worst case while absorbing a large burst of cold requests.
	DefaultParkMax = 2048
	// DefaultParkBudget is how long a request waits for a resume: long
	// enough to ride out a restore plus a wait for a worker to free up,
	// short enough that clients and load balancers have not given up.
	DefaultParkBudget = 30 * time.Second
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
	// Transport carries proxied requests to worker tunnels. Default: a
	// clone of http.DefaultTransport tuned for tunnels (no environment
	// proxy, no transparent compression, short dial timeout).
	Transport http.RoundTripper
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
	if c.Transport == nil {
		c.Transport = newTunnelTransport()
	}
	return c
}

// newTunnelTransport returns the default transport to worker tunnels.
func newTunnelTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	// Tunnels are on the cluster network; an HTTP_PROXY meant for the
	// outside world must never see actor traffic.
	t.Proxy = nil
	// A proxy passes bodies through untouched: with compression on, the
	// transport would add Accept-Encoding itself and decompress behind
	// the client's back, buffering streamed responses.
	t.DisableCompression = true
	t.DialContext = (&net.Dialer{Timeout: tunnelDialTimeout, KeepAlive: 30 * time.Second}).DialContext
	// A tunnel fronts one busy actor; the default of 2 idle connections
	// per host would make concurrent requests to it churn connections.
	t.MaxIdleConnsPerHost = 64
	t.MaxIdleConns = 1024
	// Tunnels speak cleartext HTTP/1.1.
	t.ForceAttemptHTTP2 = false
	return t
}
