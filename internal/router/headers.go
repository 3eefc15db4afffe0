package router

import "net/http"

// reservedHeaders are the request headers whose meaning the router
// vouches for towards an actor: it sets them itself (who the worker and
// incarnation are, the request id, who the bearer token named, where the
// request came from) or chose the actor by them. They are lower case,
// with '-' between words: the form normalHeaderName gives.
//
// Many stacks an actor may run read a header under a normalised name:
// CGI and WSGI turn "X-Forwarded-For" and "X_Forwarded_For" alike into
// HTTP_X_FORWARDED_FOR, others fold case and '_' the same way, and which
// of two such headers wins is up to them. So a client-sent header that
// differs from a reserved one only in case or in '_' for '-' is as good
// as a forgery of the real one, and is removed (stripReserved).
var reservedHeaders = map[string]bool{
	"ate-worker":          true, // tunnelproto.HeaderWorker
	"ate-actor-uid":       true, // tunnelproto.HeaderActorUID
	"ate-assignment":      true, // tunnelproto.HeaderAssignment
	"x-request-id":        true, // tunnelproto.HeaderRequestID
	"ate-ingress-subject": true, // HeaderIngressSubject
	"ate-target-actor":    true, // HeaderTargetActor
	"x-forwarded-for":     true,
	"x-forwarded-host":    true,
	"x-forwarded-proto":   true,
	"forwarded":           true,
}

// keptReserved are the canonical spellings of reserved headers that the
// router lets through as sent: Ate-Target-Actor is how the client chose
// the actor, so it is true of the request. Every other reserved header is
// removed, then set afresh by rewrite (or by ReverseProxy for
// X-Forwarded-*), whatever its spelling.
var keptReserved = map[string]bool{
	http.CanonicalHeaderKey(HeaderTargetActor): true,
}

// maxHeaderNameLen bounds the names normalHeaderName compares without
// allocating; no reserved name comes near it, so longer names are not
// reserved.
const maxHeaderNameLen = 32

// stripReserved deletes from h every header whose name normalises to a
// reserved one (reservedHeaders), except the kept canonical spellings.
// It allocates nothing: it runs on every proxied request.
func stripReserved(h http.Header) {
	for k := range h {
		if keptReserved[k] {
			continue
		}
		var buf [maxHeaderNameLen]byte
		if n, ok := normalHeaderName(&buf, k); ok && reservedHeaders[string(buf[:n])] {
			delete(h, k)
		}
	}
}

// normalHeaderName writes name in lower case with every '_' turned into
// '-' to buf and returns its length; false when name is longer than buf.
func normalHeaderName(buf *[maxHeaderNameLen]byte, name string) (int, bool) {
	if len(name) > len(buf) {
		return 0, false
	}
	for i := range len(name) {
		c := name[i]
		switch {
		case 'A' <= c && c <= 'Z':
			c += 'a' - 'A'
		case c == '_':
			c = '-'
		}
		buf[i] = c
	}
	return len(name), true
}
