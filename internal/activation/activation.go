// Package activation names how a request found its actor (Kind): the
// router decides it, sends it to the client in the Ate-Activation
// response header and logs it, and metrics counts requests and parks by
// it. It is a package of its own, importing nothing, because metrics
// cannot import the router, which imports metrics.
package activation

import (
	"fmt"
	"strconv"
)

// Kind is how a request found its actor. The zero value is None: the
// request failed before it found one.
type Kind uint8

const (
	// None: the request failed before it found its actor; such a
	// response carries no Ate-Activation header.
	None Kind = iota
	// Warm: the actor was already running.
	Warm
	// Resumed: this request triggered the actor's resume.
	Resumed
	// Joined: this request waited on another request's resume.
	Joined
)

// String returns the kind's token, the Ate-Activation header's value (an
// RFC 8941 token; see router.HeaderActivation) and the metric label
// value: "warm", "resumed", "joined", or "none" (only in logs and
// metrics).
func (k Kind) String() string {
	switch k {
	case None:
		return "none"
	case Warm:
		return "warm"
	case Resumed:
		return "resumed"
	case Joined:
		return "joined"
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// ParseKind parses a kind's token, without the header's parameters
// (";evicted"). The empty string is None: a response the router answered
// itself carries no Ate-Activation header. Anything else is an error
// naming the accepted values.
func ParseKind(s string) (Kind, error) {
	if s == "" {
		return None, nil
	}
	for _, k := range []Kind{None, Warm, Resumed, Joined} {
		if s == k.String() {
			return k, nil
		}
	}
	return None, fmt.Errorf("unknown activation %q: want %s, %s, %s or %s", s, Warm, Resumed, Joined, None)
}

// MarshalText implements encoding.TextMarshaler.
func (k Kind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }
