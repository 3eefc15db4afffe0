package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestHandler(t *testing.T) {
	srv := httptest.NewServer(newHandler(nil))
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
