package apiserver

import (
	"context"
	"errors"
	"net"
	"testing"

	"google.golang.org/grpc/peer"

	"substrate.dev/ate/internal/auth"
)

// TestCallerStreams: each caller — a user wherever it calls from, a
// component, an unauthenticated client by its address — has its own
// places; a user named like a component does not take the component's; a
// release gives exactly one place back, however often it is called.
func TestCallerStreams(t *testing.T) {
	from := func(p *auth.Principal, addr string) context.Context {
		ctx := context.Background()
		if p != nil {
			ctx = auth.NewContext(ctx, p)
		}
		if addr != "" {
			ctx = peer.NewContext(ctx, &peer.Peer{Addr: &net.TCPAddr{IP: net.ParseIP(addr), Port: 40000}})
		}
		return ctx
	}
	router := &auth.Identity{Component: auth.ComponentRouter, Name: "r1"}
	alice := from(&auth.Principal{Name: "alice"}, "10.0.0.1")
	callers := []struct {
		name string
		ctx  context.Context
	}{
		{"user", alice},
		{"another user from the same address", from(&auth.Principal{Name: "bob"}, "10.0.0.1")},
		{"component", from(&auth.Principal{Component: router}, "")},
		{"user named as the component", from(&auth.Principal{Name: "component:router/r1"}, "")},
		{"unauthenticated", from(nil, "10.0.0.2")},
		{"unauthenticated elsewhere", from(nil, "10.0.0.3")},
	}
	c := &callerStreams{max: 2}
	for _, tc := range callers {
		t.Run(tc.name, func(t *testing.T) {
			for i := range c.max {
				if _, err := c.acquire(tc.ctx); err != nil {
					t.Fatalf("place %d: %v", i+1, err)
				}
			}
			if _, err := c.acquire(tc.ctx); !errors.Is(err, errTooManyStreams) {
				t.Fatalf("one over the cap: %v, want errTooManyStreams", err)
			}
		})
	}
	if _, err := c.acquire(from(&auth.Principal{Name: "alice"}, "10.0.0.9")); !errors.Is(err, errTooManyStreams) {
		t.Fatalf("alice from another address: %v, want errTooManyStreams (the same caller)", err)
	}
	fresh := &callerStreams{max: 2}
	release, err := fresh.acquire(alice)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fresh.acquire(alice); err != nil {
		t.Fatal(err)
	}
	release()
	release()
	if _, err := fresh.acquire(alice); err != nil {
		t.Fatalf("after a release: %v", err)
	}
	if _, err := fresh.acquire(alice); !errors.Is(err, errTooManyStreams) {
		t.Fatalf("a second release gave back a second place: %v", err)
	}
}
