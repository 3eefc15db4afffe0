package node

import (
	"errors"
	"io"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"

	"substrate.dev/ate/internal/sandbox/fake"
	"substrate.dev/ate/internal/testwait"
)

// TestCopyOutOfFIFO: an actor that makes the file `ate cp` reads a FIFO
// gets ErrNotRegular at once, not a node goroutine blocked until a
// writer comes.
func TestCopyOutOfFIFO(t *testing.T) {
	n := newTestNodeWith(t, fake.New(fake.Config{}), true)
	w := n.order[0]
	if err := n.Start(t.Context(), StartRequest{Worker: w, ActorUID: "a", Atespace: "ns", Name: "a", Spec: template("img1")}); err != nil {
		t.Fatal(err)
	}
	s, _ := n.slot(w)
	s.mu.Lock()
	dir := s.volumes[0].hostDir
	s.mu.Unlock()
	// What the actor does inside its volume.
	if err := syscall.Mkfifo(filepath.Join(dir, "pipe"), 0o644); err != nil {
		t.Fatal(err)
	}
	var done atomic.Bool
	var err error
	go func() {
		_, err = n.CopyOut(t.Context(), w, "a", "/data/pipe", io.Discard)
		done.Store(true)
	}()
	testwait.Until(t, "CopyOut of a FIFO to return", done.Load)
	if !errors.Is(err, ErrNotRegular) {
		t.Fatalf("CopyOut of a FIFO: %v, want ErrNotRegular", err)
	}
}
