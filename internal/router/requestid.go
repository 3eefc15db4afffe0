package router

import (
	"crypto/rand"
	"encoding/hex"
	"net/http"

	"substrate.dev/ate/internal/tunnelproto"
)

// HeaderRequestID is on every response of the router: the id of the
// request, which error bodies end with and the router's log line about a
// failure carries, so a client's report leads to the cause.
const HeaderRequestID = "Ate-Request-Id"

// headerXRequestID (tunnelproto.HeaderRequestID) is the de-facto request
// id header of load balancers and clients. The router reuses a sane
// incoming one, so an id assigned in front of it stays the same, and sends
// its id on to the actor (and the worker tunnel, which logs it) in it.
const headerXRequestID = tunnelproto.HeaderRequestID

// maxRequestIDLen bounds a reused X-Request-Id: UUIDs, ULIDs and the
// ids of common proxies fit.
const maxRequestIDLen = 64

// requestID returns r's X-Request-Id if it is a sane token, else a new
// random id (128 bits, hex). Only sane ids are reused because the id is
// echoed in bodies and log lines: an arbitrary header could inject text
// into both.
func requestID(r *http.Request) string {
	if v := r.Header.Get(headerXRequestID); saneRequestID(v) {
		return v
	}
	var b [16]byte
	// crypto/rand.Read never fails (it crashes the program instead).
	_, _ = rand.Read(b[:])
	var s [32]byte
	hex.Encode(s[:], b[:])
	return string(s[:]) // one allocation; hex.EncodeToString makes two

}

// saneRequestID reports whether s is 1 to maxRequestIDLen characters of
// [A-Za-z0-9._-].
func saneRequestID(s string) bool {
	if s == "" || len(s) > maxRequestIDLen {
		return false
	}
	for i := range len(s) {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
