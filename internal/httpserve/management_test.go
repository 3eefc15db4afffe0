package httpserve

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// get serves m until the test ends and answers GET path's status and body.
func get(t *testing.T, m *Management, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + m.Addr() + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func serve(t *testing.T, m *Management) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
}

// An anonymous client of the management port (which Services and
// scrapers reach) gets health and metrics, and no pprof: neither the
// process's command line nor its memory.
func TestManagementServesNoPprof(t *testing.T) {
	m, err := NewManagement("127.0.0.1:0", prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	serve(t, m)
	for path, want := range map[string]int{
		"/healthz":               http.StatusOK,
		"/metrics":               http.StatusOK,
		"/debug/pprof/":          http.StatusNotFound,
		"/debug/pprof/cmdline":   http.StatusNotFound,
		"/debug/pprof/heap":      http.StatusNotFound,
		"/debug/pprof/goroutine": http.StatusNotFound,
	} {
		code, body := get(t, m, path)
		if code != want {
			t.Errorf("GET %s = %d, want %d", path, code, want)
		}
		if strings.Contains(body, os.Args[0]) {
			t.Errorf("GET %s shows the command line: %q", path, body)
		}
	}
}

func TestPprofRefusesNonLoopback(t *testing.T) {
	for _, addr := range []string{":0", "0.0.0.0:0", "[::]:0"} {
		m, err := NewPprof(addr)
		if !errors.Is(err, ErrNotLoopback) {
			if m != nil {
				m.Close()
			}
			t.Errorf("NewPprof(%q) = %v, want ErrNotLoopback", addr, err)
		}
	}
}

// pprof on loopback serves profiles, never the command line.
func TestPprofNeverServesCmdline(t *testing.T) {
	m, err := NewPprof("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serve(t, m)
	if code, _ := get(t, m, "/debug/pprof/"); code != http.StatusOK {
		t.Errorf("GET /debug/pprof/ = %d", code)
	}
	if code, _ := get(t, m, "/debug/pprof/goroutine?debug=1"); code != http.StatusOK {
		t.Errorf("GET /debug/pprof/goroutine = %d", code)
	}
	code, body := get(t, m, "/debug/pprof/cmdline")
	if code != http.StatusNotFound || strings.Contains(body, os.Args[0]) {
		t.Errorf("GET /debug/pprof/cmdline = %d %q, want 404 without the command line", code, body)
	}
}
