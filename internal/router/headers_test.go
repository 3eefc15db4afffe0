package router

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"substrate.dev/ate/internal/auth"
	"substrate.dev/ate/internal/tunnelproto"
)

// headerEchoTunnel answers 200 with every request header it received, as
// JSON (name as sent on the wire → values).
func headerEchoTunnel(t *testing.T) string {
	return newTunnel(t, func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(r.Header)
	})
}

// TestLookalikeReservedHeadersDoNotReachActor attacks from a client: it
// sends, in the spellings stacks fold together ('_' for '-', any case),
// forged values of every header the router vouches for. None of them
// reaches the actor; the router's own values do.
func TestLookalikeReservedHeadersDoNotReachActor(t *testing.T) {
	forged := []string{
		"Ate_Ingress_Subject", "ate_ingress_subject", "ATE-INGRESS_SUBJECT",
		"X_Forwarded_For", "x_forwarded_for", "X-Forwarded_For", "X_Forwarded_Host", "X_Forwarded_Proto", "FORWARDED",
		"Ate_Worker", "Ate_Actor_Uid", "X_Request_Id",
		"Ate_Target_Actor",
	}
	for _, policy := range []auth.IngressPolicy{auth.IngressPublic, auth.IngressToken} {
		t.Run(policy.String(), func(t *testing.T) {
			res := ingressResolver(t, headerEchoTunnel(t), policy, true)
			srv, _ := newRouter(t, Config{}, res)
			req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+"/", nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Host = "app.default.actors.localhost"
			req.Header.Set("Authorization", "Bearer good")
			for _, k := range forged {
				// As sent: net/http would canonicalise Set's key.
				req.Header[k] = []string{"forged"}
			}
			seen := sendForged(t, srv, req)
			if got := seen.Get(tunnelproto.HeaderWorker); got != "w1" {
				t.Errorf("actor received %s %q, want the router's w1", tunnelproto.HeaderWorker, got)
			}
			if got := seen.Get("X-Forwarded-For"); got != "127.0.0.1" {
				t.Errorf("actor received X-Forwarded-For %q, want the router's 127.0.0.1", got)
			}
			wantSubject := ""
			if policy == auth.IngressToken {
				wantSubject = "ingresstoken:default/web"
			}
			if got := seen.Get(HeaderIngressSubject); got != wantSubject {
				t.Errorf("actor received %s %q, want %q", HeaderIngressSubject, got, wantSubject)
			}
		})
	}
}

// TestReservedHeadersCoverRouterHeaders: every header the router sets
// towards an actor, or routes by, is reserved, in its normal form.
func TestReservedHeadersCoverRouterHeaders(t *testing.T) {
	for _, name := range []string{tunnelproto.HeaderWorker, tunnelproto.HeaderActorUID, tunnelproto.HeaderRequestID,
		HeaderIngressSubject, HeaderTargetActor, "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "Forwarded"} {
		var buf [maxHeaderNameLen]byte
		n, ok := normalHeaderName(&buf, name)
		if !ok || !reservedHeaders[string(buf[:n])] {
			t.Errorf("%s is not reserved", name)
		}
	}
}

func TestStripReservedAllocatesNothing(t *testing.T) {
	h := http.Header{"Accept": {"*/*"}, "User-Agent": {"x"}, "A-Rather-Long-Header-Name-Beyond-The-Bound": {"y"}}
	if n := testing.AllocsPerRun(100, func() { stripReserved(h) }); n != 0 {
		t.Errorf("stripReserved allocates %v times per call, want 0", n)
	}
}

// TestReservedTrailersDoNotReachActor attacks with request trailers: a
// chunked body followed by Ate-Ingress-Subject and X-Forwarded-For (and
// look-alikes) as trailers, which stacks that merge trailers into
// headers would believe. No forged value reaches the actor. (Today's
// net/http proxy forwards request trailers' names but not their values;
// the router strips reserved names from them too, should that change.)
func TestReservedTrailersDoNotReachActor(t *testing.T) {
	tunnel := newTunnel(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // trailers arrive after the body
		_ = json.NewEncoder(w).Encode(r.Trailer)
	})
	res := ingressResolver(t, tunnel, auth.IngressPublic, true)
	srv, _ := newRouter(t, Config{}, res)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+"/", io.NopCloser(strings.NewReader("body")))
	if err != nil {
		t.Fatal(err)
	}
	req.Host = "app.default.actors.localhost"
	req.ContentLength = -1 // chunked, so trailers can follow
	req.Trailer = http.Header{}
	for _, k := range []string{"Ate-Ingress-Subject", "Ate_Ingress_Subject", "X-Forwarded-For", "Ate-Worker"} {
		req.Trailer[k] = []string{"forged"}
	}
	seen := sendForged(t, srv, req)
	for _, k := range []string{"Ate-Ingress-Subject", "Ate_ingress_subject", "X-Forwarded-For", "Ate-Worker"} {
		if _, ok := seen[k]; ok {
			t.Errorf("actor's trailers %v name the reserved %s", seen, k)
		}
	}
}

// sendForged sends req, whose forged values say "forged", through srv to
// a tunnel that answers with what it received as JSON (headers or
// trailers), fails t for every forged value among them, and returns them.
func sendForged(t *testing.T, srv *httptest.Server, req *http.Request) http.Header {
	t.Helper()
	got := send(srv, req)
	if got.err != nil || got.status != 200 {
		t.Fatalf("got %d %q (%v), want 200", got.status, got.body, got.err)
	}
	var seen http.Header
	if err := json.Unmarshal([]byte(got.body), &seen); err != nil {
		t.Fatalf("tunnel's answer %q: %v", got.body, err)
	}
	for k, vs := range seen {
		for _, v := range vs {
			if strings.Contains(v, "forged") {
				t.Errorf("actor received %s: %q, a client's forgery", k, v)
			}
		}
	}
	return seen
}
