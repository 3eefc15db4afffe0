package up

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"substrate.dev/ate/internal/node"
	"substrate.dev/ate/internal/sandbox/fake"
	"substrate.dev/ate/internal/store/bolt"
)

// TestNewControlPlaneFailureClosesCleanly: a build that fails part-way
// returns its error and releases what it built (the store's file lock),
// rather than closing a nil control plane.
func TestNewControlPlaneFailureClosesCleanly(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mkdir  bool   // create block as a directory (else as a file)
		block  string // path in the data dir that makes the build fail
		opened bool   // the store was opened before the failure
	}{
		{"store cannot open", true, DBName, false},
		{"snapshots cannot open", false, "snapshots", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, tc.block)
			var err error
			if tc.mkdir {
				err = os.Mkdir(p, 0o700)
			} else {
				err = os.WriteFile(p, nil, 0o600)
			}
			if err != nil {
				t.Fatal(err)
			}
			cp, err := NewControlPlane(context.Background(), ControlPlaneConfig{DataDir: dir})
			if err == nil || cp != nil {
				t.Fatalf("NewControlPlane = %v, %v; want an error", cp, err)
			}
			if !tc.opened {
				return
			}
			st, err := bolt.Open(filepath.Join(dir, DBName), 100*time.Millisecond)
			if err != nil {
				t.Fatalf("store still locked after the failed build: %v", err)
			}
			_ = st.Close()
		})
	}
}

// TestControlPlaneStart: Start runs the snapshot collection and returns
// nil once its context ends; Close also ends it.
func TestControlPlaneStart(t *testing.T) {
	for _, viaClose := range []bool{false, true} {
		t.Run(map[bool]string{false: "context ends", true: "close"}[viaClose], func(t *testing.T) {
			rt := fake.New(fake.Config{})
			defer rt.Close()
			cp, err := NewControlPlane(t.Context(), ControlPlaneConfig{DataDir: t.TempDir(), Node: node.Config{
				Workers: 1, WorkerPrefix: "t", SandboxClass: fake.Class, Runtime: rt, Setup: fake.Setup, TunnelAddr: "127.0.0.1:0"}})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- cp.Start(ctx) }()
			select {
			case <-cp.SnapshotGCDone():
			case <-time.After(10 * time.Second):
				t.Fatal("snapshot collection did not finish")
			}
			if viaClose {
				if err := cp.Close(); err != nil {
					t.Fatal(err)
				}
			} else {
				cancel()
			}
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Start = %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Start did not return")
			}
			if err := cp.Start(t.Context()); err == nil {
				t.Error("second Start: no error")
			}
			if !viaClose {
				if err := cp.Close(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestRestartWithFewerWorkers: workers a previous run registered and this
// one does not have are unregistered at start-up, so no resume is handed
// a worker that does not exist (it failed every time, and nothing was
// evicted because the store showed free workers).
func TestRestartWithFewerWorkers(t *testing.T) {
	dir := t.TempDir()
	rt := fake.New(fake.Config{})
	defer rt.Close()
	open := func(workers int) *ControlPlane {
		t.Helper()
		cp, err := NewControlPlane(t.Context(), ControlPlaneConfig{DataDir: dir, Node: node.Config{
			Workers: workers, WorkerPrefix: "t", SandboxClass: fake.Class, Runtime: rt, Setup: fake.Setup, TunnelAddr: "127.0.0.1:0"}})
		if err != nil {
			t.Fatal(err)
		}
		return cp
	}
	cp := open(4)
	if err := cp.Close(); err != nil {
		t.Fatal(err)
	}

	cp = open(2)
	defer cp.Close()
	ws, err := cp.Store.ListWorkers(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, w := range ws {
		got = append(got, w.Name)
	}
	if want := []string{"t-w0", "t-w1"}; !slices.Equal(got, want) {
		t.Fatalf("workers after restarting with 2: %v, want %v", got, want)
	}
}
