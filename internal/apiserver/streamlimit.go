package apiserver

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"substrate.dev/ate/internal/auth"
	"substrate.dev/ate/internal/pki"
)

// DefaultMaxStreamsPerCaller is how many watches and log follows one
// caller may hold open on one API server at once when not set: far more
// terminals than a person watches from, while each stream polls the
// record store (a watch) or every node (a follow) four times a second,
// so a script that leaks them stops at a bounded cost.
const DefaultMaxStreamsPerCaller = 32

// errTooManyStreams: the caller already holds as many watches and log
// follows as one caller may.
var errTooManyStreams = errors.New("too many open streams")

// callerStreams counts each caller's open watches and log follows
// (WatchEvents, ActorLogs with follow), which never end on their own.
// Safe for concurrent use.
type callerStreams struct {
	max int // fixed before the server serves

	mu   sync.Mutex
	open map[string]int // guarded by mu: caller → streams open, no zero entries
}

// acquire takes one of ctx's caller's places, or refuses with
// errTooManyStreams; release gives it back, once, when the stream ends.
func (c *callerStreams) acquire(ctx context.Context) (release func(), err error) {
	key, who := callerOf(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.open[key] >= c.max {
		return nil, fmt.Errorf("%w: %s already holds %d watches and log follows (ate get -w, ate logs -f) on this API server, "+
			"the most one caller may; end one and retry, or ask the operator to raise --max-streams-per-caller",
			errTooManyStreams, who, c.max)
	}
	if c.open == nil {
		c.open = map[string]int{}
	}
	c.open[key]++
	return sync.OnceFunc(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.open[key]--; c.open[key] == 0 {
			delete(c.open, key)
		}
	}), nil
}

// callerOf names who ctx's call comes from, as a key and for a message:
// the authenticated principal (auth.FromContext); on a server that
// checks nobody (--insecure without authenticators) the client's IP
// address, the only name such a caller has.
func callerOf(ctx context.Context) (key, who string) {
	if p, ok := auth.FromContext(ctx); ok {
		if p.Component != nil {
			return "component:" + p.Component.String(), p.String()
		}
		return "user:" + p.Name, "user " + p.Name
	}
	host := pki.PeerHost(ctx)
	if host == "" {
		host = "unknown"
	}
	return "address:" + host, "the unauthenticated client at " + host
}
