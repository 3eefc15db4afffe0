package router

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"

	"substrate.dev/ate/internal/httpserve"
	"substrate.dev/ate/internal/httpserve/servetest"
)

// startServer serves h on a free local port until the returned stop is
// called; stop returns Start's error.
func startServer(t *testing.T, h http.Handler) (s *httpserve.Server, stop func() error) {
	t.Helper()
	s = httpserve.NewServer("router", "127.0.0.1:0", h, nil)
	// A test that leaves a request hanging fails fast instead of waiting
	// out the default drain.
	s.DrainTimeout = 5 * time.Second
	return s, servetest.Run(t, s)
}

// serverGet GETs path from addr with the given Host. Safe to call from any
// goroutine: it reports errors instead of failing the test.
func serverGet(ctx context.Context, client *http.Client, addr, host, path string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return 0, "", err
	}
	req.Host = host
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

func TestServer(t *testing.T) {
	tunnel := echoTunnel(t, "tunnel", nil)
	res := warmResolver(t, tunnel, Policy{})
	tr := NewTunnelTransport()
	defer tr.CloseIdleConnections()
	s, stop := startServer(t, NewHandler(Config{Transport: tr}, res, nil))
	client := &http.Client{Transport: NewTunnelTransport()}
	defer client.CloseIdleConnections()

	tests := []struct {
		host, path string
		wantStatus int
	}{
		{"localhost", "/healthz", 200},
		{"localhost", "/readyz", 200},
		{"localhost", "/", 404},
		{"app.default.actors.localhost", "/", 200},
	}
	for _, tt := range tests {
		got, body, err := serverGet(t.Context(), client, s.Addr(), tt.host, tt.path)
		if err != nil || got != tt.wantStatus {
			t.Errorf("GET %s%s = %d %q %v, want %d", tt.host, tt.path, got, body, err, tt.wantStatus)
		}
	}
	if err := stop(); err != nil {
		t.Fatalf("Start returned %v after its context ended", err)
	}
	if _, err := net.Dial("tcp", s.Addr()); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("dial after stop: %v, want connection refused", err)
	}
}
