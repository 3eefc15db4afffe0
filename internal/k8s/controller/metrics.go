package controller

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/status"
)

// Metrics are the controller's own collectors, besides
// controller-runtime's controller_runtime_reconcile_* (both served on
// --management-addr's /metrics).
type Metrics struct {
	apiCalls *prometheus.CounterVec
}

// Calls to the API server counted in ate_controller_api_calls_total.
var apiCalls = []string{"DrainNode", "RemoveNode", "ListWorkers", "ListNodes"}

// NewMetrics registers the controller's collectors on reg. A registry
// that already holds them (a second controller in one test process)
// lends its own. Errors: any other registration failure.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	calls := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ate_controller_api_calls_total",
		Help: "Calls of the Kubernetes controller to the API server, by call and gRPC code (OK, Unavailable, …).",
	}, []string{"call", "code"})
	if err := reg.Register(calls); err != nil {
		var already prometheus.AlreadyRegisteredError
		if !errors.As(err, &already) {
			return nil, err
		}
		calls = already.ExistingCollector.(*prometheus.CounterVec)
	}
	for _, c := range apiCalls {
		calls.WithLabelValues(c, "OK")
	}
	return &Metrics{apiCalls: calls}, nil
}

// observe counts one call's outcome (err nil: OK).
func (m *Metrics) observe(call string, err error) {
	m.apiCalls.WithLabelValues(call, status.Code(err).String()).Inc()
}
