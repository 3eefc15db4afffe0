package resolver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	discoveryinformers "k8s.io/client-go/informers/discovery/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// DefaultSyncTimeout bounds how long Watch.WaitSynced waits for the
// first complete list of a Service's endpoints when Options.SyncTimeout
// is zero. A client that cannot list EndpointSlices (RBAC) retries
// forever inside client-go; the bound turns that into a start-up error.
const DefaultSyncTimeout = 30 * time.Second

// Options tune a Builder and its watches. The zero value is usable.
type Options struct {
	// SyncTimeout bounds the wait for a watch's first complete list
	// (WaitSynced); zero means DefaultSyncTimeout.
	SyncTimeout time.Duration
	// Namespace is the namespace of targets that name none; empty means
	// DefaultNamespace().
	Namespace string
	// Logger receives list, watch and Service lookup failures; nil means
	// slog.Default().
	Logger *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.SyncTimeout <= 0 {
		o.SyncTimeout = DefaultSyncTimeout
	}
	if o.Namespace == "" {
		o.Namespace = DefaultNamespace()
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// serviceNameLabel is the label the EndpointSlice controller (and anyone
// writing slices for a Service) puts on a Service's EndpointSlices.
const serviceNameLabel = discoveryv1.LabelServiceName

// EndpointSlice resource and verbs, named in errors and logs so an
// operator knows which Role rule is missing.
const (
	sliceResource   = "discovery.k8s.io/v1 endpointslices"
	serviceResource = "v1 services"
)

// update is what a watch tells its subscribers: the ready endpoints'
// addresses (host:port, sorted) or the error that keeps it from knowing
// them.
type update struct {
	addrs []string
	err   error
}

// Watch follows the ready endpoints of one Service port through a shared
// informer over the Service's EndpointSlices (label
// kubernetes.io/service-name, the Service's namespace only). It needs
// get on services (numeric ports only) and list and watch on
// endpointslices.discovery.k8s.io in that namespace. Safe for
// concurrent use.
type Watch struct {
	cs          kubernetes.Interface
	target      Target // Namespace filled in
	log         *slog.Logger
	syncTimeout time.Duration

	cancel context.CancelFunc
	done   chan struct{} // closed when every goroutine of the watch has returned
	synced chan struct{} // closed once the port is known and the cache has synced

	// sendMu is held while subscribers are told something, so each gets
	// the changes in order (a new subscriber's first state cannot
	// overtake a change sent meanwhile). Taken before mu.
	sendMu   sync.Mutex
	mu       sync.Mutex
	portName string // EndpointSlice port name the target's port maps to
	inf      cache.SharedIndexInformer
	last     update // most recent state, sent to new subscribers
	// listed is set once the cache has synced, just before last first
	// holds its addresses; synced is closed after, so a WaitSynced that
	// returns finds them (Addresses).
	listed   bool
	lastErr  error // most recent list, watch or get failure, for WaitSynced's message
	subs     map[int]func(update)
	nextSub  int
	stopOnce sync.Once
}

// StartWatch starts following t's endpoints and returns at once; the
// watch runs until Stop. opts as for NewBuilder.
func StartWatch(cs kubernetes.Interface, t Target, opts Options) *Watch {
	opts = opts.withDefaults()
	if t.Namespace == "" {
		t.Namespace = opts.Namespace
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &Watch{
		cs: cs, target: t, syncTimeout: opts.SyncTimeout,
		log:    opts.Logger.With("target", t.String(), "service", t.Service, "namespace", t.Namespace),
		cancel: cancel, done: make(chan struct{}), synced: make(chan struct{}),
		subs: map[int]func(update){},
	}
	go func() {
		defer close(w.done)
		w.run(ctx)
	}()
	return w
}

// Target returns the target followed, its namespace filled in.
func (w *Watch) Target() Target { return w.target }

// WaitSynced waits until the watch knows the Service's endpoints (the
// port's name is known and the informer's cache has synced), at most the
// sync timeout. Errors: ctx's, or one naming the permission missing
// ("cannot list discovery.k8s.io/v1 endpointslices in namespace X:
// grant list and watch …") with the last failure seen.
func (w *Watch) WaitSynced(ctx context.Context) error {
	timer := time.NewTimer(w.syncTimeout)
	defer timer.Stop()
	select {
	case <-w.synced:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("k8s resolver %s: waiting for the endpoints: %w", w.target, ctx.Err())
	case <-timer.C:
	}
	w.mu.Lock()
	portKnown, last := w.inf != nil, w.lastErr
	w.mu.Unlock()
	if !portKnown && errors.Is(last, errNoSuchPort) {
		return fmt.Errorf("k8s resolver %s: %w", w.target, last)
	}
	if !portKnown && apierrors.IsNotFound(last) {
		return fmt.Errorf("k8s resolver %s: no service %q in namespace %s (waited %s): %w", w.target, w.target.Service, w.target.Namespace, w.syncTimeout, last)
	}
	if !portKnown {
		return fmt.Errorf("k8s resolver %s: cannot get %s %q in namespace %s within %s: grant get on services in namespace %s to map port %s to its name: %w",
			w.target, serviceResource, w.target.Service, w.target.Namespace, w.syncTimeout, w.target.Namespace, w.target.Port, orTimeout(last))
	}
	return fmt.Errorf("k8s resolver %s: cannot list %s in namespace %s within %s: grant list and watch on endpointslices (API group discovery.k8s.io) in namespace %s: %w",
		w.target, sliceResource, w.target.Namespace, w.syncTimeout, w.target.Namespace, orTimeout(last))
}

// errNoSuchPort: the Service has no port of the target's number.
var errNoSuchPort = errors.New("no such Service port")

// errNoAnswer stands for the cause of a sync timeout with no failure seen.
var errNoAnswer = errors.New("no complete answer from the Kubernetes API server")

func orTimeout(err error) error {
	if err == nil {
		return errNoAnswer
	}
	return err
}

// Addresses returns the ready endpoints' addresses now (host:port,
// sorted, deduplicated), empty before the cache has synced.
func (w *Watch) Addresses() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.last.addrs)
}

// subscribe calls fn with the current state (once synced or failed) and
// every change after, from the informer's goroutine or the caller's,
// until the returned cancel is called. fn must not block.
func (w *Watch) subscribe(fn func(update)) (cancel func()) {
	w.sendMu.Lock()
	w.mu.Lock()
	id := w.nextSub
	w.nextSub++
	w.subs[id] = fn
	last, ready := w.last, w.listed || w.last.err != nil
	w.mu.Unlock()
	if ready {
		fn(last)
	}
	w.sendMu.Unlock()
	return func() {
		w.mu.Lock()
		delete(w.subs, id)
		w.mu.Unlock()
	}
}

// Stop ends the watch and waits for its goroutines. Idempotent.
func (w *Watch) Stop() {
	w.stopOnce.Do(w.cancel)
	<-w.done
}

// run resolves the port's name, then runs the informer until ctx ends.
func (w *Watch) run(ctx context.Context) {
	name, ok := w.resolvePort(ctx)
	if !ok {
		return
	}
	inf := discoveryinformers.NewFilteredEndpointSliceInformer(w.cs, w.target.Namespace, 0, cache.Indexers{},
		func(o *metav1.ListOptions) { o.LabelSelector = serviceNameLabel + "=" + w.target.Service })
	// Ours reports the failure to the connections and names the missing
	// permission; client-go's default handler still logs it its way
	// (and classifies expired watches as routine).
	if err := inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		cache.DefaultWatchErrorHandler(ctx, r, err)
		if !routineWatchEnd(err) {
			w.fail(sliceResource, err)
		}
	}); err != nil {
		w.log.Error("k8s resolver: installing the watch error handler", "err", err) // only fails once started
	}
	recompute := func(any) { w.recompute() }
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: recompute, DeleteFunc: recompute,
		UpdateFunc: func(_, obj any) { recompute(obj) },
	}); err != nil {
		w.log.Error("k8s resolver: adding the event handler", "err", err)
		return
	}
	w.mu.Lock()
	w.portName, w.inf = name, inf
	w.mu.Unlock()

	var wg sync.WaitGroup
	wg.Go(func() { inf.RunWithContext(ctx) })
	defer wg.Wait()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return // stopped
	}
	w.mu.Lock()
	w.listed = true
	w.mu.Unlock()
	w.recompute()
	close(w.synced)
	w.log.Debug("k8s resolver: endpoints synced", "addresses", w.Addresses())
}

// resolvePort returns the EndpointSlice port name the target's port
// stands for: the name itself, or, for a number, the name of the
// Service port with that number (so Service port 443 with targetPort
// 7070 dials 7070, the slices' port of that name). The Service is asked
// again with backoff until it answers or ctx ends.
func (w *Watch) resolvePort(ctx context.Context) (string, bool) {
	num, numeric := w.target.numericPort()
	if !numeric {
		return w.target.Port, true
	}
	backoff := 100 * time.Millisecond
	for {
		svc, err := w.cs.CoreV1().Services(w.target.Namespace).Get(ctx, w.target.Service, metav1.GetOptions{})
		if err == nil {
			var names []string
			for _, p := range svc.Spec.Ports {
				if p.Port == num {
					return p.Name, true // "" for an unnamed single port, as in its slices
				}
				names = append(names, fmt.Sprintf("%s=%d", p.Name, p.Port))
			}
			err = fmt.Errorf("service %s/%s has no port %d (its ports: %v): %w", w.target.Namespace, w.target.Service, num, names, errNoSuchPort)
		}
		if ctx.Err() != nil {
			return "", false
		}
		w.fail(serviceResource, err)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return "", false
		case <-t.C:
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// routineWatchEnd reports whether err is a watch ending the way watches
// do (closed by the server, or its resource version expired, which
// client-go answers with a fresh list): no failure to report.
func routineWatchEnd(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || apierrors.IsResourceExpired(err) || apierrors.IsGone(err)
}

// forbiddenVerb finds the verb in an RBAC refusal's message (`User "u"
// cannot list resource "endpointslices" …`).
var forbiddenVerb = regexp.MustCompile(`cannot (\w+) resource`)

// fail logs a list, watch or get failure on resource, naming the verb
// RBAC refused if it was a refusal, and reports it to every connection.
// After the first sync the connections keep the endpoints they have
// (grpc-go's balancers ignore a resolver error while they have
// addresses), which the cache still holds while client-go retries.
func (w *Watch) fail(resource string, err error) {
	attrs := []any{"resource", resource, "err", err}
	msg := "k8s resolver: looking up the endpoints failed; retrying"
	if apierrors.IsForbidden(err) {
		verb := "list and watch"
		if resource == serviceResource {
			verb = "get"
		}
		if m := forbiddenVerb.FindStringSubmatch(err.Error()); m != nil {
			verb = m[1]
		}
		msg = "k8s resolver: forbidden to " + verb + " " + resource + " (RBAC); retrying"
		attrs = append(attrs, "verb", verb)
	}
	w.log.Error(msg, attrs...)
	err = fmt.Errorf("k8s resolver %s: %s: %w", w.target, resource, err)
	w.sendMu.Lock()
	defer w.sendMu.Unlock()
	w.mu.Lock()
	w.lastErr = err
	if !w.listed {
		w.last = update{err: err} // what a connection subscribing now gets
	}
	subs := w.subscribers()
	w.mu.Unlock()
	for _, fn := range subs {
		fn(update{err: err})
	}
}

// subscribers returns the subscriber callbacks; w.mu must be held.
func (w *Watch) subscribers() []func(update) {
	out := make([]func(update), 0, len(w.subs))
	for _, fn := range w.subs {
		out = append(out, fn)
	}
	return out
}

// recompute derives the ready endpoints from the whole cache and, once
// synced, sends them to every subscriber if they changed.
func (w *Watch) recompute() {
	w.sendMu.Lock()
	defer w.sendMu.Unlock()
	w.mu.Lock()
	if !w.listed {
		w.mu.Unlock()
		return // the first complete list is sent once, not item by item
	}
	var list []*discoveryv1.EndpointSlice
	for _, o := range w.inf.GetStore().List() {
		if s, ok := o.(*discoveryv1.EndpointSlice); ok {
			list = append(list, s)
		}
	}
	addrs := ReadyAddresses(list, w.portName)
	if w.last.err == nil && w.last.addrs != nil && slices.Equal(w.last.addrs, addrs) {
		w.mu.Unlock()
		return
	}
	w.last = update{addrs: addrs}
	subs := w.subscribers()
	w.mu.Unlock()
	w.log.Info("k8s resolver: endpoints changed", "addresses", addrs)
	if names := portNames(list); len(addrs) == 0 && len(names) > 0 && !slices.Contains(names, w.portName) {
		// Most likely a typo in the target: say so rather than wait.
		w.log.Warn("k8s resolver: the service's EndpointSlices have no port of this name", "target", w.target.String(),
			"port", w.portName, "ports", names)
	}
	for _, fn := range subs {
		fn(update{addrs: addrs})
	}
}

// ReadyAddresses returns host:port of every endpoint of slices that is
// ready (conditions.ready true or unset, which the API defines as ready)
// and not terminating, at the slice's port named portName ("" matches an
// unnamed port); sorted, each address once even if several slices list
// it. A slice without that port contributes nothing. Never nil.
func ReadyAddresses(list []*discoveryv1.EndpointSlice, portName string) []string {
	out := []string{}
	for _, s := range list {
		port, ok := slicePort(s, portName)
		if !ok {
			continue
		}
		for _, ep := range s.Endpoints {
			c := ep.Conditions
			if (c.Ready != nil && !*c.Ready) || (c.Terminating != nil && *c.Terminating) {
				continue
			}
			for _, a := range ep.Addresses {
				out = append(out, net.JoinHostPort(a, strconv.Itoa(int(port))))
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// slicePort returns the number of s's port named name. A port with no
// number means "all ports" in the API and cannot be dialled.
func slicePort(s *discoveryv1.EndpointSlice, name string) (int32, bool) {
	for _, p := range s.Ports {
		pn := ""
		if p.Name != nil {
			pn = *p.Name
		}
		if pn == name && p.Port != nil {
			return *p.Port, true
		}
	}
	return 0, false
}

// portNames lists the port names of list's slices, sorted, once each.
func portNames(list []*discoveryv1.EndpointSlice) []string {
	var names []string
	for _, s := range list {
		for _, p := range s.Ports {
			if p.Name != nil {
				names = append(names, *p.Name)
			}
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}
