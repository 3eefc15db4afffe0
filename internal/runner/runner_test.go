package runner

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"substrate.dev/ate/internal/testwait"
)

// recorder logs what the parts do, in order.
type recorder struct {
	mu  sync.Mutex
	log []string
}

func (r *recorder) add(s string) {
	r.mu.Lock()
	r.log = append(r.log, s)
	r.mu.Unlock()
}

func (r *recorder) got() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.log)
}

// serving is a part that records its start, signals started, serves
// until its context ends and records its end.
func serving(rec *recorder, name string, started *sync.WaitGroup) func(context.Context) error {
	started.Add(1)
	return func(ctx context.Context) error {
		rec.add("start " + name)
		started.Done()
		<-ctx.Done()
		rec.add("stop " + name)
		return nil
	}
}

func TestRunStopsInReverseOrder(t *testing.T) {
	for _, tc := range []struct {
		name string
		// fail makes part "b" fail instead of the context ending.
		fail bool
		want []string
	}{
		{name: "context ends", want: []string{"stop c", "suspend all", "stop b", "stop a"}},
		{name: "a part fails", fail: true, want: []string{"stop c", "suspend all", "stop a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{}
			var started sync.WaitGroup
			r := New(nil)
			r.Add("a", serving(rec, "a", &started))
			boom := errors.New("boom")
			release := make(chan struct{})
			if tc.fail {
				r.Add("b", func(context.Context) error { <-release; return boom })
			} else {
				r.Add("b", serving(rec, "b", &started))
			}
			r.AddStop("suspend all", func(context.Context) error {
				rec.add("suspend all")
				// Parts added before the step still serve: b's and a's
				// ends come after.
				if slices.Contains(rec.got(), "stop a") {
					t.Error("a stopped before the stop step ran")
				}
				return nil
			})
			r.Add("c", serving(rec, "c", &started))
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- r.Run(ctx) }()
			started.Wait()
			testwait.Until(t, "the runner ready", func() bool { return r.Ready() == nil })
			if tc.fail {
				close(release)
			} else {
				cancel()
			}
			err := <-done
			if tc.fail != errors.Is(err, boom) {
				t.Fatalf("Run = %v, want boom: %v", err, tc.fail)
			}
			var stops []string
			for _, s := range rec.got() {
				if s[:5] != "start" {
					stops = append(stops, s)
				}
			}
			if !slices.Equal(stops, tc.want) {
				t.Fatalf("stop order %q, want %q", stops, tc.want)
			}
			if err := r.Ready(); err == nil {
				t.Fatal("Ready after the stop: nil, want an error")
			}
		})
	}
}

func TestReady(t *testing.T) {
	r := New(nil)
	if err := r.Ready(); err == nil {
		t.Fatal("Ready before Run: nil")
	}
	registered := errors.New("not registered")
	var mu sync.Mutex
	cond := registered
	r.ReadyWhen("node", func() error { mu.Lock(); defer mu.Unlock(); return cond })
	var started sync.WaitGroup
	rec := &recorder{}
	r.Add("a", serving(rec, "a", &started))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	started.Wait()
	// Run marks itself running right after starting the parts' goroutines.
	testwait.Until(t, "the runner running", func() bool { return errors.Is(r.Ready(), registered) })
	if err := r.Ready(); !errors.Is(err, registered) {
		t.Fatalf("Ready with a failing condition: %v", err)
	}
	mu.Lock()
	cond = nil
	mu.Unlock()
	if err := r.Ready(); err != nil {
		t.Fatalf("Ready: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
