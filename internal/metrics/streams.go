package metrics

import "github.com/prometheus/client_golang/prometheus"

// The collectors of long-lived streams (docs/actors.md, Long-lived
// streams).

func newHeldStreams() prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "ate_router_held_streams",
		Help: "Listening streams the router holds, without resuming their actor, until it runs (streams.wakeOn: request).",
	})
}

func newStreamsEnded() prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{
		Name: "ate_node_streams_ended_total",
		Help: "Listening streams the worker tunnel ended cleanly because a checkpoint began draining their worker.",
	})
}

// HeldStreams adds delta to the listening streams held now.
func (r *Router) HeldStreams(delta int) {
	if r == nil {
		return
	}
	r.heldStreams.Add(float64(delta))
}

// StreamEnded counts a listening stream ended cleanly by a checkpoint's
// drain.
func (n *Node) StreamEnded() {
	if n == nil {
		return
	}
	n.streamsEnded.Inc()
}
