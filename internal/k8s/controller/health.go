package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	toolscache "k8s.io/client-go/tools/cache"
)

// health is what /readyz reports: every controller (reconcile path) of
// the leader whose watches have not synced, and every watch the
// Kubernetes API server refused (403/401) since its controller last
// synced. A standby runs no controller and is ready.
type health struct {
	mu          sync.Mutex
	controllers map[string]*controllerHealth // by controller name
	// refused is by resource ("pods"); cleared when a controller
	// watching it syncs, and when no refusal came for refusalTTL (the
	// reflector retries a refused list at least every 30 s, its
	// backoff's cap in client-go, so silence means it lists again: a
	// permission granted back after start-up, a token rotation hiccup).
	refused map[string]refusal
	log     *slog.Logger
	now     func() time.Time
}

type refusal struct {
	err  error
	seen time.Time
}

// refusalTTL is how long a refused watch counts against /readyz after
// its last refusal: three of the reflector's longest retry intervals.
const refusalTTL = 90 * time.Second

type controllerHealth struct {
	resources []string
	synced    bool
	err       error // the last failed attempt's, nil while the first runs
}

func newHealth(log *slog.Logger) *health {
	return &health{controllers: map[string]*controllerHealth{}, refused: map[string]refusal{}, log: log, now: time.Now}
}

// starting records that controller name, watching resources, is
// waiting for its watches.
func (h *health) starting(name string, resources []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.controllers[name]
	if c == nil {
		c = &controllerHealth{resources: resources}
		h.controllers[name] = c
	}
	c.synced = false
}

// failed records why controller name's watches did not sync.
func (h *health) failed(name string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if c := h.controllers[name]; c != nil {
		c.err = err
	}
}

// synced records that controller name's watches synced: the refusals of
// its resources are over.
func (h *health) synced(name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.controllers[name]
	if c == nil {
		return
	}
	c.synced, c.err = true, nil
	for _, r := range c.resources {
		delete(h.refused, r)
	}
}

// watchError is the caches' WatchErrorHandler: every failed list or
// watch of an informer comes here. A refusal (403, 401) is kept for
// /readyz under its resource and logged at error level, naming the
// resource and verb (the API server's message does: `pods is forbidden:
// User "x" cannot list resource "pods" …`); other errors (a restarting
// API server) are logged only, since the reflector retries them.
func (h *health) watchError(ctx context.Context, r *toolscache.Reflector, err error) {
	// client-go's own handler still logs every failure its way (and
	// knows an expired watch is routine): ours adds to it.
	toolscache.DefaultWatchErrorHandler(ctx, r, err)
	var status apierrors.APIStatus
	if (apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err)) && errors.As(err, &status) {
		resource := r.TypeDescription()
		if d := status.Status().Details; d != nil && d.Kind != "" {
			resource = d.Kind
		}
		h.mu.Lock()
		h.refused[resource] = refusal{err: err, seen: h.now()}
		h.mu.Unlock()
		h.log.Error("watch refused by the Kubernetes API server: grant the controller this permission",
			"resource", resource, "type", r.TypeDescription(), "err", err)
	}
}

// ready is /readyz: nil, or an error naming each problem (controllers
// not synced, refused resources), sorted so the text is stable.
func (h *health) ready() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	var problems []string
	for name, c := range h.controllers {
		switch {
		case c.synced:
		case c.err != nil:
			problems = append(problems, fmt.Sprintf("controller %s: %v", name, c.err))
		default:
			problems = append(problems, fmt.Sprintf("controller %s: watches of %s not synced yet", name, strings.Join(c.resources, ", ")))
		}
	}
	for r, ref := range h.refused {
		if h.now().Sub(ref.seen) > refusalTTL {
			delete(h.refused, r)
			continue
		}
		problems = append(problems, fmt.Sprintf("watch of %s refused: %v", r, ref.err))
	}
	if len(problems) == 0 {
		return nil
	}
	slices.Sort(problems)
	return errors.New(strings.Join(problems, "; "))
}

// refusals returns the refused watches of resources, for a controller's
// error ("" when none).
func (h *health) refusals(resources []string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, r := range resources {
		if ref, ok := h.refused[r]; ok && h.now().Sub(ref.seen) <= refusalTTL {
			out = append(out, ref.err.Error())
		}
	}
	return strings.Join(out, "; ")
}

// syncTimeoutError says a controller's watches did not sync in time, and
// why when the API server refused one.
func syncTimeoutError(after time.Duration, resources []string, refusals string, err error) error {
	if refusals != "" {
		return fmt.Errorf("watches of %s not synced after %v (%s): %w", strings.Join(resources, ", "), after, refusals, err)
	}
	return fmt.Errorf("watches of %s not synced after %v: %w", strings.Join(resources, ", "), after, err)
}
