// Package metrics holds ate's Prometheus collectors (all named ate_*).
// New builds one set; the wiring (internal/up) registers it on a
// registry it serves and hands each part to its component: router,
// lifecycle and node take an optional *Router, *Lifecycle or *Node, nil
// meaning no metrics, and every method is safe on a nil receiver.
//
// No label carries an actor's name or uid: every label value comes from
// a fixed set (docs/observability.md lists them), so the number of
// series is bounded whatever the number of actors.
package metrics

import (
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"substrate.dev/ate/internal/activation"
	"substrate.dev/ate/internal/checkpoint"
)

// Metrics is one set of ate's collectors.
type Metrics struct {
	Router    *Router
	Lifecycle *Lifecycle
	Node      *Node
	Alarms    *Alarms
	// GRPC is the gRPC servers' and clients' metrics (not ate_*).
	GRPC *GRPC
	// Store is the record store's.
	Store *Store
}

// New returns a set of collectors, every bounded label combination
// initialised to zero so that rates start from the process's start.
func New() *Metrics {
	return &Metrics{Router: newRouter(), Lifecycle: newLifecycle(), Node: newNode(), Alarms: newAlarms(), GRPC: newGRPC(), Store: newStore()}
}

// Collectors returns every ate_* collector of m.
func (m *Metrics) Collectors() []prometheus.Collector {
	r, l, n, a := m.Router, m.Lifecycle, m.Node, m.Alarms
	return []prometheus.Collector{
		r.requests, r.activationWait, r.parked, r.failures, r.heldStreams,
		l.resumes, l.resumeSeconds, l.checkpoints, l.evictions, l.waiters, l.expired,
		n.standbyStarts, n.streamsEnded, n.selfRefused,
		a.attempts, a.lateness,
		r.parkOutcomes, r.open,
		l.checkpointSeconds, l.actors, l.leaseConflicts, l.casRetries,
		n.workers, n.restoreSeconds, n.checkpointSeconds, n.snapshotBytes, n.imageCache, n.startWait,
		m.Store.commitSeconds, m.Store.batch,
	}
}

// NewRegistry returns a registry holding m's collectors and the Go
// runtime's and process's (go_*, process_*).
func NewRegistry(m *Metrics) (*prometheus.Registry, error) {
	reg := prometheus.NewRegistry()
	cs := append(m.Collectors(), collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.GRPC.server, m.GRPC.client)
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return reg, nil
}

// Label values. An activation label is an activation.Kind's String (the
// router's Ate-Activation token, or "none"), a source label a
// checkpoint.Source's.
const (
	OutcomeOK     = "ok"
	OutcomeFailed = "failed"
	// OutcomeSkipped: an eviction that found its victim busy or no
	// longer wanted, and left it running.
	OutcomeSkipped = "skipped"
)

// FailureReasons are the values of ate_router_failures_total's reason.
var FailureReasons = []string{
	"no_actor", "invalid", "not_found", "park_full", "park_budget", "park_grace", "node_unreachable", "stale",
	"route_timeout", "tunnel_cut", "app_refused", "app_error", "no_capacity", "not_resumable",
	"resume_failed", "control_plane", "upstream", "client_gone", "held_draining", "unauthorized",
	"foreign_host",
}

var (
	activations = []activation.Kind{activation.Warm, activation.Resumed, activation.Joined, activation.None}
	codeClasses = []string{"1xx", "2xx", "3xx", "4xx", "5xx"}
	sources     = []checkpoint.Source{checkpoint.SourcePaused, checkpoint.SourceDurable, checkpoint.SourceGolden, checkpoint.SourceCold}
	outcomes    = []string{OutcomeOK, OutcomeFailed}
	actions     = []string{checkpoint.Suspend.String(), checkpoint.Pause.String()}
	reasons     = []string{"requested", "idle", "evicted", "self_requested"}
)

// Buckets in seconds: from a warm restore (tens of ms) to a cold boot of
// an interpreter (~11 s) and a long park.
var waitBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 60}

// Router is the router's collectors.
type Router struct {
	routerMore
	requests       *prometheus.CounterVec
	activationWait *prometheus.HistogramVec
	parked         prometheus.Gauge
	failures       *prometheus.CounterVec
	heldStreams    prometheus.Gauge
	// requestsBy is requests' children, resolved once (a label lookup
	// hashes and locks): [activations index][codeClasses index].
	requestsBy [][]prometheus.Counter
}

func newRouter() *Router {
	r := &Router{
		routerMore: newRouterMore(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ate_router_requests_total",
			Help: "Requests to actors answered by the router, by activation and status class.",
		}, []string{"activation", "code"}),
		activationWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ate_router_activation_wait_seconds",
			Help:    "How long requests that resumed or joined a resume were parked.",
			Buckets: waitBuckets,
		}, []string{"activation"}),
		parked: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ate_router_parked_requests",
			Help: "Requests waiting for their actor's lookup or resume.",
		}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ate_router_failures_total",
			Help: "Requests the router answered itself, by reason.",
		}, []string{"reason"}),
		heldStreams: newHeldStreams(),
	}
	r.requestsBy = make([][]prometheus.Counter, len(activations))
	for i, a := range activations {
		for _, c := range codeClasses {
			r.requestsBy[i] = append(r.requestsBy[i], r.requests.WithLabelValues(a.String(), c))
		}
	}
	for _, a := range []activation.Kind{activation.Resumed, activation.Joined} {
		r.activationWait.WithLabelValues(a.String())
	}
	for _, reason := range FailureReasons {
		r.failures.WithLabelValues(reason)
	}
	return r
}

// Request counts a request answered with status after activation how
// (activation.None when it failed before finding its actor).
func (r *Router) Request(how activation.Kind, status int) {
	if r == nil {
		return
	}
	class := codeClassIndex(status)
	for i, a := range activations {
		if a == how {
			r.requestsBy[i][class].Inc()
			return
		}
	}
	r.requests.WithLabelValues(how.String(), codeClasses[class]).Inc()
}

// ActivationWait records that a request parked for d and then resumed or
// joined (how).
func (r *Router) ActivationWait(how activation.Kind, d time.Duration) {
	if r == nil {
		return
	}
	r.activationWait.WithLabelValues(how.String()).Observe(d.Seconds())
}

// Parked adds delta to the parked requests.
func (r *Router) Parked(delta int) {
	if r == nil {
		return
	}
	r.parked.Add(float64(delta))
}

// Failure counts a request the router failed for reason (FailureReasons).
func (r *Router) Failure(reason string) {
	if r == nil {
		return
	}
	r.failures.WithLabelValues(reason).Inc()
}

// codeClass is "2xx" for 200..299 and so on; 499 (client gone) is 4xx.
func codeClass(status int) string { return codeClasses[codeClassIndex(status)] }

// codeClassIndex is codeClass's index in codeClasses.
func codeClassIndex(status int) int {
	if status < 100 || status > 599 {
		return len(codeClasses) - 1
	}
	return status/100 - 1
}

// Lifecycle is the lifecycle workflows' collectors.
type Lifecycle struct {
	lifecycleMore
	resumes       *prometheus.CounterVec
	resumeSeconds *prometheus.HistogramVec
	checkpoints   *prometheus.CounterVec
	evictions     *prometheus.CounterVec
	waiters       prometheus.Gauge
	expired       prometheus.Counter
}

func newLifecycle() *Lifecycle {
	l := &Lifecycle{
		lifecycleMore: newLifecycleMore(),
		resumes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ate_lifecycle_resumes_total",
			Help: "Resumes that got a worker, by what they restored and outcome.",
		}, []string{"source", "outcome"}),
		resumeSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ate_lifecycle_resume_seconds",
			Help:    "Time from a resume's worker claim to RUNNING (successful resumes), by source.",
			Buckets: waitBuckets,
		}, []string{"source"}),
		checkpoints: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ate_lifecycle_checkpoints_total",
			Help: "Suspends and pauses of actors, by action, reason and outcome.",
		}, []string{"action", "reason", "outcome"}),
		evictions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ate_lifecycle_evictions_total",
			Help: "Evictions started to free a worker for a waiting resume, by outcome.",
		}, []string{"outcome"}),
		waiters: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ate_lifecycle_capacity_waiters",
			Help: "Resumes waiting in the capacity queue for a worker.",
		}),
		expired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ate_lifecycle_actors_expired_total",
			Help: "Actors the expiry sweep deleted, unused past their template's ttl.deleteAfterIdle.",
		}),
	}
	for _, s := range sources {
		l.resumeSeconds.WithLabelValues(s.String())
		for _, o := range outcomes {
			l.resumes.WithLabelValues(s.String(), o)
		}
	}
	for _, a := range actions {
		for _, r := range reasons {
			for _, o := range outcomes {
				l.checkpoints.WithLabelValues(a, r, o)
			}
		}
	}
	for _, o := range []string{OutcomeOK, OutcomeFailed, OutcomeSkipped} {
		l.evictions.WithLabelValues(o)
	}
	return l
}

// Resume records a resume from source that took d, failed if err is
// set.
func (l *Lifecycle) Resume(source checkpoint.Source, d time.Duration, err error) {
	if l == nil {
		return
	}
	l.resumes.WithLabelValues(source.String(), outcome(err)).Inc()
	if err == nil {
		l.resumeSeconds.WithLabelValues(source.String()).Observe(d.Seconds())
	}
}

// Checkpoint counts a suspend or pause (action) for reason (a
// store.CheckpointReason, e.g. "SELF_REQUESTED"), failed if err is set.
func (l *Lifecycle) Checkpoint(action, reason string, err error) {
	if l == nil {
		return
	}
	reason = strings.ToLower(reason)
	if reason == "" {
		reason = "requested"
	}
	l.checkpoints.WithLabelValues(action, reason, outcome(err)).Inc()
}

// Eviction counts an eviction that ended with outcome (Outcome*).
func (l *Lifecycle) Eviction(outcome string) {
	if l == nil {
		return
	}
	l.evictions.WithLabelValues(outcome).Inc()
}

// Expired counts an actor the expiry sweep deleted.
func (l *Lifecycle) Expired() {
	if l == nil {
		return
	}
	l.expired.Inc()
}

// Waiters adds delta to the resumes waiting for a worker.
func (l *Lifecycle) Waiters(delta int) {
	if l == nil {
		return
	}
	l.waiters.Add(float64(delta))
}

func outcome(err error) string {
	if err != nil {
		return OutcomeFailed
	}
	return OutcomeOK
}

// Node is the node agent's collectors.
type Node struct {
	nodeMore
	standbyStarts *prometheus.CounterVec
	streamsEnded  prometheus.Counter
	selfRefused   *prometheus.CounterVec
}

func newNode() *Node {
	n := &Node{streamsEnded: newStreamsEnded(), nodeMore: newNodeMore(), standbyStarts: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ate_node_standby_starts_total",
		Help: "Actor starts on this node, by whether a standby sandbox was ready for them.",
	}, []string{"standby"})}
	n.standbyStarts.WithLabelValues("hit")
	n.standbyStarts.WithLabelValues("miss")
	n.selfRefused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ate_node_self_service_refused_total",
		Help: "Connections and calls the workers' self-service endpoints refused for exceeding their limits.",
	}, []string{"why"})
	for _, why := range []string{SelfRefusedConnections, SelfRefusedRate} {
		n.selfRefused.WithLabelValues(why)
	}
	return n
}

// Why a self-service endpoint refused (ate_node_self_service_refused_total's why).
const (
	// SelfRefusedConnections: the worker held its most connections.
	SelfRefusedConnections = "connections"
	// SelfRefusedRate: the actor called faster than its rate.
	SelfRefusedRate = "rate"
)

// SelfServiceRefused counts a connection or call a self-service endpoint
// refused, why being SelfRefusedConnections or SelfRefusedRate.
func (n *Node) SelfServiceRefused(why string) {
	if n == nil {
		return
	}
	n.selfRefused.WithLabelValues(why).Inc()
}

// StandbyStart counts a start that found a standby (hit) or not.
func (n *Node) StandbyStart(hit bool) {
	if n == nil {
		return
	}
	v := "miss"
	if hit {
		v = "hit"
	}
	n.standbyStarts.WithLabelValues(v).Inc()
}

// Alarm attempt outcomes (ate_alarm_attempts_total's outcome).
const (
	// AlarmDelivered: the actor answered; the alarm is done.
	AlarmDelivered = "delivered"
	// AlarmRetry: the attempt failed and will be retried.
	AlarmRetry = "retry"
	// AlarmFailed: the attempt failed and the retry budget is spent.
	AlarmFailed = "failed"
	// AlarmDropped: the alarm's actor incarnation is gone.
	AlarmDropped = "dropped"
)

// Alarms is the alarm scheduler's collectors (internal/alarm).
type Alarms struct {
	attempts *prometheus.CounterVec
	lateness prometheus.Histogram
}

func newAlarms() *Alarms {
	a := &Alarms{
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ate_alarm_attempts_total",
			Help: "Alarm delivery attempts, by outcome.",
		}, []string{"outcome"}),
		lateness: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ate_alarm_delivery_lateness_seconds",
			Help:    "Time from an alarm's time to its delivery (answered attempts).",
			Buckets: waitBuckets,
		}),
	}
	for _, o := range []string{AlarmDelivered, AlarmRetry, AlarmFailed, AlarmDropped} {
		a.attempts.WithLabelValues(o)
	}
	return a
}

// Attempt counts a delivery attempt with outcome (Alarm*); late is how
// long after the alarm's time it was answered, observed for delivered.
func (a *Alarms) Attempt(outcome string, late time.Duration) {
	if a == nil {
		return
	}
	a.attempts.WithLabelValues(outcome).Inc()
	if outcome == AlarmDelivered {
		a.lateness.Observe(max(late, 0).Seconds())
	}
}
