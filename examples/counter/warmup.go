package main

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"
)

// warmup makes the counter behave like an app that needs time after a
// restore before it can serve (reconnecting to a database, refilling a
// cache), so tests can check that traffic waits for the wakeup probe. It
// is off unless WARMUP_MS is set.
//
// A restore shows as a jump of the wall clock, larger than
// RESTORE_GAP_MS (default 1000), since the last observation: a 50 ms
// ticker's, or a request's — whichever runs first after the restore, so
// the very first probe already sees it. For WARMUP_MS after that, GET
// /ready (the probe) and GET /warm answer 503 "warming up".
type warmup struct {
	d, gap time.Duration
	// last is the UnixNano wall time of the last observation; until the
	// one before which the counter is not ready.
	last, until atomic.Int64
}

func newWarmup(d, gap time.Duration) *warmup {
	w := &warmup{d: d, gap: gap}
	w.last.Store(time.Now().UnixNano())
	return w
}

// observe notes the wall time now, starting a warm-up if it jumped.
func (w *warmup) observe(now time.Time) {
	ns := now.UnixNano() // wall clock: the monotonic one stood still while frozen
	if prev := w.last.Swap(ns); ns-prev > int64(w.gap) {
		w.until.Store(ns + int64(w.d))
	}
}

// ready reports whether the counter is past its warm-up.
func (w *warmup) ready() bool {
	if w == nil {
		return true
	}
	now := time.Now()
	w.observe(now)
	return now.UnixNano() >= w.until.Load()
}

// watch observes the clock every 50 ms until ctx ends.
func (w *warmup) watch(ctx context.Context) {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			w.observe(now)
		}
	}
}

// register adds GET /ready (the wakeup probe) and GET /warm; w may be nil
// (always ready).
func (w *warmup) register(mux *http.ServeMux) {
	h := func(rw http.ResponseWriter, _ *http.Request) {
		if !w.ready() {
			http.Error(rw, "warming up", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(rw, "ready\n")
	}
	mux.HandleFunc("GET /ready", h)
	mux.HandleFunc("GET /warm", h)
}
