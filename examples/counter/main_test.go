package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestHandler(t *testing.T) {
	srv := httptest.NewServer(newHandler(nil, false))
	t.Cleanup(srv.Close)

	steps := []struct {
		path, want string
		status     int
	}{
		{"/", "count=1\n", http.StatusOK},
		{"/healthz", "ok\n", http.StatusOK}, // probes do not count
		{"/", "count=2\n", http.StatusOK},
		{"/nope", "404 page not found\n", http.StatusNotFound},
		{"/", "count=3\n", http.StatusOK},
	}
	for _, s := range steps {
		resp, err := http.Get(srv.URL + s.path)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != s.status || string(body) != s.want {
			t.Errorf("GET %s = %d %q, want %d %q", s.path, resp.StatusCode, body, s.status, s.want)
		}
	}
}

// TestTestEndpointsOff: without COUNTER_TEST_ENDPOINTS=1 (the demo) a
// client reaching the actor can neither read nor write its files nor mint
// its identity tokens; with it, the file API answers.
func TestTestEndpointsOff(t *testing.T) {
	srv := httptest.NewServer(newHandler(nil, false))
	t.Cleanup(srv.Close)
	planted := filepath.Join(t.TempDir(), "planted")
	for _, c := range []struct{ method, path string }{
		{http.MethodGet, "/files/etc/hostname"},
		{http.MethodPut, "/files" + planted},
		{http.MethodGet, "/mint"},
		{http.MethodPost, "/ask?action=suspend"},
		{http.MethodGet, "/dial?addr=127.0.0.1:1"},
		{http.MethodPost, "/set-alarm"},
		{http.MethodPost, "/log"},
		{http.MethodGet, "/sleep?ms=0&mark=" + planted},
	} {
		req, err := http.NewRequest(c.method, srv.URL+c.path, strings.NewReader("x"))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound && resp.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("without the test flag %s %s = %d, want 404", c.method, c.path, resp.StatusCode)
		}
	}
	if _, err := os.Stat(planted); err == nil {
		t.Error("PUT /files wrote a file without the test flag")
	}

	on := httptest.NewServer(newHandler(nil, true))
	t.Cleanup(on.Close)
	resp, err := http.Get(on.URL + "/files/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("with the test flag GET /files/proc/self/status = %d", resp.StatusCode)
	}
}
