package metrics

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"substrate.dev/ate/internal/activation"
	"substrate.dev/ate/internal/store"
)

// Collectors added for issue 19 (router parking and streams, workflow
// durations, actors by state, store conflicts, node restores and
// snapshots). They live in the same structs as the rest; this file only
// builds them.

// Park outcomes (ate_router_park_outcomes_total's outcome): how a parked
// request's wait ended. Besides these, an activation.Kind's String
// (ParkActivated): resumed, joined, or warm, the lookup having found the
// actor running after all.
const (
	ParkBudget     = "budget"
	ParkGrace      = "grace"
	ParkClientGone = "client_gone"
	ParkFailed     = "failed"
)

var parkOutcomes = []string{activation.Resumed.String(), activation.Joined.String(), activation.Warm.String(),
	ParkBudget, ParkGrace, ParkClientGone, ParkFailed}

// actorState is the value of ate_lifecycle_actors's state for s: the
// store's state, lower case.
func actorState(s store.ActorState) string { return strings.ToLower(string(s)) }

// Worker states of ate_node_workers: free (no actor), busy (hosting or
// starting one).
var workerStates = []string{"free", "busy"}

// Snapshot byte directions of ate_node_snapshot_bytes_total.
const (
	BytesWritten = "written"
	BytesRead    = "read"
)

type routerMore struct {
	parkOutcomes *prometheus.CounterVec
	open         prometheus.Gauge
}

func newRouterMore() routerMore {
	m := routerMore{
		parkOutcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ate_router_park_outcomes_total",
			Help: "Parked requests by how their wait ended.",
		}, []string{"outcome"}),
		open: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ate_router_open_streams",
			Help: "Requests being proxied to actors now (streams and upgraded connections included).",
		}),
	}
	for _, o := range parkOutcomes {
		m.parkOutcomes.WithLabelValues(o)
	}
	return m
}

// ParkOutcome counts a park that failed with outcome (Park*).
func (r *Router) ParkOutcome(outcome string) {
	if r == nil {
		return
	}
	r.parkOutcomes.WithLabelValues(outcome).Inc()
}

// ParkActivated counts a park that ended with its actor found, how.
func (r *Router) ParkActivated(how activation.Kind) {
	if r == nil {
		return
	}
	r.parkOutcomes.WithLabelValues(how.String()).Inc()
}

// Open adds delta to the requests being proxied.
func (r *Router) Open(delta int) {
	if r == nil {
		return
	}
	r.open.Add(float64(delta))
}

type lifecycleMore struct {
	checkpointSeconds *prometheus.HistogramVec
	actors            *prometheus.GaugeVec
	leaseConflicts    prometheus.Counter
	casRetries        prometheus.Counter
}

func newLifecycleMore() lifecycleMore {
	m := lifecycleMore{
		checkpointSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ate_lifecycle_checkpoint_seconds",
			Help:    "Duration of suspends and pauses of actors, by action and outcome.",
			Buckets: waitBuckets,
		}, []string{"action", "outcome"}),
		actors: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ate_lifecycle_actors",
			Help: "Actors by state, from the store's counts (refreshed on an interval).",
		}, []string{"state"}),
		leaseConflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ate_lifecycle_lease_conflicts_total",
			Help: "Attempts to take an actor's lease that found it held by another API server.",
		}),
		casRetries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ate_lifecycle_cas_retries_total",
			Help: "Actor writes retried after a compare-and-set conflict.",
		}),
	}
	for _, a := range actions {
		for _, o := range outcomes {
			m.checkpointSeconds.WithLabelValues(a, o)
		}
	}
	for _, s := range store.ActorStates() {
		m.actors.WithLabelValues(actorState(s))
	}
	return m
}

// CheckpointDuration records a suspend or pause (action) that took d,
// failed if err is set.
func (l *Lifecycle) CheckpointDuration(action string, d time.Duration, err error) {
	if l == nil {
		return
	}
	l.checkpointSeconds.WithLabelValues(action, outcome(err)).Observe(d.Seconds())
}

// LeaseConflict counts an actor lease found held elsewhere.
func (l *Lifecycle) LeaseConflict() {
	if l == nil {
		return
	}
	l.leaseConflicts.Inc()
}

// CASRetry counts an actor write retried after a conflict.
func (l *Lifecycle) CASRetry() {
	if l == nil {
		return
	}
	l.casRetries.Inc()
}

// ActorsRefresh is how often RunActorCounts asks the store for its
// counts: one GROUP BY (PostgreSQL) or one count of the state index
// (bbolt) per interval, whatever the scrape rate.
const ActorsRefresh = 5 * time.Second

// RunActorCounts sets ate_lifecycle_actors from count (actors by state,
// store.ActorCounter's CountActors) now and then every every
// (ActorsRefresh if 0) until ctx ends; failures are logged at debug and
// leave the last values. Returns ctx's error.
func (l *Lifecycle) RunActorCounts(ctx context.Context, count func(context.Context) (map[store.ActorState]int, error), every time.Duration, log *slog.Logger) error {
	if l == nil {
		<-ctx.Done()
		return ctx.Err()
	}
	if every <= 0 {
		every = ActorsRefresh
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		counts, err := count(ctx)
		if err == nil {
			for _, s := range store.ActorStates() {
				l.actors.WithLabelValues(actorState(s)).Set(float64(counts[s]))
			}
		} else if ctx.Err() == nil && log != nil {
			log.Debug("count actors for metrics", "err", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// RunActorCounts keeps ate_lifecycle_actors at st's counts
// (Lifecycle.RunActorCounts, every ActorsRefresh) until ctx ends, then
// returns nil. Without metrics (a nil m), or over a store that cannot
// count (not a store.ActorCounter, which is logged), it only waits for
// ctx.
func (m *Metrics) RunActorCounts(ctx context.Context, st store.Store, log *slog.Logger) error {
	c, ok := st.(store.ActorCounter)
	if m == nil || !ok {
		if m != nil && log != nil {
			log.Warn("the record store cannot count actors; ate_lifecycle_actors stays 0")
		}
		<-ctx.Done()
		return nil
	}
	_ = m.Lifecycle.RunActorCounts(ctx, c.CountActors, 0, log)
	return nil
}

type nodeMore struct {
	workers           *workersCollector
	restoreSeconds    *prometheus.HistogramVec
	checkpointSeconds *prometheus.HistogramVec
	snapshotBytes     *prometheus.CounterVec
	imageCache        *prometheus.CounterVec
	startWait         prometheus.Histogram
}

func newNodeMore() nodeMore {
	m := nodeMore{
		workers: &workersCollector{vec: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ate_node_workers",
			Help: "This node's workers by state.",
		}, []string{"state"})},
		restoreSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ate_node_start_seconds",
			Help:    "Duration of actor starts on this node (restore or boot, wakeup probe, hook), by kind and outcome.",
			Buckets: waitBuckets,
		}, []string{"kind", "outcome"}),
		checkpointSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ate_node_checkpoint_seconds",
			Help:    "Duration of checkpoints on this node (drain excluded), by outcome.",
			Buckets: waitBuckets,
		}, []string{"outcome"}),
		snapshotBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ate_node_snapshot_bytes_total",
			Help: "Snapshot bytes this node committed (written) and opened for restores (read).",
		}, []string{"direction"}),
		startWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ate_node_start_wait_seconds",
			Help:    "Time actor starts on this node waited for their turn to restore or boot (--max-parallel-starts).",
			Buckets: waitBuckets,
		}),
		imageCache: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ate_node_image_cache_total",
			Help: "Image lookups of actor starts, by whether the unpacked image was cached.",
		}, []string{"result"}),
	}
	for _, s := range workerStates {
		m.workers.vec.WithLabelValues(s)
	}
	for _, k := range []string{"restore", "boot"} {
		for _, o := range outcomes {
			m.restoreSeconds.WithLabelValues(k, o)
		}
	}
	for _, o := range outcomes {
		m.checkpointSeconds.WithLabelValues(o)
	}
	m.snapshotBytes.WithLabelValues(BytesWritten)
	m.snapshotBytes.WithLabelValues(BytesRead)
	m.imageCache.WithLabelValues("hit")
	m.imageCache.WithLabelValues("miss")
	return m
}

// WorkerSource makes ate_node_workers read src at each scrape: it
// returns the node's free and busy workers (a walk of its few slots).
func (n *Node) WorkerSource(src func() (free, busy int)) {
	if n == nil {
		return
	}
	n.workers.src.Store(&src)
}

// workersCollector is ate_node_workers, refreshed from src when
// collected. Safe for concurrent use.
type workersCollector struct {
	vec *prometheus.GaugeVec
	src atomic.Pointer[func() (free, busy int)]
}

func (w *workersCollector) Describe(ch chan<- *prometheus.Desc) { w.vec.Describe(ch) }

func (w *workersCollector) Collect(ch chan<- prometheus.Metric) {
	if src := w.src.Load(); src != nil {
		free, busy := (*src)()
		w.vec.WithLabelValues("free").Set(float64(free))
		w.vec.WithLabelValues("busy").Set(float64(busy))
	}
	w.vec.Collect(ch)
}

// Start records an actor start that took d, a restore or a boot, failed
// if err is set.
func (n *Node) Start(restore bool, d time.Duration, err error) {
	if n == nil {
		return
	}
	kind := "boot"
	if restore {
		kind = "restore"
	}
	n.restoreSeconds.WithLabelValues(kind, outcome(err)).Observe(d.Seconds())
}

// StartWait records how long a start waited for its turn to restore or
// boot.
func (n *Node) StartWait(d time.Duration) {
	if n == nil {
		return
	}
	n.startWait.Observe(d.Seconds())
}

// Checkpoint records a checkpoint that took d, failed if err is set.
func (n *Node) Checkpoint(d time.Duration, err error) {
	if n == nil {
		return
	}
	n.checkpointSeconds.WithLabelValues(outcome(err)).Observe(d.Seconds())
}

// SnapshotBytes adds b bytes in direction (BytesWritten, BytesRead).
func (n *Node) SnapshotBytes(direction string, b int64) {
	if n == nil || b <= 0 {
		return
	}
	n.snapshotBytes.WithLabelValues(direction).Add(float64(b))
}

// ImageCache counts an image lookup that found the image unpacked (hit)
// or had to fetch or unpack it.
func (n *Node) ImageCache(hit bool) {
	if n == nil {
		return
	}
	v := "miss"
	if hit {
		v = "hit"
	}
	n.imageCache.WithLabelValues(v).Inc()
}

// GRPC is a process's gRPC server and client metrics (grpc_server_*,
// grpc_client_*), from go-grpc-middleware's Prometheus provider.
type GRPC struct {
	server *grpcprom.ServerMetrics
	client *grpcprom.ClientMetrics
}

func newGRPC() *GRPC {
	return &GRPC{
		server: grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram(grpcprom.WithHistogramBuckets(waitBuckets))),
		client: grpcprom.NewClientMetrics(grpcprom.WithClientHandlingTimeHistogram(grpcprom.WithHistogramBuckets(waitBuckets))),
	}
}

// ServerOptions are the interceptors that count a server's calls; none on
// a nil receiver.
func (g *GRPC) ServerOptions() []grpc.ServerOption {
	if g == nil {
		return nil
	}
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(g.server.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(g.server.StreamServerInterceptor()),
	}
}

// InitServer exports every method of s at zero.
func (g *GRPC) InitServer(s *grpc.Server) {
	if g != nil {
		g.server.InitializeMetrics(s)
	}
}

// DialOptions are the interceptors that count a client's calls; none on
// a nil receiver.
func (g *GRPC) DialOptions() []grpc.DialOption {
	if g == nil {
		return nil
	}
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(g.client.UnaryClientInterceptor()),
		grpc.WithChainStreamInterceptor(g.client.StreamClientInterceptor()),
	}
}

// Store is the record store's collectors (the API server's store).
type Store struct {
	commitSeconds prometheus.Histogram
	batch         prometheus.Histogram
}

func newStore() *Store {
	return &Store{
		commitSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ate_store_commit_seconds",
			Help:    "Duration of the record store's committed write transactions.",
			Buckets: []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1},
		}),
		batch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ate_store_commit_writes",
			Help:    "Writes per committed transaction (bbolt's group commit; 1 for PostgreSQL).",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128},
		}),
	}
}

// Commit records a committed transaction of writes writes that took d
// (store.CommitObserver).
func (s *Store) Commit(d time.Duration, writes int) {
	if s == nil {
		return
	}
	s.commitSeconds.Observe(d.Seconds())
	s.batch.Observe(float64(writes))
}
