package apiserver

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"substrate.dev/ate/internal/store"
	"substrate.dev/ate/internal/store/bolt"
	"substrate.dev/ate/internal/testwait"
)

// pingStore is a record store whose Ping answers as told: the database
// reached, refusing, or not answering at all (a partition).
type pingStore struct {
	store.Store
	answer atomic.Int32 // pingOK, pingRefused or pingSilent
	pings  atomic.Int64
}

const (
	pingOK int32 = iota
	pingRefused
	pingSilent
	// pingRefusedOnce: the next ping is refused, the ones after answer.
	pingRefusedOnce
)

func (s *pingStore) Ping(ctx context.Context) error {
	s.pings.Add(1)
	if s.answer.CompareAndSwap(pingRefusedOnce, pingOK) {
		return store.ErrUnavailable
	}
	switch s.answer.Load() {
	case pingRefused:
		return store.ErrUnavailable
	case pingSilent:
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

// TestStoreHealth: the health check says NOT_SERVING while the store's
// pings fail — refused, or unanswered past their timeout — and SERVING
// again once one succeeds; one failed ping alone changes nothing; a
// store that cannot be pinged (bbolt, in this process) is always
// SERVING.
func TestStoreHealth(t *testing.T) {
	st := &pingStore{}
	h := NewStoreHealth(st, slog.New(slog.DiscardHandler))
	h.every, h.timeout = 5*time.Millisecond, 50*time.Millisecond
	ctx, cancel := context.WithCancel(t.Context())
	ran := make(chan error, 1)
	go func() { ran <- h.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-ran; err != nil {
			t.Errorf("Run = %v", err)
		}
	}()
	status := func() healthpb.HealthCheckResponse_ServingStatus {
		r, err := h.Check(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatalf("Check: %v", err)
		}
		return r.GetStatus()
	}
	// Each state is judged after pings made in it (not the one before).
	after := func(what string, want healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		from := st.pings.Load()
		testwait.Until(t, what, func() bool { return st.pings.Load() >= from+2 && status() == want })
	}
	after("SERVING while the store answers", healthpb.HealthCheckResponse_SERVING)
	st.answer.Store(pingRefusedOnce)
	from, flipped := st.pings.Load(), false
	testwait.Until(t, "three pings around one refused", func() bool {
		flipped = flipped || status() != healthpb.HealthCheckResponse_SERVING
		return st.pings.Load() >= from+3
	})
	if flipped {
		t.Fatal("one refused ping made the health check say NOT_SERVING")
	}
	st.answer.Store(pingRefused)
	after("NOT_SERVING while the store refuses", healthpb.HealthCheckResponse_NOT_SERVING)
	st.answer.Store(pingOK)
	after("SERVING once the store answers again", healthpb.HealthCheckResponse_SERVING)
	st.answer.Store(pingSilent)
	after("NOT_SERVING while the store is silent", healthpb.HealthCheckResponse_NOT_SERVING)
	st.answer.Store(pingOK)
	after("SERVING once the silence ends", healthpb.HealthCheckResponse_SERVING)

	b, err := bolt.Open(t.TempDir()+"/ate.db", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	local := NewStoreHealth(b, slog.New(slog.DiscardHandler))
	if err := local.Run(t.Context()); err != nil {
		t.Fatalf("Run over bbolt = %v", err)
	}
	if r, err := local.Check(t.Context(), &healthpb.HealthCheckRequest{}); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("Check over bbolt = %v, %v; want SERVING", r, err)
	}
}
