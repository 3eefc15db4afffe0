package controller

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
)

func TestHealthReady(t *testing.T) {
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", errors.New(`User "u" cannot list resource "pods"`))
	tests := []struct {
		name  string
		steps func(h *health)
		want  []string // substrings of the error; nil: ready
	}{
		{name: "standby: no paths", steps: func(*health) {}},
		{name: "syncing", steps: func(h *health) { h.starting("p", []string{"pods"}) }, want: []string{"controller p: watches of pods not synced yet"}},
		{name: "synced", steps: func(h *health) { h.starting("p", []string{"pods"}); h.synced("p") }},
		{name: "refused, then timed out", steps: func(h *health) {
			h.starting("p", []string{"pods"})
			h.watchError(t.Context(), toolscache.NewReflector(nil, nil, nil, 0), forbidden)
			h.failed("p", errors.New("watches of pods not synced after 30s"))
		}, want: []string{"controller p: watches of pods not synced after 30s", `watch of pods refused`, `cannot list resource "pods"`}},
		{name: "refusal over once synced", steps: func(h *health) {
			h.starting("p", []string{"pods"})
			h.watchError(t.Context(), toolscache.NewReflector(nil, nil, nil, 0), forbidden)
			h.synced("p")
		}},
		{name: "refused after start-up counts", steps: func(h *health) {
			h.starting("p", []string{"pods"})
			h.synced("p")
			h.watchError(t.Context(), toolscache.NewReflector(nil, nil, nil, 0), forbidden)
		}, want: []string{`watch of pods refused`}},
		{name: "refused after start-up, then silent past the TTL: over", steps: func(h *health) {
			h.starting("p", []string{"pods"})
			h.synced("p")
			h.watchError(t.Context(), toolscache.NewReflector(nil, nil, nil, 0), forbidden)
			later := time.Now().Add(refusalTTL + time.Second)
			h.now = func() time.Time { return later }
		}},
		{name: "other errors are not refusals", steps: func(h *health) {
			h.starting("p", []string{"pods"})
			h.synced("p")
			h.watchError(t.Context(), toolscache.NewReflector(nil, nil, nil, 0), errors.New("connection refused"))
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHealth(slog.New(slog.DiscardHandler))
			tc.steps(h)
			err := h.ready()
			if tc.want == nil {
				if err != nil {
					t.Fatalf("not ready: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("ready")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%q lacks %q", err, w)
				}
			}
		})
	}
}
