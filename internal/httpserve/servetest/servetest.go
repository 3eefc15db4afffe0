// Package servetest runs an httpserve.Server for tests, the way both the
// server's own tests and its users' (the router) need it.
package servetest

import (
	"context"
	"sync"
	"testing"

	"substrate.dev/ate/internal/httpserve"
)

// Run listens with s and serves it until the returned stop is called (or
// the test ends); stop returns Start's error and may be called more than
// once. It fails the test if s cannot listen.
func Run(t testing.TB, s *httpserve.Server) (stop func() error) {
	t.Helper()
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	if s.Addr() == "" {
		t.Fatal("Addr empty after Listen")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Start(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			err = <-done
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}
