package router

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// silentListener accepts connections and never writes to them: a tunnel
// whose answers to this router are dropped (a one-way partition), to
// which a TCP connection may still be made.
func silentListener(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// TestTunnelProbe: a TLS tunnel counts as there when it answers a
// handshake at all (verified or not, client certificate required or
// not); one that accepts connections but answers nothing, or refuses
// them, is unreachable. A TCP connection alone would have called the
// silent one reachable, and every request to it would wait out a TLS
// handshake and fail 502.
func TestTunnelProbe(t *testing.T) {
	tlsServer := httptest.NewTLSServer(http.NotFoundHandler())
	defer tlsServer.Close()
	mtls := httptest.NewUnstartedServer(http.NotFoundHandler())
	mtls.TLS = &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert}
	mtls.StartTLS()
	defer mtls.Close()
	closed := silentListener(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := ln.Addr().String()
	ln.Close()
	for _, c := range []struct {
		name  string
		addr  string
		there bool
	}{
		{"TLS tunnel", tlsServer.Listener.Addr().String(), true},
		{"TLS tunnel requiring a client certificate", mtls.Listener.Addr().String(), true},
		{"accepts, answers nothing", closed, false},
		{"refuses", refused, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := tunnelProbe(true)(t.Context(), c.addr)
			if (err == nil) != c.there {
				t.Fatalf("probe = %v, want there %v", err, c.there)
			}
		})
	}
	if err := tunnelProbe(false)(t.Context(), closed); err != nil {
		t.Fatalf("plaintext probe of a listening tunnel = %v: it cannot tell more than a connection", err)
	}
}

// TestHandshakeTimeoutIsUnreachable: a request whose TLS handshake with
// the tunnel times out was never sent, so it is retried and its tunnel
// marked down like one that refused the connection, not answered 502.
func TestHandshakeTimeoutIsUnreachable(t *testing.T) {
	tr := NewTunnelTransport()
	tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: true}
	tr.TLSHandshakeTimeout = 100 * time.Millisecond
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+silentListener(t)+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = tr.RoundTrip(req)
	if err == nil || !tunnelUnreachable(err) || !isStale(err) {
		t.Fatalf("round trip to a tunnel that answers no handshake = %v: want a tunnel unreachable error", err)
	}
}
