// Package alarm runs scheduled wake-ups of actors ("alarms",
// docs/alarms.md). An alarm is a record in the record store; a Scheduler
// in every API server keeps the due time of each pending alarm in memory,
// sleeps until the soonest, claims the alarm with a store lease (so of
// several API server replicas only one delivers it within a lease),
// resumes the actor through the normal resume path and sends it
// POST <path> with header Ate-Alarm-Id through its worker's tunnel.
//
// Delivery is at least once: an alarm is deleted only after the actor
// answered, so a crash between the answer and the delete delivers it
// again; actors de-duplicate by the id. A failed attempt (resume failed,
// the actor answered 5xx or could not be reached) is retried with
// exponential backoff until Config.RetryFor after the alarm's time, then
// the alarm is kept as FAILED with the reason.
package alarm

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base32"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"substrate.dev/ate/internal/metrics"
	"substrate.dev/ate/internal/names"
	"substrate.dev/ate/internal/nodeapi"
	"substrate.dev/ate/internal/store"
	"substrate.dev/ate/internal/tunnelproto"
)

// Headers of a delivery, besides the tunnel's.
const (
	// HeaderID carries the alarm's id: the same on every attempt, so the
	// actor de-duplicates by it.
	HeaderID = "Ate-Alarm-Id"
	// HeaderTime carries the time the alarm was set for, RFC 3339 with
	// nanoseconds, UTC.
	HeaderTime = "Ate-Alarm-Time"
	// HeaderAttempt counts delivery attempts, from 1.
	HeaderAttempt = "Ate-Alarm-Attempt"
)

// Resumer resumes actors: lifecycle.Manager, whose capacity and
// eviction rules apply to alarms as to any request.
type Resumer interface {
	Resume(ctx context.Context, key names.ActorKey) (*store.Actor, error)
}

// Idler puts away an actor an alarm woke once it is idle
// (lifecycle.Manager.PutAwayIfIdle): no router watches an actor no
// request through it woke. It returns when to ask again, zero when done.
type Idler interface {
	PutAwayIfIdle(ctx context.Context, key names.ActorKey, uid string) (time.Time, error)
}

// Config tunes a Scheduler; zero fields take the defaults.
type Config struct {
	// Holder names this API server in alarm leases; default "ate".
	// Replicas over one store need distinct names.
	Holder string
	// MaxPending is how many pending alarms one actor may have; default
	// DefaultMaxPending.
	MaxPending int
	// Refresh is how often the pending alarms are re-read from the store,
	// to learn of other replicas' writes; default 15 s.
	Refresh time.Duration
	// AttemptTimeout bounds one delivery attempt (resume + POST); the
	// alarm's lease lasts it plus 15 s. Default 60 s.
	AttemptTimeout time.Duration
	// RetryFor is how long after the alarm's time failed attempts are
	// retried before it is recorded FAILED; default 10 min.
	RetryFor time.Duration
	// Concurrency bounds the deliveries in flight (after a restart many
	// alarms may be due at once, each a resume); default 16.
	Concurrency int
	// RetryBase and RetryMax bound the backoff between attempts
	// (doubling from RetryBase); defaults 1 s and 1 min.
	RetryBase, RetryMax time.Duration
	// Metrics counts attempts; nil: none.
	Metrics *metrics.Alarms
	// Transport carries deliveries to worker tunnels; default a clone of
	// http.DefaultTransport without proxies.
	Transport http.RoundTripper
	// TunnelTLS, if set, is the TLS config of connections to worker
	// tunnels; requests carry the worker's node in their context
	// (tunnelproto.WithNode) for a Transport that accepts only that
	// node's certificate (pki.NodeTransport, as the API server wires it).
	// TunnelTLS alone is the TLS config of connections to worker
	// tunnels (mutual TLS, internal/pki): deliveries go to https:// and
	// the default Transport uses it.
	TunnelTLS *tls.Config
}

func (c Config) withDefaults() Config {
	if c.Holder == "" {
		c.Holder = "ate"
	}
	if c.MaxPending <= 0 {
		c.MaxPending = DefaultMaxPending
	}
	if c.Refresh <= 0 {
		c.Refresh = 15 * time.Second
	}
	if c.AttemptTimeout <= 0 {
		c.AttemptTimeout = time.Minute
	}
	if c.RetryFor <= 0 {
		c.RetryFor = 10 * time.Minute
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 16
	}
	if c.RetryBase <= 0 {
		c.RetryBase = time.Second
	}
	if c.RetryMax <= 0 {
		c.RetryMax = time.Minute
	}
	if c.Transport == nil {
		t := NewTunnelTransport()
		t.TLSClientConfig = c.TunnelTLS
		c.Transport = t
	}
	return c
}

// NewTunnelTransport is the default transport of deliveries: a clone of
// http.DefaultTransport without proxies (tunnels are on the cluster
// network).
func NewTunnelTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil
	return t
}

// deliverFunc makes one delivery attempt of a (attempt counts from 1).
type deliverFunc func(ctx context.Context, a *store.Alarm, attempt int) error

// Scheduler sets, lists, cancels and fires alarms. Safe for concurrent
// use; Run fires them.
type Scheduler struct {
	st      store.Store
	resumer Resumer
	cfg     Config
	log     *slog.Logger
	client  *http.Client
	// scheme is the tunnels' URL scheme: https with TunnelTLS.
	scheme  string
	deliver deliverFunc
	now     func() time.Time

	mu sync.Mutex
	// due is each known pending alarm's next attempt.
	due map[string]time.Time
	// inflight holds alarms being delivered by this scheduler.
	inflight map[string]bool
	// set holds when this scheduler set each alarm it set since the last
	// refresh began, so a refresh that read the store before the alarm
	// was written does not forget it.
	set map[string]time.Time
	// watch holds, per actor an alarm woke, the incarnation and when to
	// ask the Idler whether it is idle; watching marks those being asked.
	watch    map[names.ActorKey]idleWatch
	watching map[names.ActorKey]bool
	// wake is signalled when due changed (Set, Cancel).
	wake chan struct{}
	// attempts bounds the deliveries in flight.
	attempts sync.WaitGroup
}

// New returns a Scheduler over st that resumes actors with r.
func New(st store.Store, r Resumer, cfg Config, log *slog.Logger) *Scheduler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg = cfg.withDefaults()
	s := &Scheduler{st: st, resumer: r, cfg: cfg, log: log.With("component", "alarms"),
		client: &http.Client{Transport: cfg.Transport, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
		now:    time.Now, due: map[string]time.Time{}, inflight: map[string]bool{}, set: map[string]time.Time{},
		watch: map[names.ActorKey]idleWatch{}, watching: map[names.ActorKey]bool{}, wake: make(chan struct{}, 1)}
	s.scheme = "http"
	if cfg.TunnelTLS != nil {
		s.scheme = "https"
	}
	s.deliver = s.deliverHTTP
	return s
}

// newID returns a fresh alarm id: 20 lowercase base32 characters (100
// random bits).
func newID() string {
	var b [13]byte
	_, _ = rand.Read(b[:])
	return strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]))[:20]
}

// Set schedules an alarm for actor key at at, delivered to path. Errors:
// ErrInvalid (path or time, Validate), store.ErrNotFound (no such actor),
// store.ErrTooMany (the actor has MaxPending pending alarms).
func (s *Scheduler) Set(ctx context.Context, key names.ActorKey, at time.Time, path string) (*store.Alarm, error) {
	now := s.now()
	if err := Validate(now, at, path); err != nil {
		return nil, err
	}
	act, err := s.st.GetActor(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("set alarm: %w", err)
	}
	return s.create(ctx, act, at, path, now)
}

// SetSelf is the self-service alarms call: the actor incarnation
// actorUID on worker sent body, a Request (ParseRequest). Errors as
// SetFor; ErrInvalid also for a body that is not a Request.
func (s *Scheduler) SetSelf(ctx context.Context, worker, actorUID string, body []byte) (*store.Alarm, error) {
	at, path, err := ParseRequest(s.now(), body)
	if err != nil {
		return nil, err
	}
	return s.SetFor(ctx, worker, actorUID, at, path)
}

// SetFor schedules an alarm for the actor incarnation actorUID hosted by
// worker (the self-service endpoint's caller). Errors: ErrInvalid,
// nodeapi.ErrNotHosted when worker does not host actorUID now (either
// record is gone, or another incarnation holds the worker),
// store.ErrTooMany, the store's.
func (s *Scheduler) SetFor(ctx context.Context, worker, actorUID string, at time.Time, path string) (*store.Alarm, error) {
	now := s.now()
	if err := Validate(now, at, path); err != nil {
		return nil, err
	}
	w, err := s.st.GetWorker(ctx, worker)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, fmt.Errorf("set alarm: worker %s is not registered: %w", worker, nodeapi.ErrNotHosted)
	case err != nil:
		return nil, fmt.Errorf("set alarm: worker %s: %w", worker, err)
	case w.ActorUID != actorUID || w.Actor.IsZero():
		return nil, fmt.Errorf("set alarm: worker %s no longer hosts actor %s: %w", worker, actorUID, nodeapi.ErrNotHosted)
	}
	act, err := s.st.GetActor(ctx, w.Actor)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, fmt.Errorf("set alarm: actor %s is gone: %w", w.Actor, nodeapi.ErrNotHosted)
	case err != nil:
		return nil, fmt.Errorf("set alarm: %w", err)
	case act.UID != actorUID:
		return nil, fmt.Errorf("set alarm: actor %s is another incarnation now: %w", w.Actor, nodeapi.ErrNotHosted)
	}
	a, err := s.create(ctx, act, at, path, now)
	if errors.Is(err, store.ErrNotFound) {
		// Deleted since it was read.
		return nil, fmt.Errorf("set alarm: actor %s is gone: %w", w.Actor, nodeapi.ErrNotHosted)
	}
	return a, err
}

func (s *Scheduler) create(ctx context.Context, act *store.Actor, at time.Time, path string, now time.Time) (*store.Alarm, error) {
	a := &store.Alarm{ID: newID(), Atespace: act.Atespace, Actor: act.Name, ActorUID: act.UID, Path: path,
		At: at.UTC(), NextAttempt: at.UTC(), State: store.AlarmPending, CreateTime: now.UTC()}
	if err := s.st.CreateAlarm(ctx, a, s.cfg.MaxPending); err != nil {
		return nil, fmt.Errorf("set alarm for %s: %w", act.Key(), err)
	}
	s.log.InfoContext(ctx, "alarm set", "alarm", a.ID, "actor", act.Key(), "at", a.At, "path", path)
	s.mu.Lock()
	s.due[a.ID] = a.NextAttempt
	s.set[a.ID] = s.now()
	s.mu.Unlock()
	s.kick()
	return a, nil
}

// List returns the alarms of atespace (all when empty), of actor only
// when it is set, soonest first.
func (s *Scheduler) List(ctx context.Context, atespace, actor string) ([]*store.Alarm, error) {
	return s.st.ListAlarms(ctx, atespace, actor)
}

// Cancel deletes alarm id; store.ErrNotFound when there is none. A
// delivery already under way still completes.
func (s *Scheduler) Cancel(ctx context.Context, id string) error {
	if err := s.st.DeleteAlarm(ctx, id); err != nil {
		return fmt.Errorf("cancel alarm: %w", err)
	}
	s.mu.Lock()
	delete(s.due, id)
	s.mu.Unlock()
	s.kick()
	return nil
}

func (s *Scheduler) kick() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Run fires alarms until ctx ends, then waits for deliveries under way
// (each bounded by AttemptTimeout) and returns nil. A failed read of the
// store is logged and retried at the next refresh.
func (s *Scheduler) Run(ctx context.Context) error {
	defer s.attempts.Wait()
	var lastRefresh time.Time
	for {
		if s.now().Sub(lastRefresh) >= s.cfg.Refresh {
			if err := s.refresh(ctx); err != nil && ctx.Err() == nil {
				s.log.WarnContext(ctx, "read alarms", "err", err)
			}
			lastRefresh = s.now()
		}
		next := s.fireDue(ctx)
		wait := lastRefresh.Add(s.cfg.Refresh).Sub(s.now())
		if !next.IsZero() {
			wait = min(wait, next.Sub(s.now()))
		}
		timer := time.NewTimer(max(wait, 0))
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-s.wake:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// refresh replaces the known due times with the store's pending alarms.
func (s *Scheduler) refresh(ctx context.Context) error {
	began := s.now()
	all, err := s.st.ListAlarms(ctx, "", "")
	if err != nil {
		return err
	}
	due := make(map[string]time.Time, len(all))
	for _, a := range all {
		if a.State == store.AlarmPending {
			due[a.ID] = a.NextAttempt
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, at := range s.set {
		if at.Before(began) {
			delete(s.set, id) // the read saw it, or its deletion
			continue
		}
		if t, ok := s.due[id]; ok {
			due[id] = t // set while the read ran
		}
	}
	s.due = due
	return nil
}

// fireDue starts a delivery of every due alarm not already in flight, in
// due order, up to Config.Concurrency in flight (the rest start as
// deliveries end), and returns the soonest due time of the others (zero
// when none).
func (s *Scheduler) fireDue(ctx context.Context) time.Time {
	now := s.now()
	s.mu.Lock()
	var ready []string
	var next time.Time
	for id, t := range s.due {
		switch {
		case s.inflight[id]:
		case !t.After(now):
			ready = append(ready, id)
		case next.IsZero() || t.Before(next):
			next = t
		}
	}
	sortByDue(ready, s.due)
	ready = ready[:min(len(ready), max(s.cfg.Concurrency-len(s.inflight), 0))]
	for _, id := range ready {
		s.inflight[id] = true
	}
	var idle []names.ActorKey
	for k, w := range s.watch {
		switch {
		case s.watching[k]:
		case !w.at.After(now):
			idle = append(idle, k)
			s.watching[k] = true
		case next.IsZero() || w.at.Before(next):
			next = w.at
		}
	}
	s.mu.Unlock()
	for _, k := range idle {
		s.attempts.Go(func() {
			defer s.kick()
			s.checkIdle(ctx, k)
		})
	}
	for _, id := range ready {
		s.attempts.Go(func() {
			defer func() {
				s.mu.Lock()
				delete(s.inflight, id)
				s.mu.Unlock()
				s.kick()
			}()
			s.fire(ctx, id)
		})
	}
	return next
}

// sortByDue orders ids by due time, then id.
func sortByDue(ids []string, due map[string]time.Time) {
	for i := 1; i < len(ids); i++ {
		for j := i; j > 0 && less(ids[j], ids[j-1], due); j-- {
			ids[j], ids[j-1] = ids[j-1], ids[j]
		}
	}
}

func less(a, b string, due map[string]time.Time) bool {
	if c := due[a].Compare(due[b]); c != 0 {
		return c < 0
	}
	return a < b
}

// leaseKey is alarm id's lease in the store.
func leaseKey(id string) string { return "alarm/" + id }

// fire claims alarm id, delivers it if it is still due, and records the
// outcome. Another replica's claim, or an alarm gone or rescheduled
// meanwhile, ends it quietly.
func (s *Scheduler) fire(runCtx context.Context, id string) {
	// The store writes finish even when Run is ending; the attempt
	// itself ends with Run (the alarm stays pending and is delivered
	// after the restart).
	ctx, cancelWrites := context.WithTimeout(context.WithoutCancel(runCtx), s.cfg.AttemptTimeout+15*time.Second)
	defer cancelWrites()
	_, err := s.st.AcquireLease(ctx, leaseKey(id), s.cfg.Holder, s.cfg.AttemptTimeout+15*time.Second)
	if errors.Is(err, store.ErrLeaseHeld) {
		// Another replica delivers it; our refresh learns the outcome.
		s.forget(id, s.now().Add(s.cfg.AttemptTimeout))
		return
	}
	if err != nil {
		s.log.Warn("claim alarm", "alarm", id, "err", err)
		s.forget(id, s.now().Add(s.cfg.RetryBase))
		return
	}
	defer func() { _ = s.st.ReleaseLease(ctx, leaseKey(id), s.cfg.Holder) }()
	a, err := s.st.GetAlarm(ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		s.drop(id)
		return
	case err != nil:
		s.log.Warn("read alarm", "alarm", id, "err", err)
		s.forget(id, s.now().Add(s.cfg.RetryBase))
		return
	case a.State != store.AlarmPending:
		s.drop(id)
		return
	case a.NextAttempt.After(s.now()):
		s.forget(id, a.NextAttempt) // another replica rescheduled it
		return
	}
	attempt := a.Attempts + 1
	actx, cancel := context.WithTimeout(runCtx, s.cfg.AttemptTimeout)
	derr := s.deliver(actx, a, attempt)
	cancel()
	log := s.log.With("alarm", a.ID, "actor", a.Key(), "attempt", attempt)
	if derr != nil && runCtx.Err() != nil {
		log.Info("alarm delivery cut by shutdown; it stays pending", "err", derr)
		return
	}
	if derr == nil || errors.Is(derr, errGone) {
		if derr != nil {
			log.Info("alarm dropped: its actor is gone", "err", derr)
			s.cfg.Metrics.Attempt(metrics.AlarmDropped, 0)
		} else {
			log.Info("alarm delivered", "late", s.now().Sub(a.At).Round(time.Millisecond))
			s.cfg.Metrics.Attempt(metrics.AlarmDelivered, s.now().Sub(a.At))
			s.watchIdle(a.Key(), a.ActorUID)
		}
		if err := s.st.DeleteAlarm(ctx, a.ID); err != nil && !errors.Is(err, store.ErrNotFound) {
			// Delivered again at the next attempt: at least once.
			log.Warn("delete delivered alarm", "err", err)
			s.forget(id, s.now().Add(s.cfg.RetryBase))
			return
		}
		s.drop(id)
		return
	}
	n := *a
	n.Attempts, n.Message = attempt, derr.Error()
	if now := s.now(); !now.Before(a.At.Add(s.cfg.RetryFor)) {
		n.State = store.AlarmFailed
		log.Warn("alarm failed, no more retries", "err", derr, "retriedFor", s.cfg.RetryFor)
		s.cfg.Metrics.Attempt(metrics.AlarmFailed, 0)
	} else {
		n.NextAttempt = now.Add(s.backoff(attempt))
		log.Info("alarm delivery failed, will retry", "err", derr, "next", n.NextAttempt)
		s.cfg.Metrics.Attempt(metrics.AlarmRetry, 0)
	}
	if _, err := s.st.UpdateAlarm(ctx, &n); err != nil {
		log.Warn("record failed alarm attempt", "err", err)
		s.forget(id, s.now().Add(s.cfg.RetryBase))
		return
	}
	if n.State == store.AlarmFailed {
		s.drop(id)
	} else {
		s.forget(id, n.NextAttempt)
	}
}

// idleWatch is an actor an alarm woke: incarnation uid, asked at at.
type idleWatch struct {
	uid string
	at  time.Time
}

// watchIdle starts watching actor k (incarnation uid), which an alarm
// just woke, for idleness; without an Idler it does nothing. The watch is
// in memory: after a restart an actor an alarm woke is put away by
// eviction when its worker is needed, or by a router once it routes to
// it.
func (s *Scheduler) watchIdle(k names.ActorKey, uid string) {
	if _, ok := s.resumer.(Idler); !ok {
		return
	}
	s.mu.Lock()
	s.watch[k] = idleWatch{uid: uid, at: s.now()}
	s.mu.Unlock()
}

// checkIdle asks the Idler about watched actor k and keeps or ends the
// watch as it answers.
func (s *Scheduler) checkIdle(ctx context.Context, k names.ActorKey) {
	s.mu.Lock()
	w := s.watch[k]
	s.mu.Unlock()
	again, err := s.resumer.(Idler).PutAwayIfIdle(ctx, k, w.uid)
	if err != nil && ctx.Err() == nil {
		s.log.Warn("put away an actor an alarm woke", "actor", k, "err", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.watching, k)
	if cur, ok := s.watch[k]; ok && cur.uid == w.uid && cur.at.Equal(w.at) {
		// Not re-armed by a delivery meanwhile.
		if again.IsZero() || ctx.Err() != nil {
			delete(s.watch, k)
		} else {
			s.watch[k] = idleWatch{uid: w.uid, at: again}
		}
	}
}

// backoff is the wait after the attempt-th failed attempt.
func (s *Scheduler) backoff(attempt int) time.Duration {
	d := s.cfg.RetryBase
	for i := 1; i < attempt && d < s.cfg.RetryMax; i++ {
		d *= 2
	}
	return min(d, s.cfg.RetryMax)
}

// forget reschedules id in memory for at.
func (s *Scheduler) forget(id string, at time.Time) {
	s.mu.Lock()
	if _, ok := s.due[id]; ok {
		s.due[id] = at
	}
	s.mu.Unlock()
}

// drop removes id from memory.
func (s *Scheduler) drop(id string) {
	s.mu.Lock()
	delete(s.due, id)
	s.mu.Unlock()
}

// errGone: the alarm's actor incarnation no longer exists; the alarm is
// dropped, not retried.
var errGone = errors.New("actor incarnation gone")

// deliverHTTP resumes a's actor and POSTs to it through its worker's
// tunnel, as the router sends requests (internal/tunnelproto). A 2xx,
// 3xx or 4xx answer is a delivery (the actor answered); a 5xx, the
// tunnel's own answer, 421 or a transport error is a failure.
func (s *Scheduler) deliverHTTP(ctx context.Context, a *store.Alarm, attempt int) error {
	act, err := s.resumer.Resume(ctx, a.Key())
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("%w: %w", errGone, err)
	}
	if err != nil {
		return fmt.Errorf("resume: %w", err)
	}
	if act.UID != a.ActorUID {
		return fmt.Errorf("%w: actor %s is another incarnation (%s, alarm for %s)", errGone, a.Key(), act.UID, a.ActorUID)
	}
	if act.Worker == "" {
		return fmt.Errorf("resumed actor %s holds no worker (state %s)", a.Key(), act.State)
	}
	w, err := s.st.GetWorker(ctx, act.Worker)
	if err != nil {
		return fmt.Errorf("worker %s: %w", act.Worker, err)
	}
	body := fmt.Sprintf(`{"id":%q,"time":%q,"attempt":%d}`, a.ID, a.At.UTC().Format(time.RFC3339Nano), attempt)
	// Only the node that registered the worker may answer for it
	// (pki.NodeTransport checks the tunnel's certificate).
	req, err := http.NewRequestWithContext(tunnelproto.WithNode(ctx, w.Node), http.MethodPost, s.scheme+"://"+w.TunnelAddr+a.Path, strings.NewReader(body))
	if err != nil {
		return fmt.Errorf("%w: %w", errGone, err) // the path was validated; cannot be retried into shape
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(tunnelproto.HeaderWorker, act.Worker)
	req.Header.Set(tunnelproto.HeaderActorUID, act.UID)
	if act.Assignment != 0 {
		req.Header.Set(tunnelproto.HeaderAssignment, strconv.FormatInt(act.Assignment, 10))
	}
	req.Header.Set(tunnelproto.HeaderRequestID, fmt.Sprintf("alarm-%s-%d", a.ID, attempt))
	req.Header.Set(HeaderID, a.ID)
	req.Header.Set(HeaderTime, a.At.UTC().Format(time.RFC3339Nano))
	req.Header.Set(HeaderAttempt, fmt.Sprint(attempt))
	res, err := s.client.Do(req)
	if err != nil {
		return fmt.Errorf("POST %s to worker %s: %w", a.Path, act.Worker, err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
	_ = res.Body.Close()
	switch {
	case res.StatusCode == tunnelproto.StatusStale:
		return fmt.Errorf("worker %s no longer hosts the actor (421); it moved before the delivery", act.Worker)
	case res.Header.Get(tunnelproto.HeaderError) != "":
		return fmt.Errorf("actor unreachable on worker %s: %s (%d)", act.Worker, res.Header.Get(tunnelproto.HeaderError), res.StatusCode)
	case res.StatusCode >= 500:
		return fmt.Errorf("actor answered %s", res.Status)
	}
	return nil
}
