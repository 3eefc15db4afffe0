package fake

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"substrate.dev/ate/internal/sandbox"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newRuntime(t *testing.T, cfg Config) *Runtime {
	t.Helper()
	r := New(cfg)
	t.Cleanup(func() {
		_ = r.Close()
		if n := r.Len(); n != 0 {
			t.Errorf("%d containers left after Close", n)
		}
	})
	return r
}

func slot(t *testing.T, name string) sandbox.Slot {
	t.Helper()
	s, err := Setup(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func spec(id string, env ...string) sandbox.Spec {
	return sandbox.Spec{ID: id, Env: env}
}

// get sends one GET through the runtime's dialer, as the node's probe and
// tunnel do.
func get(t *testing.T, r *Runtime, s sandbox.Slot, port int, path string) (string, error) {
	t.Helper()
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return r.DialContext(ctx, s, port)
		},
		DisableKeepAlives: true,
	}
	defer tr.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+sandbox.InteriorAddr+path, nil)
	if err != nil {
		return "", err
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return string(body), err
}

func mustGet(t *testing.T, r *Runtime, s sandbox.Slot, path, want string) {
	t.Helper()
	got, err := get(t, r, s, defaultPort, path)
	if err != nil || got != want {
		t.Fatalf("GET %s = %q, %v; want %q", path, got, err, want)
	}
}

func TestSetup(t *testing.T) {
	s, err := Setup(context.Background(), "w3")
	if err != nil || s != (sandbox.Slot{Name: "w3"}) {
		t.Fatalf("Setup = %+v, %v", s, err)
	}
}

func TestCounterEndpoints(t *testing.T) {
	r := newRuntime(t, Config{})
	s := slot(t, "w0")
	if err := r.Run(context.Background(), s, spec("c1")); err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct{ path, want string }{
		{"/", "count=1\n"},
		{"/healthz", "ok\n"}, // the probe does not count
		{"/", "count=2\n"},
		{"/", "count=3\n"},
	} {
		mustGet(t, r, s, step.path, step.want)
	}
	if _, err := get(t, r, s, defaultPort, "/missing"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("GET /missing = %v, want 404", err)
	}
}

func TestCheckpointRestoreKeepsCount(t *testing.T) {
	r := newRuntime(t, Config{})
	ctx := context.Background()
	w0, w1 := slot(t, "w0"), slot(t, "w1")
	if err := r.Run(ctx, w0, spec("c1")); err != nil {
		t.Fatal(err)
	}
	mustGet(t, r, w0, "/", "count=1\n")
	mustGet(t, r, w0, "/", "count=2\n")
	img := t.TempDir()
	if err := r.Checkpoint(ctx, w0, "c1", img); err != nil {
		t.Fatal(err)
	}
	if _, ok := r.Container("w0"); ok {
		t.Fatal("slot still hosts a container after checkpoint")
	}
	if _, err := r.DialContext(ctx, w0, defaultPort); !errors.Is(err, ErrNoContainer) {
		t.Fatalf("dial after checkpoint = %v, want ErrNoContainer", err)
	}
	if _, err := os.Stat(filepath.Join(img, StateFile)); err != nil {
		t.Fatalf("checkpoint wrote no state file: %v", err)
	}
	// Restore on another worker, twice from the same image: a snapshot
	// is immutable, each restore continues from it.
	for i, id := range []string{"c2", "c3"} {
		if err := r.Restore(ctx, w1, spec(id), img); err != nil {
			t.Fatal(err)
		}
		mustGet(t, r, w1, "/", "count=3\n")
		if got, ok := r.Container("w1"); !ok || got != id {
			t.Fatalf("restore %d: slot hosts %q, %v", i, got, ok)
		}
		if err := r.Destroy(ctx, w1, id); err != nil {
			t.Fatal(err)
		}
	}
}

func TestRestoreFailures(t *testing.T) {
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name  string
		ctx   context.Context
		state []byte // nil: no state file
	}{
		{"missing state file", context.Background(), nil},
		{"corrupt state file", context.Background(), []byte("{not json")},
		{"context ended", canceled, []byte(`{"count":1}`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRuntime(t, Config{})
			img := t.TempDir()
			if tc.state != nil {
				if err := os.WriteFile(filepath.Join(img, StateFile), tc.state, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			err := r.Restore(tc.ctx, slot(t, "w0"), spec("c1"), img)
			if !errors.Is(err, sandbox.ErrRestoreFailed) {
				t.Fatalf("Restore = %v, want ErrRestoreFailed", err)
			}
			if r.Len() != 0 {
				t.Fatal("a failed restore left a container")
			}
		})
	}
}

// TestWaitReturnsWhenContainerEnds covers every way a container ends.
func TestWaitReturnsWhenContainerEnds(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(t *testing.T, r *Runtime, s sandbox.Slot, id string, cancelWait context.CancelFunc)
		want error // nil, or what Wait's error wraps
	}{
		{"destroy", func(t *testing.T, r *Runtime, s sandbox.Slot, id string, _ context.CancelFunc) {
			if err := r.Destroy(context.Background(), s, id); err != nil {
				t.Error(err)
			}
		}, nil},
		{"checkpoint", func(t *testing.T, r *Runtime, s sandbox.Slot, id string, _ context.CancelFunc) {
			if err := r.Checkpoint(context.Background(), s, id, t.TempDir()); err != nil {
				t.Error(err)
			}
		}, nil},
		{"kill", func(t *testing.T, r *Runtime, _ sandbox.Slot, id string, _ context.CancelFunc) {
			if err := r.Kill(id); err != nil {
				t.Error(err)
			}
		}, nil},
		{"context ends", func(_ *testing.T, _ *Runtime, _ sandbox.Slot, _ string, cancelWait context.CancelFunc) {
			cancelWait()
		}, context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRuntime(t, Config{})
			blocked := make(chan struct{})
			r.waiting = func(string) { close(blocked) }
			s := slot(t, "w0")
			if err := r.Run(context.Background(), s, spec("c1")); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			waited := make(chan error, 1)
			go func() { waited <- r.Wait(ctx, s, "c1") }()
			<-blocked // end the container only once Wait watches it
			tc.end(t, r, s, "c1", cancel)
			select {
			case err := <-waited:
				if (tc.want == nil && err != nil) || (tc.want != nil && !errors.Is(err, tc.want)) {
					t.Fatalf("Wait = %v, want %v", err, tc.want)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Wait did not return")
			}
			if tc.want == nil {
				if _, ok := r.Container("w0"); ok {
					t.Fatal("slot still hosts the ended container")
				}
			}
		})
	}
}

func TestKillDropsConnectionsAndEmptiesSlot(t *testing.T) {
	r := newRuntime(t, Config{})
	s := slot(t, "w0")
	ctx := context.Background()
	if err := r.Run(ctx, s, spec("c1")); err != nil {
		t.Fatal(err)
	}
	conn, err := r.DialContext(ctx, s, defaultPort)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := r.Kill("c1"); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Read(make([]byte, 1)); err == nil {
		t.Fatal("connection survived the kill")
	}
	if err := r.Kill("c1"); !errors.Is(err, ErrUnknownContainer) {
		t.Fatalf("second Kill = %v, want ErrUnknownContainer", err)
	}
	if err := r.Checkpoint(ctx, s, "c1", t.TempDir()); !errors.Is(err, ErrUnknownContainer) {
		t.Fatalf("Checkpoint of a killed container = %v, want ErrUnknownContainer", err)
	}
	// The slot is usable again.
	if err := r.Run(ctx, s, spec("c2")); err != nil {
		t.Fatal(err)
	}
	mustGet(t, r, s, "/", "count=1\n")
}

func TestDestroyIsIdempotent(t *testing.T) {
	r := newRuntime(t, Config{})
	s := slot(t, "w0")
	ctx := context.Background()
	if err := r.Run(ctx, s, spec("c1")); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := r.Destroy(ctx, s, "c1"); err != nil {
			t.Fatalf("Destroy #%d = %v", i+1, err)
		}
	}
	if err := r.Destroy(ctx, s, "never-existed"); err != nil {
		t.Fatalf("Destroy of an unknown id = %v", err)
	}
	if err := r.Wait(ctx, s, "c1"); !errors.Is(err, ErrUnknownContainer) {
		t.Fatalf("Wait on a destroyed id = %v, want ErrUnknownContainer", err)
	}
}

func TestRunRefusals(t *testing.T) {
	for _, tc := range []struct {
		name    string
		prepare func(r *Runtime) error
		slot    string
		spec    sandbox.Spec
		want    error // nil: any error
	}{
		{"slot busy", func(r *Runtime) error { return r.Run(context.Background(), sandbox.Slot{Name: "w0"}, spec("c1")) },
			"w0", spec("c2"), ErrSlotBusy},
		{"id in use in another slot", func(r *Runtime) error { return r.Run(context.Background(), sandbox.Slot{Name: "w0"}, spec("c1")) },
			"w1", spec("c1"), nil},
		{"bad PORT", nil, "w0", spec("c1", "PORT=http"), nil},
		{"no id", nil, "w0", spec(""), nil},
		{"prepared but never prepared", nil, "w0", sandbox.Spec{ID: "c1", Prepared: true}, ErrUnknownContainer},
		{"prepared in another slot", func(r *Runtime) error { return r.Prepare(context.Background(), sandbox.Slot{Name: "w1"}, spec("c1")) },
			"w0", sandbox.Spec{ID: "c1", Prepared: true}, ErrUnknownContainer},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRuntime(t, Config{})
			if tc.prepare != nil {
				if err := tc.prepare(r); err != nil {
					t.Fatal(err)
				}
			}
			before := r.Len()
			err := r.Run(context.Background(), slot(t, tc.slot), tc.spec)
			if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Fatalf("Run = %v, want %v", err, tc.want)
			}
			if r.Len() != before {
				t.Fatal("a refused Run started a container")
			}
		})
	}
}

func TestPortFromEnv(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  []string
		port int
	}{
		{"default", nil, 8080},
		{"set", []string{"HOME=/", "PORT=9000"}, 9000},
		{"last wins", []string{"PORT=1", "PORT=7000"}, 7000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRuntime(t, Config{})
			s := slot(t, "w0")
			if err := r.Run(context.Background(), s, spec("c1", tc.env...)); err != nil {
				t.Fatal(err)
			}
			if got, err := get(t, r, s, tc.port, "/healthz"); err != nil || got != "ok\n" {
				t.Fatalf("GET on port %d = %q, %v", tc.port, got, err)
			}
			_, err := r.DialContext(context.Background(), s, tc.port+1)
			if !errors.Is(err, syscall.ECONNREFUSED) {
				t.Fatalf("dial of another port = %v, want ECONNREFUSED", err)
			}
		})
	}
}

func TestDelays(t *testing.T) {
	const d = 30 * time.Millisecond
	ops := []struct {
		name string
		cfg  Config
		op   func(ctx context.Context, r *Runtime, s sandbox.Slot, img string) error
	}{
		{"run", Config{RunDelay: d}, func(ctx context.Context, r *Runtime, s sandbox.Slot, _ string) error {
			return r.Run(ctx, s, spec("new"))
		}},
		{"restore", Config{RestoreDelay: d}, func(ctx context.Context, r *Runtime, s sandbox.Slot, img string) error {
			return r.Restore(ctx, s, spec("new"), img)
		}},
		{"checkpoint", Config{CheckpointDelay: d}, func(ctx context.Context, r *Runtime, _ sandbox.Slot, img string) error {
			return r.Checkpoint(ctx, sandbox.Slot{Name: "w9"}, "running", img)
		}},
		{"destroy", Config{DestroyDelay: d}, func(ctx context.Context, r *Runtime, _ sandbox.Slot, _ string) error {
			return r.Destroy(ctx, sandbox.Slot{Name: "w9"}, "running")
		}},
	}
	for _, tc := range ops {
		for _, cancelled := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/cancelled=%v", tc.name, cancelled), func(t *testing.T) {
				r := newRuntime(t, tc.cfg)
				img := t.TempDir()
				if err := os.WriteFile(filepath.Join(img, StateFile), []byte(`{"count":4}`), 0o600); err != nil {
					t.Fatal(err)
				}
				// "running" in w9 is what checkpoint and destroy act on.
				if err := r.start(sandbox.Slot{Name: "w9"}, spec("running"), 0); err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				if cancelled {
					cancel()
				}
				before := r.Len()
				start := time.Now()
				err := tc.op(ctx, r, slot(t, "w0"), img)
				took := time.Since(start)
				if cancelled {
					if !errors.Is(err, context.Canceled) || r.Len() != before {
						t.Fatalf("cancelled %s = %v with %d→%d containers; want context.Canceled and no change", tc.name, err, before, r.Len())
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				if took < d {
					t.Fatalf("%s took %v, want at least the configured %v", tc.name, took, d)
				}
			})
		}
	}
}

// TestConcurrentSlots runs full cycles on many slots at once (for -race).
func TestConcurrentSlots(t *testing.T) {
	r := newRuntime(t, Config{})
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			ctx := context.Background()
			s := sandbox.Slot{Name: fmt.Sprintf("w%d", i)}
			img := t.TempDir()
			for j := range 5 {
				id := fmt.Sprintf("c%d-%d", i, j)
				var err error
				if j == 0 {
					err = r.Run(ctx, s, spec(id))
				} else {
					err = r.Restore(ctx, s, spec(id), img)
				}
				if err != nil {
					t.Error(err)
					return
				}
				want := fmt.Sprintf("count=%d\n", j+1)
				if got, err := get(t, r, s, defaultPort, "/"); err != nil || got != want {
					t.Errorf("slot %s: GET / = %q, %v; want %q", s.Name, got, err, want)
					return
				}
				if err := r.Checkpoint(ctx, s, id, img); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if r.Len() != 0 {
		t.Fatalf("%d containers left", r.Len())
	}
}

func TestPreparedStartsOnceAndDestroyForgetsIt(t *testing.T) {
	r := newRuntime(t, Config{})
	w0 := slot(t, "w0")
	if err := r.Prepare(context.Background(), w0, spec("c1")); err != nil {
		t.Fatal(err)
	}
	if err := r.Prepare(context.Background(), w0, spec("c1")); err == nil {
		t.Fatal("second Prepare of the same id succeeded")
	}
	if r.Prepared() != 1 || r.Len() != 0 {
		t.Fatalf("prepared %d, running %d; want 1, 0", r.Prepared(), r.Len())
	}
	s := spec("c1")
	s.Prepared = true
	if err := r.Run(context.Background(), w0, s); err != nil {
		t.Fatal(err)
	}
	mustGet(t, r, w0, "/", "count=1\n")
	if r.Prepared() != 0 {
		t.Fatal("a started prepared container is still counted as prepared")
	}
	if err := r.Destroy(context.Background(), w0, "c1"); err != nil {
		t.Fatal(err)
	}
	if err := r.Prepare(context.Background(), w0, spec("c2")); err != nil {
		t.Fatal(err)
	}
	if err := r.Destroy(context.Background(), w0, "c2"); err != nil {
		t.Fatal(err)
	}
	if r.Prepared() != 0 {
		t.Fatal("Destroy left a prepared container")
	}
}
